import Foundation
import KeychainModel
import TOMLKit

/// The user's defaults from `$XDG_CONFIG_HOME/keychainfs/config.toml`. Every key is optional;
/// a command-line flag overrides the key it matches.
///
/// ```toml
/// mountpoint = "~/Keychain"
/// lock-after = 900            # seconds without file access; 0 for never
/// default-accessible = "after-first-unlock"
/// default-synchronizable = true   # new items travel to the other devices (never this-device-only ones)
/// allow-root = true
/// secret-service = true       # serve org.freedesktop.secrets on the session bus
///
/// [access]
/// pinentry = "/usr/bin/pinentry-gnome3"   # asks for the passphrase when a client unlocks
/// prompt-timeout = 30
/// ```
package struct KeychainConfig: Equatable, Sendable {
    /// An absolute path, `~` already expanded.
    package var mountpoint: String?
    /// Seconds; 0 means never.
    package var lockAfter: Int?
    package var defaultAccessible: AccessibilityClass?
    package var defaultSynchronizable: Bool?
    package var allowRoot: Bool?
    package var secretService: Bool?
    /// `[access] pinentry`: the prompt program (an absolute path).
    package var pinentry: String?
    /// `[access] prompt-timeout`: seconds a prompt waits for its answer.
    package var promptTimeout: Int?

    package init(mountpoint: String? = nil, lockAfter: Int? = nil, defaultAccessible: AccessibilityClass? = nil,
                allowRoot: Bool? = nil) {
        self.mountpoint = mountpoint; self.lockAfter = lockAfter
        self.defaultAccessible = defaultAccessible; self.allowRoot = allowRoot
    }

    package static let keys = ["mountpoint", "lock-after", "default-accessible", "default-synchronizable", "allow-root", "secret-service", "access"]

    /// `$XDG_CONFIG_HOME/keychainfs/config.toml`, by default `~/.config/keychainfs/config.toml`.
    package static var defaultPath: String {
        KeychainLocations.configHome + "/keychainfs/config.toml"
    }

    /// The mountpoint when none is given: the configured one, else `~/Keychain`.
    package var effectiveMountpoint: String { mountpoint ?? KeychainLocations.home + "/Keychain" }

    /// Reads the file at `path`; a missing file is an empty configuration. Any other problem is
    /// `invalidInput` (exit 65) naming the file and the line.
    package static func load(path: String = defaultPath) throws -> KeychainConfig {
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: path)) } catch {
            if !FileManager.default.fileExists(atPath: path) { return KeychainConfig() }
            throw KeychainError.invalidInput("cannot read the configuration file \(path): \(error.localizedDescription)")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            let line = data.split(separator: 0x0a, omittingEmptySubsequences: false)
                .firstIndex { String(data: Data($0), encoding: .utf8) == nil }.map { $0 + 1 } ?? 1
            throw KeychainError.invalidInput("\(path):\(line): not UTF-8 text")
        }
        return try parse(text, path: path, home: KeychainLocations.home)
    }

    /// Parses the text of a configuration file; `path` only names it in errors.
    package static func parse(_ text: String, path: String, home: String) throws -> KeychainConfig {
        try TOMLPrecheck.check(text, path: path)
        let table: TOMLTable
        do { table = try TOMLTable(string: text) } catch let e as TOMLParseError {
            throw KeychainError.invalidInput("\(path):\(e.source.begin.line): \(e.description)")
        } catch {
            throw KeychainError.invalidInput("\(path): \(error)")
        }
        let lines = SourceLines(text)
        func fail(_ key: String, _ message: String) -> KeychainError {
            .invalidInput("\(path):\(lines.line(ofKey: key)): \(message)")
        }
        // A key of [access] is reported on its own line, not its table's header.
        func failAccess(_ name: String, _ message: String) -> KeychainError {
            .invalidInput("\(path):\(lines.line(ofKey: name, inTable: "access")): \(message)")
        }
        var config = KeychainConfig()
        for key in table.keys.sorted(by: { lines.line(ofKey: $0) < lines.line(ofKey: $1) }) {
            guard let value = table[key] else { continue }
            switch key {
            case "mountpoint":
                guard let s = value.string else { throw fail(key, "mountpoint must be a string, not \(value.type)") }
                config.mountpoint = try expand(s, home: home) { fail(key, $0) }
            case "lock-after":
                guard let n = value.int, n >= 0 else {
                    throw fail(key, "lock-after must be a whole number of seconds (0 for never), not \(value.debugDescription)")
                }
                config.lockAfter = n
            case "default-accessible":
                guard let s = value.string else { throw fail(key, "default-accessible must be a string, not \(value.type)") }
                do { config.defaultAccessible = try AccessibilityClass(parsing: s) } catch {
                    throw fail(key, "default-accessible: \(KeychainError(error).description)")
                }
            case "default-synchronizable":
                guard let b = value.bool else { throw fail(key, "default-synchronizable must be true or false, not \(value.debugDescription)") }
                config.defaultSynchronizable = b
            case "allow-root":
                guard let b = value.bool else { throw fail(key, "allow-root must be true or false, not \(value.debugDescription)") }
                config.allowRoot = b
            case "secret-service":
                guard let b = value.bool else { throw fail(key, "secret-service must be true or false, not \(value.debugDescription)") }
                config.secretService = b
            case "access":
                guard let access = value.table else { throw fail(key, "access must be a table ([access]), not \(value.type)") }
                for name in access.keys.sorted() {
                    guard let v = access[name] else { continue }
                    switch name {
                    case "pinentry":
                        guard let s = v.string, PathText.isAbsolute(s) else {
                            throw failAccess(name, "access.pinentry must be the absolute path of a pinentry program, not \(v.debugDescription)")
                        }
                        config.pinentry = s
                    case "prompt-timeout":
                        guard let n = v.int, n > 0, n <= 3600 else {
                            throw failAccess(name, "access.prompt-timeout must be a whole number of seconds from 1 to 3600, not \(v.debugDescription)")
                        }
                        config.promptTimeout = n
                    default:
                        throw failAccess(name, "unknown key 'access.\(name)' (known: pinentry, prompt-timeout)")
                    }
                }
            default:
                throw fail(key, "unknown key '\(key)' (known: \(keys.joined(separator: ", ")))")
            }
        }
        return config
    }

    /// `~` and `~/...` are the home directory; anything else must be absolute.
    static func expand(_ path: String, home: String, fail: (String) -> KeychainError) throws -> String {
        if path == "~" { return home }
        if path.hasPrefix("~/") { return home + path.dropFirst(1) }
        guard PathText.isAbsolute(path) else {
            throw fail("mountpoint must be an absolute path or start with ~/, not \"\(path)\"")
        }
        return path
    }
}

/// Finds the line a top-level key is set on, since the TOML library reports positions only
/// for syntax errors.
struct SourceLines {
    let lines: [Substring]

    init(_ text: String) { lines = text.split(separator: "\n", omittingEmptySubsequences: false) }

    /// 1-based; the line of `key = ...`, `"key" = ...` or `[key]`, else 1.
    func line(ofKey key: String) -> Int {
        for (i, raw) in lines.enumerated() {
            let line = raw.drop { $0 == " " || $0 == "\t" }
            for form in [key, "\"\(key)\"", "'\(key)'"] {
                if line.hasPrefix(form) {
                    let rest = line.dropFirst(form.count).drop { $0 == " " || $0 == "\t" }
                    if rest.hasPrefix("=") || rest.hasPrefix(".") { return i + 1 }
                }
                if line.hasPrefix("[" + form) || line.hasPrefix("[[" + form) { return i + 1 }
            }
        }
        return 1
    }

    /// 1-based; the line of `key = ...` below the header `[table]` and before the next
    /// header, else the header's line (`table.key = ...` and inline tables are found there).
    func line(ofKey key: String, inTable table: String) -> Int {
        let header = line(ofKey: table)
        var i = header
        while i < lines.count {
            let line = lines[i].drop { $0 == " " || $0 == "\t" }
            if line.hasPrefix("[") { break }
            for form in [key, "\"\(key)\"", "'\(key)'"] where line.hasPrefix(form) {
                let rest = line.dropFirst(form.count).drop { $0 == " " || $0 == "\t" }
                if rest.hasPrefix("=") { return i + 1 }
            }
            i += 1
        }
        return header
    }
}

/// What TOMLKit's parser (toml++) cannot be given: it asserts, aborting the process, on a table
/// header with no name (`[`, `[[`, `[.]`, `[{]`), and it reads the text as a C string, so a NUL
/// would end the file early. Such files are refused here with their line, as the parser refuses
/// the others. Strings and comments are followed as TOML reads them, so that a `[` inside one
/// is not taken for a header; brackets inside a value (an array, an inline table) are counted,
/// so that an array's `[` at the start of a line is not one either.
enum TOMLPrecheck {
    static func check(_ text: String, path: String) throws {
        let bytes = Array(text.utf8)
        var line = 1
        var depth = 0  // open brackets and braces of a value
        var atLineStart = true
        var i = 0
        func fail(_ message: String) -> KeychainError { .invalidInput("\(path):\(line): \(message)") }
        func at(_ j: Int) -> UInt8? { j < bytes.count ? bytes[j] : nil }
        func starts(_ s: String, _ j: Int) -> Bool {
            let u = Array(s.utf8)
            return j + u.count <= bytes.count && Array(bytes[j..<j + u.count]) == u
        }
        func isKeyStart(_ b: UInt8?) -> Bool {
            guard let b else { return false }
            return (b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a) || (b >= 0x30 && b <= 0x39)
                || b == UInt8(ascii: "_") || b == UInt8(ascii: "-") || b == UInt8(ascii: "\"") || b == UInt8(ascii: "'")
        }
        func isBlank(_ b: UInt8?) -> Bool { b == UInt8(ascii: " ") || b == UInt8(ascii: "\t") }
        // Moves past a string that opens at `i`. A one-line string ends at its line's end at the
        // latest (the parser refuses it there); control characters are left to the main loop.
        func skipString() {
            let quote = bytes[i]
            let closing = quote == UInt8(ascii: "\"") ? "\"\"\"" : "'''"
            let triple = starts(closing, i)
            i += triple ? 3 : 1
            while let b = at(i) {
                if b == 0x0a && !triple { return }
                if b < 0x20 && b != UInt8(ascii: "\t") && b != 0x0a && b != 0x0d { return }
                if b == 0x0a { line += 1 }
                if quote == UInt8(ascii: "\"") && b == UInt8(ascii: "\\") && at(i + 1) != 0x0a {
                    i += 2
                    continue
                }
                if triple ? starts(closing, i) : b == quote {
                    i += triple ? 3 : 1
                    return
                }
                i += 1
            }
        }
        while let b = at(i) {
            if b == 0x7f || (b < 0x20 && b != UInt8(ascii: "\t") && b != 0x0a && b != 0x0d) {
                throw fail("a control character (byte \(b)) is not allowed in the file")
            }
            switch b {
            case 0x0a:
                line += 1
                atLineStart = true
                i += 1
                continue
            case UInt8(ascii: " "), UInt8(ascii: "\t"), 0x0d:
                i += 1
                continue
            case UInt8(ascii: "#"):
                while let c = at(i), c != 0x0a {
                    if c == 0x7f || (c < 0x20 && c != UInt8(ascii: "\t") && c != 0x0d) {
                        throw fail("a control character (byte \(c)) is not allowed in the file")
                    }
                    i += 1
                }
                continue
            case UInt8(ascii: "\""), UInt8(ascii: "'"):
                skipString()
            case UInt8(ascii: "["):
                if atLineStart && depth == 0 {
                    var j = i + 1
                    if at(j) == UInt8(ascii: "[") { j += 1 }
                    while isBlank(at(j)) { j += 1 }
                    guard isKeyStart(at(j)) else {
                        throw fail("a table header needs a name (the one table is [access]; keys: "
                            + KeychainConfig.keys.joined(separator: ", ") + ")")
                    }
                }
                depth += 1
                i += 1
            case UInt8(ascii: "{"):
                depth += 1
                i += 1
            case UInt8(ascii: "]"), UInt8(ascii: "}"):
                depth = max(0, depth - 1)
                i += 1
            default:
                i += 1
            }
            atLineStart = false
        }
    }
}
