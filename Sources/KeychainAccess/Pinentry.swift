import CProcessPin
import Glibc
import KeychainCrypto

/// The user's answer to an access prompt.
package enum PromptAnswer: Sendable, Equatable {
    /// The OK button: this process, for its life.
    case allowOnce
    /// The "not OK" button: add the program to the item's list.
    case alwaysAllow
    /// Cancel (or Escape, or closing the window).
    case deny
    case timedOut
    /// No answer could be had: pinentry missing, crashed, or speaking something else.
    case unavailable(String)
    /// The daemon ended while the prompt was open (`Pinentry.ending`).
    case ended
}

/// What a prompt shows. Every field is shown as given; callers build them with `Shown`.
package struct PromptText: Sendable, Equatable {
    package var title: String
    package var description: String
    package var prompt: String
    // `_` marks each button's key (pinentry-tty answers to one letter; "Allow once" and
    // "Always allow" would both be `a`) and is a mnemonic in the graphical pinentries.
    package var allowOnce = "Allow _once"
    /// Nil: no such button (nothing could be added to the list).
    package var alwaysAllow: String? = "_Always allow"
    package var deny = "_Deny"

    package init(title: String, description: String, prompt: String) {
        self.title = title
        self.description = description
        self.prompt = prompt
    }

    /// The second prompt of Always allow (`Pinentry.ask`): the same question, where OK
    /// (labelled as Always allow was) adds the program for good and there is no "not OK".
    var confirmingAlwaysAllow: PromptText {
        var t = PromptText(title: title, description: description + "\n\nAdd this program to the item's access list for good?",
                           prompt: prompt)
        t.allowOnce = alwaysAllow ?? "_Always allow"
        t.alwaysAllow = nil
        t.deny = deny
        return t
    }
}

/// Asks through a pinentry program (gpg's prompt: `pinentry-tty`, `-curses`, `-gnome3`,
/// `-qt`), speaking its Assuan protocol over a socket pair: SETTITLE, SETDESC, SETPROMPT,
/// SETOK/SETNOTOK/SETCANCEL name the three buttons, CONFIRM shows them. OK is Allow once,
/// "not OK" (GPG_ERR_NOT_CONFIRMED) is Always allow once a second prompt confirms it with
/// OK, Cancel (GPG_ERR_CANCELED) is Deny. Anything else, and the timeout, is no.
package struct Pinentry: Sendable {
    package var path: String
    package var timeout: Duration
    /// A descriptor that turns readable when the prompt must end at once (the daemon ends);
    /// -1 for none.
    package var ending: Int32 = -1

    package init(path: String, timeout: Duration) {
        self.path = path
        self.timeout = timeout
    }

    /// Assuan's limit on a line, command included.
    static let maxLine = 1000

    /// Blocks the calling thread (only it) until an answer or the timeout; the pinentry is
    /// killed then, by its pid.
    package func ask(_ text: PromptText, terminal: String?, terminalType: String?) -> PromptAnswer {
        let deadline = ContinuousClock.now + timeout
        let first = session(text, deadline: deadline, terminal: terminal, terminalType: terminalType)
        guard first == .alwaysAllow else { return first }
        // Pinentry answers "not OK" for that button and also when it cannot prompt at all
        // (pinentry-tty given no terminal answers every CONFIRM so). Always allow changes the
        // list for good, so it is confirmed in a prompt of its own whose only yes is OK.
        switch session(text.confirmingAlwaysAllow, deadline: deadline, terminal: terminal, terminalType: terminalType) {
        case .allowOnce: return .alwaysAllow
        case .alwaysAllow, .deny: return .deny
        case let other: return other
        }
    }

    /// One pinentry, from its start to its end, asked `text` until `deadline`.
    private func session(_ text: PromptText, deadline: ContinuousClock.Instant, terminal: String?, terminalType: String?) -> PromptAnswer {
        let ours: Int32, pid: pid_t
        do { (ours, pid) = try Self.launch(path) } catch { return .unavailable(error.reason) }
        defer { close(ours) }
        var session = AssuanSession(fd: ours, deadline: deadline, ending: ending)
        let answer = converse(&session, text, deadline: deadline, terminal: terminal, terminalType: terminalType)
        if answer == .timedOut || answer == .ended { Self.reap(pid, force: true) } else {
            _ = session.send("BYE")
            Self.reap(pid, force: false)
        }
        return answer
    }

    private func converse(_ s: inout AssuanSession, _ text: PromptText, deadline: ContinuousClock.Instant,
                          terminal: String?, terminalType: String?) -> PromptAnswer {
        do {
            try s.expectOK()
            // Options a pinentry does not know answer ERR; they are hints, not requirements.
            if let terminal { _ = try s.command("OPTION ttyname=" + terminal) }
            if let terminalType { _ = try s.command("OPTION ttytype=" + terminalType) }
            let left = deadline - ContinuousClock.now
            let seconds = max(1, Int(left.components.seconds) + (left.components.attoseconds > 0 ? 1 : 0))
            _ = try s.command("SETTIMEOUT \(seconds)")
            var settings = [("SETTITLE", text.title), ("SETPROMPT", text.prompt), ("SETOK", text.allowOnce),
                            ("SETCANCEL", text.deny), ("SETDESC", text.description)]
            if let alwaysAllow = text.alwaysAllow { settings.append(("SETNOTOK", alwaysAllow)) }
            for (verb, value) in settings {
                if let error = try s.command(Self.line(verb, value)) {
                    return .unavailable("\(path) refused \(verb): \(error.text)")
                }
            }
            guard let error = try s.command("CONFIRM") else { return .allowOnce }
            switch error.code & 0xffff {
            case 114 where text.alwaysAllow != nil: return .alwaysAllow   // GPG_ERR_NOT_CONFIRMED: the "not OK" button
            case 99: return .deny           // GPG_ERR_CANCELED
            case 62: return .timedOut       // GPG_ERR_TIMEOUT: pinentry's own SETTIMEOUT
            default: return .unavailable("\(path): \(error.text)")
            }
        } catch .timedOut {
            return .timedOut
        } catch .ended {
            return .ended
        } catch {
            return .unavailable("\(path): \(error)")
        }
    }

    /// `VERB arg` with Assuan's escapes (`%`, CR, LF), the argument cut to fit one line.
    package static func line(_ verb: String, _ value: String) -> String {
        var scalars = Array(value.unicodeScalars)
        while true {
            var escaped = ""
            for c in scalars {
                switch c {
                case "%": escaped += "%25"
                case "\n": escaped += "%0A"
                case "\r": escaped += "%0D"
                default: escaped.unicodeScalars.append(c)
                }
            }
            let line = escaped.isEmpty ? verb : verb + " " + escaped
            if line.utf8.count <= maxLine { return line }
            let over = line.utf8.count - maxLine
            scalars = Array(scalars.dropLast(max(1, over / 3) + 1)) + ["…"]
        }
    }

    /// Starts the pinentry at `path` on one end of a socket pair, as its standard input and
    /// output, with nothing else of this process's (every other descriptor is closed in the
    /// child: the daemon's FUSE device, store, sockets and pipes must not reach a prompt
    /// program). Returns the other end, which the caller closes, and the pid for `reap`.
    package static func launch(_ path: String) throws(SpawnError) -> (fd: Int32, pid: pid_t) {
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
            throw SpawnError(reason: "socketpair: \(String(cString: strerror(errno)))")
        }
        defer { close(fds[1]) }
        do {
            return (fds[0], try spawn(path, socket: fds[1]))
        } catch {
            close(fds[0])
            throw SpawnError(reason: "cannot run \(path): \(error.reason)")
        }
    }

    private static func spawn(_ path: String, socket: Int32) throws(SpawnError) -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, socket, 0)
        posix_spawn_file_actions_adddup2(&actions, socket, 1)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        // Nothing of the daemon's (the FUSE device, the store) reaches the prompt program.
        _ = kcfs_spawn_close_from(&actions, 3)
        let argv = [strdup(path)] + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, path, &actions, nil, argv, environ)
        guard rc == 0 else { throw SpawnError(reason: String(cString: strerror(rc))) }
        return pid
    }

    package struct SpawnError: Error { package var reason: String }

    /// Waits for the pinentry to end; one that does not end soon (or at all, after a timeout)
    /// is killed. Only our own child, by pid.
    package static func reap(_ pid: pid_t, force: Bool) {
        var status: Int32 = 0
        if !force {
            for _ in 0..<50 {
                if waitpid(pid, &status, WNOHANG) == pid { return }
                usleep(10_000)
            }
        }
        kill(pid, SIGTERM)
        for _ in 0..<20 {
            if waitpid(pid, &status, WNOHANG) == pid { return }
            usleep(10_000)
        }
        kill(pid, SIGKILL)
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    }
}

/// Pinentry's error line: `ERR <gpg-error code> <text>`.
package struct AssuanError: Error {
    package var code: UInt32
    package var text: String
}

package enum AssuanFailure: Error, CustomStringConvertible {
    case timedOut
    case ended
    case closed
    case protocolError(String)

    package var description: String {
        switch self {
        case .timedOut: "no answer in time"
        case .ended: "the mount is ending"
        case .closed: "it closed the connection"
        case .protocolError(let m): m
        }
    }
}

/// One Assuan client connection with a deadline on every wait. What it reads waits in locked
/// memory until it is parsed: a `D` line may be a passphrase (`GETPIN`, for the unlock prompt),
/// which only `command(_:data:)` takes, unescaped, into the caller's locked buffer.
package struct AssuanSession {
    let fd: Int32
    let deadline: ContinuousClock.Instant
    /// Readable when the wait must end at once; -1 for none.
    let ending: Int32
    /// Read and not yet parsed; wiped as lines are taken from it.
    private let pending = SecureBytes()

    package init(fd: Int32, deadline: ContinuousClock.Instant, ending: Int32 = -1) {
        self.fd = fd
        self.deadline = deadline
        self.ending = ending
    }

    /// Sends a line; MSG_NOSIGNAL so that a pinentry gone away is an error, not SIGPIPE.
    package func send(_ line: String) -> Bool {
        let bytes = Array((line + "\n").utf8)
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return false }
            sent += n
        }
        return true
    }

    /// Sends a command and returns nil on OK, the error on ERR. The data of its `D` lines is
    /// appended to `data`, unescaped, when given, and dropped when not.
    package mutating func command(_ line: String, data: SecureBytes? = nil) throws(AssuanFailure) -> AssuanError? {
        guard send(line) else { throw .closed }
        return try response(data: data)
    }

    package mutating func expectOK() throws(AssuanFailure) {
        if let error = try response() { throw .protocolError("greeting: ERR \(error.code) \(error.text)") }
    }

    /// Reads up to OK or ERR, skipping status (`S`) and comment (`#`) lines; `D` lines go to `data`.
    private mutating func response(data: SecureBytes? = nil) throws(AssuanFailure) -> AssuanError? {
        while true {
            let line = try readLine()
            defer { line.wipe() }
            func starts(_ prefix: String) -> Bool { line.withUnsafeBytes { $0.starts(with: prefix.utf8) } }
            // Only a line that is not data is ever made a string.
            func text() -> String { line.withUnsafeBytes { String(decoding: $0, as: UTF8.self) } }
            if starts("D ") {
                if let data { line.withUnsafeBytes { Self.unescape($0.dropFirst(2), into: data) } }
                continue
            }
            if line.count == 2 && starts("OK") || starts("OK ") { return nil }
            if starts("ERR ") {
                let rest = text().dropFirst(4)
                let code = rest.prefix(while: { $0 != " " })
                guard let value = UInt32(code) else { throw .protocolError("bad error line: \(text().prefix(80))") }
                return AssuanError(code: value, text: String(rest.dropFirst(code.count)).trimmingSpaces)
            }
            if starts("S ") || starts("#") || line.count == 1 && starts("S") { continue }
            if starts("INQUIRE") {
                guard send("CAN") else { throw .closed }
                continue
            }
            throw .protocolError("unexpected line: \(text().prefix(80))")
        }
    }

    /// Assuan's `%XX` escapes undone, straight into locked memory.
    private static func unescape(_ bytes: UnsafeRawBufferPointer.SubSequence, into out: SecureBytes) {
        let start = out.count
        out.resize(to: start + bytes.count)
        var n = start
        out.withUnsafeMutableBytes { dst in
            var i = bytes.startIndex
            while i < bytes.endIndex {
                var c = bytes[i]
                if c == UInt8(ascii: "%"), i + 2 < bytes.endIndex, let v = hexValue(bytes[i + 1], bytes[i + 2]) {
                    c = v
                    i += 2
                }
                dst[n] = c
                n += 1
                i += 1
            }
        }
        out.resize(to: n)
    }

    private static func hexValue(_ a: UInt8, _ b: UInt8) -> UInt8? {
        func digit(_ x: UInt8) -> UInt8? {
            switch x {
            case 48...57: x - 48
            case 65...70: x - 55
            case 97...102: x - 87
            default: nil
            }
        }
        guard let h = digit(a), let l = digit(b) else { return nil }
        return h << 4 | l
    }

    /// The next line, without its newline, in locked memory; the caller wipes it.
    private mutating func readLine() throws(AssuanFailure) -> SecureBytes {
        while true {
            if let nl = pending.withUnsafeBytes({ $0.firstIndex(of: 10) }) {
                let line = pending.withUnsafeBytes { SecureBytes(copying: UnsafeRawBufferPointer(rebasing: $0[..<nl])) }
                // The rest moves to the front; what it leaves behind is wiped by the resize.
                let rest = pending.count - nl - 1
                pending.withUnsafeMutableBytes { $0.baseAddress!.copyMemory(from: $0.baseAddress! + nl + 1, byteCount: rest) }
                pending.resize(to: rest)
                return line
            }
            guard pending.count <= 4 * Pinentry.maxLine else { throw .protocolError("a line over \(Pinentry.maxLine) bytes") }
            let left = deadline - ContinuousClock.now
            guard left > .zero else { throw .timedOut }
            let ms = Int32(min(Int64(Int32.max), left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1))
            var p = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0),
                     pollfd(fd: ending, events: Int16(POLLIN), revents: 0)]
            let ready = poll(&p, ending >= 0 ? 2 : 1, ms)
            if ready < 0 {
                if errno == EINTR { continue }
                throw .protocolError("poll: \(String(cString: strerror(errno)))")
            }
            if ready == 0 { continue }
            if ending >= 0 && p[1].revents != 0 { throw .ended }
            let have = pending.count
            pending.resize(to: have + 4096)
            let n = pending.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + have, 4096, 0) }
            let failure = errno   // before the resize, which may allocate
            pending.resize(to: have + max(n, 0))
            if n < 0 && failure == EINTR { continue }
            if n <= 0 { throw .closed }
        }
    }
}
