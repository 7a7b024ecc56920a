import Foundation
import KeychainControl
import KeychainCrypto
import KeychainModel
import KeychainStore

/// Standard output, written with write(2) so that secrets go out exactly as their bytes and
/// never through a String.
enum Output {
    static func line(_ text: String) { write(text + "\n") }

    static func write(_ text: String) {
        var text = text
        text.withUTF8 { writeAll(UnsafeRawBufferPointer($0)) }
    }

    static func write(_ secret: SecureBytes) { secret.withUnsafeBytes { writeAll($0) } }

    private static func writeAll(_ raw: UnsafeRawBufferPointer) {
        var off = 0
        while off < raw.count {
            let n = Glibc.write(1, raw.baseAddress! + off, raw.count - off)
            if n < 0 { if errno == EINTR { continue }; return }
            off += n
        }
    }
}

/// How attribute values appear in `key: value` lines: one line each, so `\`, control
/// characters and DEL are escaped (`\\`, `\n`, `\t`, `\r`, `\xNN`).
enum Printable {
    static func text(_ s: String) -> String {
        var out = ""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case "\r": out += "\\r"
            case _ where scalar.value < 0x20 || scalar.value == 0x7f:
                out += String(format: "\\x%02x", scalar.value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// Bytes that are UTF-8 without control characters, as that text; anything else as 0x-prefixed hex.
    static func bytes(_ raw: UnsafeRawBufferPointer) -> String {
        if let s = String(validating: raw, as: UTF8.self),
           !s.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f }) {
            return "\"" + s + "\""
        }
        return "0x" + raw.map { String(format: "%02x", $0) }.joined()
    }

    static func date(_ d: Date) -> String { d.formatted(.iso8601) }
}
