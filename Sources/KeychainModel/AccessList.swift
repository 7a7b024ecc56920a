#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import KeychainErrors

/// A program as a rule names it, before it is pinned.
package enum AccessProgram: Hashable, Sendable, CustomStringConvertible {
    /// An executable by absolute path (`/usr/bin/head`).
    case executable(String)
    /// An interpreter running one script (`/usr/bin/python3 /home/me/bin/sync.py`).
    case script(interpreter: String, script: String)
    /// A Flatpak app (`flatpak:org.gnome.Fractal`).
    case flatpak(String)

    package static let flatpakPrefix = "flatpak:"
    package static let maxPathBytes = 4096

    /// Paths compare as bytes (`String.isSame`): two forms of one name, or `K` and the Kelvin
    /// sign, are two files, so two programs.
    package static func == (a: Self, b: Self) -> Bool {
        switch (a, b) {
        case (.executable(let x), .executable(let y)), (.flatpak(let x), .flatpak(let y)): x.isSame(as: y)
        case (.script(let i, let s), .script(let j, let t)): i.isSame(as: j) && s.isSame(as: t)
        default: false
        }
    }

    package func hash(into hasher: inout Hasher) {
        switch self {
        case .executable(let p): hasher.combine(0); ExactName.hash(p, into: &hasher)
        case .script(let i, let s): hasher.combine(1); ExactName.hash(i, into: &hasher); ExactName.hash(s, into: &hasher)
        case .flatpak(let id): hasher.combine(2); ExactName.hash(id, into: &hasher)
        }
    }

    /// One line of `user.keychain.access`: fields separated by a space; a space, `%`, and
    /// control bytes inside a path are written `%XX`, as the tree escapes names.
    package var description: String {
        switch self {
        case .executable(let p): Self.escape(p)
        case .script(let i, let s): Self.escape(i) + " " + Self.escape(s)
        case .flatpak(let id): Self.flatpakPrefix + id
        }
    }

    /// Parses one line, or one `-T` argument, which takes the same form.
    package init(parsing line: String) throws(KeychainError) {
        let text = line.trimmingASCIISpaces
        if text.hasPrefix(Self.flatpakPrefix) {
            let id = String(text.dropFirst(Self.flatpakPrefix.count))
            guard Self.isValidAppID(id) else {
                throw .invalidInput("'\(id)' is not a Flatpak app id (like org.example.App)")
            }
            self = .flatpak(id)
            return
        }
        // On bytes: a space followed by a combining mark is one character with it (`PathText`).
        let fields = PathText.split(text, on: UInt8(ascii: " "))
        switch fields.count {
        case 1: self = .executable(try Self.path(fields[0]))
        case 2: self = .script(interpreter: try Self.path(fields[0]), script: try Self.path(fields[1]))
        case 0: throw .invalidInput("an empty program")
        default:
            throw .invalidInput("'\(text)': a program is a path, an interpreter and its script, or flatpak:APP-ID (write a space inside a path as %20)")
        }
    }

    /// Reverse-DNS with at least three elements, as flatpak requires.
    package static func isValidAppID(_ id: String) -> Bool {
        let elements = id.split(separator: ".", omittingEmptySubsequences: false)
        guard id.utf8.count <= 255, elements.count >= 3 else { return false }
        return elements.allSatisfy { e in
            guard let first = e.utf8.first, !(48...57).contains(first), first != 45 else { return false }
            return e.utf8.allSatisfy { c in (65...90).contains(c) || (97...122).contains(c) || (48...57).contains(c) || c == 95 || c == 45 }
        }
    }

    private static func path(_ field: String) throws(KeychainError) -> String {
        let bytes = try unescape(field)
        guard bytes.first == 47 else { throw .invalidInput("'\(field)' is not an absolute path") }
        guard !bytes.contains(0) else { throw .invalidInput("'\(field)' holds a NUL byte") }
        guard bytes.count <= maxPathBytes else { throw .invalidInput("a path over \(maxPathBytes) bytes") }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw .invalidInput("'\(field)' is not UTF-8") }
        return text
    }

    static func escape(_ path: String) -> String {
        var out: [UInt8] = []
        for b in path.utf8 {
            if b <= 32 || b == 37 || b == 127 {
                out += Array("%".utf8) + Array(((b < 16 ? "0" : "") + String(b, radix: 16, uppercase: true)).utf8)
            } else {
                out.append(b)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func unescape(_ field: String) throws(KeychainError) -> [UInt8] {
        var out: [UInt8] = []
        var bytes = Array(field.utf8)[...]
        while let b = bytes.popFirst() {
            guard b == 37 else { out.append(b); continue }
            guard bytes.count >= 2, let h = hex(bytes[bytes.startIndex]), let l = hex(bytes[bytes.startIndex + 1]) else {
                throw .invalidInput("'\(field)': % must start an escape like %20")
            }
            out.append(h << 4 | l)
            bytes = bytes.dropFirst(2)
        }
        return out
    }

    private static func hex(_ c: UInt8) -> UInt8? {
        switch c {
        case 48...57: c - 48
        case 65...70: c - 55
        case 97...102: c - 87
        default: nil
        }
    }
}

/// A program with the identity it was allowed with: a rule of an item's access list.
package struct AccessRule: Hashable, Sendable {
    package var program: AccessProgram
    /// The executable's (or interpreter's) identity; nil for a Flatpak app.
    package var executable: FileIdentity?
    /// The script's identity, for an interpreter-plus-script rule.
    package var script: FileIdentity?

    package init(program: AccessProgram, executable: FileIdentity?, script: FileIdentity?) {
        self.program = program
        self.executable = executable
        self.script = script
    }
}

/// An item's access list. Empty means any program of the user, the default.
package struct AccessList: Hashable, Sendable {
    package private(set) var rules: [AccessRule]

    package static let maxRules = 64
    package static let anyProgram = AccessList(rules: [])

    package init(rules: [AccessRule]) { self.rules = rules }

    package var isAnyProgram: Bool { rules.isEmpty }

    /// The value of `user.keychain.access`: one program per line.
    package var text: String { rules.map { $0.program.description + "\n" }.joined() }

    /// Parses the programs of `user.keychain.access` (blank lines ignored, repeats dropped).
    package static func programs(parsing text: String) throws(KeychainError) -> [AccessProgram] {
        var out: [AccessProgram] = []
        for line in PathText.split(text, on: UInt8(ascii: "\n")) where !line.trimmingASCIISpaces.isEmpty {
            let program = try AccessProgram(parsing: line)
            if !out.contains(program) { out.append(program) }
        }
        guard out.count <= maxRules else { throw .invalidInput("an access list holds at most \(maxRules) programs") }
        return out
    }

    /// The list with `rule` added, replacing a rule for the same program (Always allow of a
    /// changed binary pins its new identity).
    /// This list as it replaces `current`: a program `current` already holds keeps the file it
    /// was allowed with, unless it is in `repinning` (a program upgraded since); the others
    /// keep the pins given here. A list change made for one program re-pins no other.
    package func keepingPins(of current: AccessList?, repinning: [AccessProgram] = []) -> AccessList {
        let now = current ?? .anyProgram
        return AccessList(rules: rules.map { r in
            repinning.contains(r.program) ? r : now.rules.first { $0.program == r.program } ?? r
        })
    }

    package func adding(_ rule: AccessRule) throws(KeychainError) -> AccessList {
        var out = rules.filter { $0.program != rule.program }
        out.append(rule)
        guard out.count <= Self.maxRules else { throw .invalidInput("an access list holds at most \(Self.maxRules) programs") }
        return AccessList(rules: out)
    }

    // MARK: The sealed form

    private static let formatVersion: UInt8 = 1

    /// Compact bytes for the store, which seals them with the item's attributes: a version,
    /// a count, then each rule (kind, length-prefixed paths, identities).
    package var encoded: [UInt8] {
        var out: [UInt8] = [Self.formatVersion]
        out.appendBigEndian(UInt16(rules.count))
        for rule in rules {
            switch rule.program {
            case .executable(let p):
                out.append(1)
                out.appendField(p)
                out.appendIdentity(rule.executable!)
            case .script(let i, let s):
                out.append(2)
                out.appendField(i)
                out.appendIdentity(rule.executable!)
                out.appendField(s)
                out.appendIdentity(rule.script!)
            case .flatpak(let id):
                out.append(3)
                out.appendField(id)
            }
        }
        return out
    }

    /// Reads the sealed form. Anything but exactly what `encoded` writes is refused: these
    /// bytes come out of an authenticated seal, so a malformed list is a bug or a forgery.
    package init(decoding bytes: [UInt8]) throws(KeychainError) {
        var reader = ByteReader(bytes[...])
        guard try reader.byte() == Self.formatVersion else { throw Self.corrupt("unknown version") }
        let count = Int(try reader.uint16())
        guard count <= Self.maxRules else { throw Self.corrupt("\(count) rules") }
        var rules: [AccessRule] = []
        for _ in 0..<count {
            switch try reader.byte() {
            case 1:
                let program = AccessProgram.executable(try reader.path())
                rules.append(AccessRule(program: program, executable: try reader.identity(), script: nil))
            case 2:
                let interpreter = try reader.path(), interpreterID = try reader.identity()
                let script = try reader.path(), scriptID = try reader.identity()
                rules.append(AccessRule(program: .script(interpreter: interpreter, script: script),
                                        executable: interpreterID, script: scriptID))
            case 3:
                let id = try reader.text()
                guard AccessProgram.isValidAppID(id) else { throw Self.corrupt("bad app id") }
                rules.append(AccessRule(program: .flatpak(id), executable: nil, script: nil))
            case let kind:
                throw Self.corrupt("unknown rule kind \(kind)")
            }
        }
        guard reader.isAtEnd else { throw Self.corrupt("trailing bytes") }
        guard Set(rules.map(\.program)).count == rules.count else { throw Self.corrupt("a program listed twice") }
        self.rules = rules
    }

    static func corrupt(_ why: String) -> KeychainError { .integrityFailure("access list: \(why)") }
}

private extension [UInt8] {
    mutating func appendBigEndian<T: FixedWidthInteger>(_ v: T) {
        Swift.withUnsafeBytes(of: v.bigEndian) { append(contentsOf: $0) }
    }

    mutating func appendField(_ s: String) {
        let b = Array(s.utf8)
        appendBigEndian(UInt16(b.count))
        append(contentsOf: b)
    }

    mutating func appendIdentity(_ id: FileIdentity) {
        appendBigEndian(id.device)
        appendBigEndian(id.inode)
        appendBigEndian(id.size)
        appendBigEndian(id.modifiedSeconds)
        appendBigEndian(id.modifiedNanoseconds)
        append(contentsOf: id.sha256)
    }
}

private struct ByteReader {
    var bytes: ArraySlice<UInt8>
    init(_ bytes: ArraySlice<UInt8>) { self.bytes = bytes }

    var isAtEnd: Bool { bytes.isEmpty }

    mutating func take(_ n: Int) throws(KeychainError) -> ArraySlice<UInt8> {
        guard bytes.count >= n else { throw AccessList.corrupt("truncated") }
        defer { bytes = bytes.dropFirst(n) }
        return bytes.prefix(n)
    }

    mutating func byte() throws(KeychainError) -> UInt8 { try take(1).first! }

    mutating func integer<T: FixedWidthInteger>(_: T.Type) throws(KeychainError) -> T {
        try take(MemoryLayout<T>.size).reduce(T(0)) { $0 << 8 | T($1) }
    }

    mutating func uint16() throws(KeychainError) -> UInt16 { try integer(UInt16.self) }

    mutating func text() throws(KeychainError) -> String {
        let n = Int(try uint16())
        guard let s = String(validating: try take(n), as: UTF8.self) else { throw AccessList.corrupt("not UTF-8") }
        return s
    }

    mutating func path() throws(KeychainError) -> String {
        let p = try text()
        guard PathText.isAbsolute(p), p.utf8.count <= AccessProgram.maxPathBytes, !p.utf8.contains(0) else {
            throw AccessList.corrupt("bad path")
        }
        return p
    }

    mutating func identity() throws(KeychainError) -> FileIdentity {
        let device = try integer(UInt64.self), inode = try integer(UInt64.self), size = try integer(UInt64.self)
        let seconds = try integer(Int64.self), nanoseconds = try integer(UInt32.self)
        guard nanoseconds < 1_000_000_000 else { throw AccessList.corrupt("bad time") }
        return FileIdentity(device: device, inode: inode, size: size, modifiedSeconds: seconds,
                            modifiedNanoseconds: nanoseconds, sha256: Array(try take(32)))
    }
}

extension String {
    /// Without leading and trailing spaces and tabs.
    var trimmingASCIISpaces: String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { $0 != " " && $0 != "\t" && $0 != "\r" }) else { return "" }
        let last = scalars.lastIndex(where: { $0 != " " && $0 != "\t" && $0 != "\r" })!
        return String(scalars[first...last])
    }
}

/// In JSON (the model's Codable form): the sealed form's bytes, as `Data` codes them.
extension AccessList: Codable {
    package init(from decoder: any Decoder) throws {
        let bytes = try decoder.singleValueContainer().decode(Data.self)
        self = try AccessList(decoding: Array(bytes))
    }

    package func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(Data(encoded))
    }
}
