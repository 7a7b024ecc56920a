/// Paths and hex digits as text, without NSString or `String(format:)`: those would link
/// CoreFoundation and ICU into the small clients (the keychainfs front, the git helper), whose
/// start-up is most of a lookup.
package enum PathText {
    /// "/a/b" → "/a", "/a/b/" → "/a", "/a" → "/", "/" → "/", "a" → "".
    package static func parent(_ path: String) -> String {
        let trimmed = withoutTrailingSlashes(path)
        guard let slash = trimmed.lastIndex(of: "/") else { return "" }
        if slash == trimmed.startIndex { return "/" }
        return withoutTrailingSlashes(String(trimmed[..<slash]))
    }

    /// "/a/b" → "b", "/a/b/" → "b", "/" → "/".
    package static func lastComponent(_ path: String) -> String {
        let trimmed = withoutTrailingSlashes(path)
        guard trimmed != "/", let slash = trimmed.lastIndex(of: "/") else { return trimmed }
        return String(trimmed[trimmed.index(after: slash)...])
    }

    /// An absolute path with "." and ".." resolved by name and doubled slashes dropped, for a
    /// path that realpath cannot resolve.
    package static func standardized(_ path: String) -> String {
        var parts: [Substring] = []
        for part in path.split(separator: "/", omittingEmptySubsequences: true) {
            switch part {
            case ".": continue
            case "..": if !parts.isEmpty { parts.removeLast() }
            default: parts.append(part)
            }
        }
        guard path.hasPrefix("/") else { return parts.joined(separator: "/") }
        return "/" + parts.joined(separator: "/")
    }

    /// Lowercase hex, zero-padded to `width` digits.
    package static func hex<T: BinaryInteger>(_ value: T, width: Int) -> String {
        let digits = String(value, radix: 16)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }

    private static func withoutTrailingSlashes(_ path: String) -> String {
        var p = Substring(path)
        while p.count > 1 && p.hasSuffix("/") { p = p.dropLast() }
        return String(p)
    }
}
