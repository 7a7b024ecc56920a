import Foundation
import Glibc
import KeychainErrors
import KeychainModel
import Synchronization

/// One refusal or prompt answer, as `keychainfs access log` prints it.
package struct AccessLogEntry: Codable, Sendable, Equatable {
    package enum Decision: String, Codable, Sendable {
        /// Refused without a prompt: not listed and no prompt configured or possible, or
        /// refused even though listed (traced, preloaded, executable deleted or replaced).
        case refused
        /// The user answered Deny.
        case denied
        case timedOut = "timed-out"
        case allowedOnce = "allowed-once"
        case alwaysAllowed = "always-allowed"
    }

    package var time: Date
    package var program: String
    package var pid: Int32
    package var commandLine: [String]
    package var item: String
    package var operation: String
    package var decision: Decision
    package var reason: String
    /// The one command that would allow what was refused; nil when allowed, or when no
    /// command would (a traced or preloaded caller is refused whatever the list says).
    package var allowCommand: String?

    package init(time: Date = Date(), program: String, pid: Int32, commandLine: [String], item: String,
                 operation: String, decision: Decision, reason: String, allowCommand: String?) {
        self.time = time
        self.program = program
        self.pid = pid
        self.commandLine = commandLine
        self.item = item
        self.operation = operation
        self.decision = decision
        self.reason = reason
        self.allowCommand = allowCommand
    }

    /// Lines for a terminal: the decision, the command line, and how to allow it.
    package var text: String {
        var out = "\(time.ISO8601Format()) \(decision.rawValue) \(Shown.text(program)) (pid \(pid)) \(operation) \(Shown.text(item)): \(Shown.text(reason))\n"
        out += "    command: \(Shown.commandLine(commandLine))\n"
        if let allowCommand {
            // Printed to be pasted, so as it is, or not at all: `Shown.text`'s escapes would
            // paste as other bytes.
            out += "    to allow: " + (Shown.pasteable(allowCommand)
                ?? "(not shown: a name in the command holds characters a terminal does not show as themselves)") + "\n"
        }
        return out
    }

    /// One line for the daemon's log.
    package var summary: String {
        "access \(decision.rawValue): \(Shown.text(program)) pid \(pid) \(operation) \(Shown.text(item)) (\(Shown.text(reason)))"
    }
}

/// The access log: JSON lines in a private file under the state directory, appended with one
/// write each (O_APPEND, so lines from one daemon never interleave) and rolled over to
/// `PATH.1` past `rollOver` bytes, so it stays bounded.
package final class AccessLog: Sendable {
    package let path: String
    private let rollOver: Int
    /// The open descriptor (-1 until first use). Held only for a write or a rename, never
    /// while anything waits; no other lock is taken under it.
    private let file = Mutex<Int32>(-1)

    package init(path: String, rollOver: Int = 1 << 20) {
        self.path = path
        self.rollOver = rollOver
    }

    deinit { file.withLock { if $0 >= 0 { close($0) } } }

    /// `$XDG_STATE_HOME/keychainfs/access.log`, beside the daemon's log.
    package static var defaultPath: String { KeychainLocations.stateDirectory + "/access.log" }

    package func append(_ entry: AccessLogEntry) throws(KeychainError) {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let json = try? encoder.encode(entry) else { throw .io("cannot encode an access log entry") }
        let line = Array(json) + [10]
        try file.withLock { (fd: inout Int32) throws(KeychainError) in
            if fd < 0 { fd = try PrivateFile.openForAppending(path) }
            let n = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard n == line.count else { throw .io("\(path): \(String(cString: strerror(errno)))") }
            var st = stat()
            if fstat(fd, &st) == 0, Int(st.st_size) > rollOver {
                rename(path, path + ".1")
                close(fd)
                fd = -1
            }
        }
    }

    /// The entries of `PATH.1` then `PATH`, oldest first. Lines that do not parse (cut by a
    /// crash mid-write) are counted, not fatal.
    package static func read(_ path: String) throws(KeychainError) -> (entries: [AccessLogEntry], unreadable: Int) {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        var entries: [AccessLogEntry] = []
        var unreadable = 0
        for file in [path + ".1", path] {
            guard let data = FileManager.default.contents(atPath: file) else {
                if access(file, F_OK) == 0 { throw .io("cannot read \(file)") }
                continue
            }
            for line in data.split(separator: 10) where !line.isEmpty {
                if let entry = try? decoder.decode(AccessLogEntry.self, from: Data(line)) { entries.append(entry) } else { unreadable += 1 }
            }
        }
        return (entries, unreadable)
    }

    /// What `keychainfs access log` prints: text, or with `json` one JSON object per line.
    package static func render(_ entries: [AccessLogEntry], json: Bool) -> String {
        guard json else { return entries.map(\.text).joined() }
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return entries.compactMap { (try? encoder.encode($0)).map { String(decoding: $0, as: UTF8.self) + "\n" } }.joined()
    }
}

/// The command that gives an item a list, for the log and the prompt.
package enum AllowCommand {
    /// `keychainfs access set-generic -s S -a A -T P...`: the item's whole list with `program`
    /// added, or with `--repin` pinned anew when it is listed already (its file changed). That command changes the list alone, vouched for by the store's passphrase, so
    /// it works where the refusal happened: with no prompt, or in a store whose listed
    /// programs cannot change lists (an `add -U` would also replace the secret, and be refused
    /// to the CLI as to any program not on the list).
    package static func line(for key: ItemKey, list: AccessList, adding program: AccessProgram) -> String {
        var programs = list.rules.map(\.program).filter { $0 != program }
        programs.append(program)
        var words = ["keychainfs", "access"]
        switch key {
        case .generic(let g):
            words += ["set-generic", "-s", g.service, "-a", g.account]
        case .internet(let i):
            words += ["set-internet", "-s", i.server, "-P", String(i.port)]
            if !i.path.isEmpty { words += ["-p", i.path] }
            words += ["-r", i.protocol.name]
            if i.authenticationType != .default { words += ["-t", i.authenticationType.name] }
            if !i.securityDomain.isEmpty { words += ["-d", i.securityDomain] }
            words += ["-a", i.account]
        }
        for p in programs { words += ["-T", p.description] }
        // Listed already, and refused: its file changed since it was allowed.
        if list.rules.contains(where: { $0.program == program }) { words += ["--repin", program.description] }
        return words.map(Shown.shellWord).joined(separator: " ")
    }
}

/// Text from a caller (its command line, its paths) made safe to show: it cannot add lines,
/// move the cursor, reorder text (bidi controls) or hide itself in a prompt or a terminal.
package enum Shown {
    /// Control characters, and the marks that reorder or hide text on a terminal.
    static func isHidden(_ c: Unicode.Scalar) -> Bool {
        let v = c.value
        return v < 0x20 || (0x7f...0x9f).contains(v) || v == 0x200e || v == 0x200f
            || (0x202a...0x202e).contains(v) || (0x2066...0x2069).contains(v) || v == 0x2028 || v == 0x2029
            || v == 0xfeff
    }

    /// `line` as it is, if a terminal shows every character of it as itself; nil if not.
    package static func pasteable(_ line: String) -> String? {
        line.unicodeScalars.contains(where: isHidden) ? nil : line
    }

    package static func text(_ s: String) -> String {
        var out = ""
        for c in s.unicodeScalars {
            let v = c.value
            if isHidden(c) {
                out += v < 0x100 ? "\\x" + (v < 16 ? "0" : "") + String(v, radix: 16) : "\\u{" + String(v, radix: 16) + "}"
            } else if c == "\\" {
                out += "\\\\"
            } else {
                out.unicodeScalars.append(c)
            }
        }
        return out
    }

    /// A word as a POSIX shell reads it: bare when safe, else single-quoted.
    package static func shellWord(_ s: String) -> String {
        let safe = !s.isEmpty && s.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || "_@%+=:,./-".unicodeScalars.contains($0)
        }
        guard !safe else { return s }
        // Scalar by scalar: Foundation's `replacingOccurrences` matches characters, and a `'`
        // followed by a combining mark is one character with it, so it would be left unquoted.
        var out = "'"
        for c in s.unicodeScalars {
            if c == "'" { out += "'\\''" } else { out.unicodeScalars.append(c) }
        }
        return out + "'"
    }

    package static func commandLine(_ argv: [String]) -> String {
        argv.isEmpty ? "(none)" : text(argv.map(shellWord).joined(separator: " "))
    }
}
