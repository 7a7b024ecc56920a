/// Paths and hex digits as text, without NSString or `String(format:)`: those would link
/// CoreFoundation and ICU into the small clients (the keychainfs front, the git helper), whose
/// start-up is most of a lookup.
///
/// Paths are split on bytes, as the kernel splits them: `String`'s own `split` and
/// `lastIndex(of:)` work on characters, and a `/` followed by a combining mark is one character
/// with it, so a path would not be split there.
package enum PathText {
    static let slash = UInt8(ascii: "/")

    /// `text` split at each `separator` byte (an ASCII one, so every part is whole UTF-8).
    package static func split(_ text: String, on separator: UInt8 = Self.slash, maxSplits: Int = .max,
                              omittingEmpty: Bool = true) -> [String] {
        text.utf8.split(separator: separator, maxSplits: maxSplits, omittingEmptySubsequences: omittingEmpty)
            .map { String(decoding: $0, as: UTF8.self) }
    }

    /// Whether `path` begins with `/`, as the kernel reads it.
    package static func isAbsolute(_ path: String) -> Bool { path.utf8.first == slash }

    /// "/a/b" → "/a", "/a/b/" → "/a", "/a" → "/", "/" → "/", "a" → "".
    package static func parent(_ path: String) -> String {
        let trimmed = withoutTrailingSlashes(path)
        guard let slash = trimmed.utf8.lastIndex(of: Self.slash) else { return "" }
        if slash == trimmed.startIndex { return "/" }
        return withoutTrailingSlashes(String(trimmed[..<slash]))
    }

    /// "/a/b" → "b", "/a/b/" → "b", "/" → "/".
    package static func lastComponent(_ path: String) -> String {
        let trimmed = withoutTrailingSlashes(path)
        guard trimmed != "/", let slash = trimmed.utf8.lastIndex(of: Self.slash) else { return trimmed }
        return String(trimmed[trimmed.utf8.index(after: slash)...])
    }

    /// An absolute path with "." and ".." resolved by name and doubled slashes dropped, for a
    /// path that realpath cannot resolve.
    package static func standardized(_ path: String) -> String {
        var parts: [String] = []
        for part in split(path) {
            switch part {
            case ".": continue
            case "..": if !parts.isEmpty { parts.removeLast() }
            default: parts.append(part)
            }
        }
        guard isAbsolute(path) else { return parts.joined(separator: "/") }
        return "/" + parts.joined(separator: "/")
    }

    /// Lowercase hex, zero-padded to `width` digits.
    package static func hex<T: BinaryInteger>(_ value: T, width: Int) -> String {
        let digits = String(value, radix: 16)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }

    private static func withoutTrailingSlashes(_ path: String) -> String {
        var end = path.utf8.endIndex
        while path.utf8.distance(from: path.utf8.startIndex, to: end) > 1, path.utf8[path.utf8.index(before: end)] == slash {
            end = path.utf8.index(before: end)
        }
        return String(path[..<end])
    }
}
