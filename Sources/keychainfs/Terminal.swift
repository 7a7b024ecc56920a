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

    /// Prompts and reads one line without echo. Signals are off meanwhile so that Ctrl-C
    /// cannot leave the terminal without echo; it is read as a byte and aborts here instead.
    func readHidden(prompt: String) throws -> SecureBytes {
        write(prompt)
        var saved = termios()
        guard tcgetattr(fd, &saved) == 0 else {
            throw KeychainError.io("cannot configure the terminal: \(String(cString: strerror(errno)))")
        }
        var quiet = saved
        quiet.c_lflag &= ~tcflag_t(ECHO | ISIG)
        quiet.c_lflag |= tcflag_t(ICANON)
        tcsetattr(fd, TCSAFLUSH, &quiet)
        defer {
            tcsetattr(fd, TCSAFLUSH, &saved)
            write("\n")
        }
        let line = try LineReader.readLine(fd: fd, what: "the terminal")
        let interrupted = line.withUnsafeBytes { $0.contains(0x03) }
        if interrupted {
            line.wipe()
            throw ExitCode(130)
        }
        return line
    }

    private func write(_ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    }
}
