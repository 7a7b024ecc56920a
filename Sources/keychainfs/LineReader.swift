import Foundation
import KeychainCrypto
import KeychainStore

/// Reads one line into locked memory, a byte at a time so that nothing past the newline is
/// consumed: the same descriptor can then carry a second line (passwd's new passphrase) or
/// the secret.
enum LineReader {
    /// Longer than any passphrase; guards against being handed a whole file by mistake.
    static let maxBytes = 64 * 1024

    /// `endsAtNUL`: a NUL ends the line too, as pam_exec's `expose_authtok` ends the password.
    static func readLine(fd: Int32, what: String, endsAtNUL: Bool = false) throws -> SecureBytes {
        let line = SecureBytes(count: 0)
        var byte: UInt8 = 0
        while true {
            let n = read(fd, &byte, 1)
            if n < 0 {
                if errno == EINTR { continue }
                throw KeychainError.invalidInput("cannot read \(what): \(String(cString: strerror(errno)))")
            }
            if n == 0 || byte == UInt8(ascii: "\n") || (endsAtNUL && byte == 0) { break }
            guard line.count < maxBytes else { throw KeychainError.invalidInput("\(what) is longer than \(maxBytes) bytes") }
            line.resize(to: line.count + 1)
            line.withUnsafeMutableBytes { $0[$0.count - 1] = byte }
        }
        byte = 0
        return line
    }
}
