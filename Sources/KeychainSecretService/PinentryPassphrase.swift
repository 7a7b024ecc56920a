import Foundation
import KeychainAccess
import KeychainCrypto

/// Asks for the keychain's passphrase through pinentry, the standard Linux prompt program,
/// speaking its Assuan protocol on a socket pair (`SETDESC`, `SETPROMPT`, `SETTIMEOUT`, `GETPIN`).
/// The answer goes from the socket into locked memory, never into a `String` or `Data`.
package struct PinentryPassphrase: Sendable {
    package var program: String
    package var timeout: Int

    package init(program: String, timeout: Int = 30) {
        self.program = program
        self.timeout = timeout
    }

    package enum Outcome {
        case passphrase(SecureBytes)
        /// Cancelled, timed out, or the program failed: the prompt is dismissed.
        case dismissed(String)
    }

    /// Runs pinentry once; blocks the calling thread (never the bus's) until it answers.
    /// Started as the access prompt's pinentry is (`Pinentry.launch`: a socket pair, nothing
    /// else of the daemon's inherited), and reaped by its pid.
    package func ask(description: String) -> Outcome {
        let fd: Int32, pid: pid_t
        do { (fd, pid) = try Pinentry.launch(program) } catch { return .dismissed(error.reason) }
        var answered = false
        defer {
            close(fd)
            Pinentry.reap(pid, force: !answered)
        }
        let deadline = Date().addingTimeInterval(TimeInterval(timeout + 5))
        let reader = LineReader(fd: fd, deadline: deadline)
        guard reader.okLine() else { return .dismissed("\(program) did not greet") }
        for command in ["SETTITLE keychainfs", Pinentry.line("SETDESC", description), "SETPROMPT Passphrase:",
                        "SETTIMEOUT \(timeout)"] {
            Self.send(fd, command)
            guard reader.okLine() else { return .dismissed("\(program) refused \(command.prefix(10))") }
        }
        Self.send(fd, "GETPIN")
        let pin = SecureBytes()
        while true {
            guard let line = reader.line() else { return .dismissed("\(program) gave no answer") }
            defer { line.wipe() }
            let starts = { (p: String) in line.withUnsafeBytes { $0.starts(with: Array(p.utf8)) } }
            if starts("D ") {
                line.withUnsafeBytes { Self.unescape($0.dropFirst(2), into: pin) }
            } else if starts("OK") {
                Self.send(fd, "BYE")
                answered = true
                return .passphrase(pin)
            } else if starts("ERR") {
                pin.wipe()
                return .dismissed("cancelled or timed out")
            }
        }
    }

    /// MSG_NOSIGNAL: a pinentry gone away is an error, not SIGPIPE.
    private static func send(_ fd: Int32, _ command: String) {
        let bytes = Array((command + "\n").utf8)
        _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    private static func unescape(_ bytes: UnsafeRawBufferPointer.SubSequence, into out: SecureBytes) {
        var i = bytes.startIndex
        while i < bytes.endIndex {
            var c = bytes[i]
            if c == UInt8(ascii: "%"), i + 2 < bytes.endIndex, let v = hexValue(bytes[i + 1], bytes[i + 2]) {
                c = v
                i += 2
            }
            let n = out.count
            out.resize(to: n + 1)
            out.withUnsafeMutableBytes { $0[n] = c }
            i += 1
        }
    }

    private static func hexValue(_ a: UInt8, _ b: UInt8) -> UInt8? {
        func d(_ x: UInt8) -> UInt8? {
            switch x {
            case 48...57: x - 48
            case 65...70: x - 55
            case 97...102: x - 87
            default: nil
            }
        }
        guard let h = d(a), let l = d(b) else { return nil }
        return h << 4 | l
    }
}

/// Lines from pinentry's stdout, each in locked memory (a `D` line holds the passphrase).
private final class LineReader {
    let fd: Int32
    let deadline: Date
    private var pending = SecureBytes()

    init(fd: Int32, deadline: Date) {
        self.fd = fd
        self.deadline = deadline
    }

    /// The next line without its newline; nil at end of file or past the deadline.
    func line() -> SecureBytes? {
        while true {
            if let nl = pending.withUnsafeBytes({ $0.firstIndex(of: 0x0A) }) {
                let line = pending.withUnsafeBytes { SecureBytes(copying: UnsafeRawBufferPointer(rebasing: $0[..<nl])) }
                let rest = pending.withUnsafeBytes { SecureBytes(copying: UnsafeRawBufferPointer(rebasing: $0[(nl + 1)...])) }
                pending.wipe()
                pending = rest
                return line
            }
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else { return nil }
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&p, 1, Int32(min(left * 1000, 60_000))) > 0 else { return nil }
            let n = pending.count
            pending.resize(to: n + 4096)
            let got = pending.withUnsafeMutableBytes { read(fd, $0.baseAddress! + n, 4096) }
            pending.resize(to: n + max(got, 0))
            if got <= 0 { return nil }
        }
    }

    /// Reads lines until an `OK` (true) or an `ERR` or the end (false); comments are skipped.
    func okLine() -> Bool {
        while let line = line() {
            defer { line.wipe() }
            let ok = line.withUnsafeBytes { $0.starts(with: Array("OK".utf8)) }
            let err = line.withUnsafeBytes { $0.starts(with: Array("ERR".utf8)) }
            if ok { return true }
            if err { return false }
        }
        return false
    }
}
