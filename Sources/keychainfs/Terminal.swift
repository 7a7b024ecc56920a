import ArgumentParser
import Foundation
import KeychainCrypto
import KeychainStore

/// The controlling terminal, for passphrases and secrets typed without echo.
final class Terminal {
    private let fd: Int32

    private init(fd: Int32) { self.fd = fd }
    deinit { close(fd) }

    /// Opens /dev/tty; without one, says which options to use instead.
    static func open(purpose: String, alternatives: String) throws -> Terminal {
        let fd = Glibc.open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard fd >= 0 else {
            throw KeychainError.invalidInput("there is no terminal to \(purpose) on; use \(alternatives)")
        }
        return Terminal(fd: fd)
    }

    /// Prompts and reads one line without echo, into locked memory.
    ///
    /// The terminal is put in non-canonical mode with signals off, and the few editing keys
    /// are handled here: the kernel's line buffer would otherwise hold the passphrase, and a
    /// Ctrl-C delivered as a signal would leave the terminal without echo. Ctrl-C aborts
    /// (exit 130), Ctrl-D on an empty line ends it, Backspace and Ctrl-U edit.
    func readHidden(prompt: String) throws -> SecureBytes {
        var saved = termios()
        guard tcgetattr(fd, &saved) == 0 else {
            throw KeychainError.io("cannot configure the terminal: \(String(cString: strerror(errno)))")
        }
        var raw = saved
        raw.c_lflag &= ~tcflag_t(ECHO | ICANON | ISIG | IEXTEN)
        withUnsafeMutableBytes(of: &raw.c_cc) { cc in
            cc[Int(VMIN)] = 1
            cc[Int(VTIME)] = 0
        }
        // Echo goes off before the prompt shows, so nothing typed in answer to it is echoed
        // or flushed; only what was typed ahead of it is dropped.
        tcsetattr(fd, TCSAFLUSH, &raw)
        write(prompt)
        defer {
            tcsetattr(fd, TCSAFLUSH, &saved)
            write("\n")
        }
        return try readEditedLine()
    }

    /// Prompts and reads one line as typed, with echo: for answers, never for secrets.
    func ask(_ prompt: String) throws -> String {
        write(prompt)
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while bytes.count < 1024 {
            let n = read(fd, &byte, 1)
            if n < 0 {
                if errno == EINTR { continue }
                throw KeychainError.io("cannot read from the terminal: \(String(cString: strerror(errno)))")
            }
            if n == 0 || byte == 0x0a { break }
            bytes.append(byte)
        }
        return String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespaces)
    }

    /// A line for the person at the terminal (a retry, a refusal), not for the output.
    func say(_ text: String) { write(text + "\n") }

    private func readEditedLine() throws -> SecureBytes {
        let line = SecureBytes(count: 0)
        var byte: UInt8 = 0
        defer { byte = 0 }
        while true {
            let n = read(fd, &byte, 1)
            if n < 0 {
                if errno == EINTR { continue }
                throw KeychainError.io("cannot read from the terminal: \(String(cString: strerror(errno)))")
            }
            if n == 0 { return line }
            switch byte {
            case 0x0a, 0x0d: return line
            case 0x03:
                line.wipe()
                throw ExitCode(130)
            case 0x04 where line.count == 0: return line
            case 0x15: line.resize(to: 0)
            case 0x7f, 0x08: line.resize(to: Self.lengthWithoutLastCharacter(line))
            default:
                guard line.count < LineReader.maxBytes else {
                    throw KeychainError.invalidInput("the input is longer than \(LineReader.maxBytes) bytes")
                }
                line.resize(to: line.count + 1)
                line.withUnsafeMutableBytes { $0[$0.count - 1] = byte }
            }
        }
    }

    /// Backspace removes a whole UTF-8 character: its continuation bytes and its lead byte.
    private static func lengthWithoutLastCharacter(_ line: SecureBytes) -> Int {
        line.withUnsafeBytes { b in
            var n = b.count
            while n > 0 && b[n - 1] & 0xC0 == 0x80 { n -= 1 }
            return max(n - 1, 0)
        }
    }

    private func write(_ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    }
}
