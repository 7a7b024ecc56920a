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

    /// A line on standard error.
    static func error(_ text: String) {
        var text = text + "\n"
        text.withUTF8 { writeAll(UnsafeRawBufferPointer($0), fd: 2) }
    }

    static func error(_ secret: SecureBytes) { secret.withUnsafeBytes { writeAll($0, fd: 2) } }

    private static func writeAll(_ raw: UnsafeRawBufferPointer, fd: Int32 = 1) {
        var off = 0
        while off < raw.count {
            let n = Glibc.write(fd, raw.baseAddress! + off, raw.count - off)
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
        if isPlainText(raw) { return "\"" + String(decoding: raw, as: UTF8.self) + "\"" }
        return "0x" + raw.map { String(format: "%02x", $0) }.joined()
    }

    static func date(_ d: Date) -> String { d.formatted(.iso8601) }

    /// `dump-keychain -d`'s line for a secret, as `bytes` shows it (`secret: "text"` or
    /// `secret: 0x…`, and a newline), built in locked memory.
    static func secretLine(_ secret: SecureBytes) -> SecureBytes {
        secret.withUnsafeBytes { raw in
            let asText = isPlainText(raw)
            let head = Array((asText ? "secret: \"" : "secret: 0x").utf8)
            let out = SecureBytes(count: head.count + (asText ? raw.count + 2 : 2 * raw.count + 1))
            out.withUnsafeMutableBytes { dst in
                var n = 0
                func put(_ b: UInt8) { dst[n] = b; n += 1 }
                head.forEach(put)
                let digits = Array("0123456789abcdef".utf8)
                for b in raw {
                    if asText { put(b) } else { put(digits[Int(b >> 4)]); put(digits[Int(b & 15)]) }
                }
                if asText { put(UInt8(ascii: "\"")) }
                put(UInt8(ascii: "\n"))
            }
            return out
        }
    }

    /// UTF-8 without control characters, decoded scalar by scalar: no String holds the bytes.
    static func isPlainText(_ raw: UnsafeRawBufferPointer) -> Bool {
        var iterator = raw.makeIterator()
        var decoder = UTF8()
        while true {
            switch decoder.decode(&iterator) {
            case .scalarValue(let scalar): if scalar.value < 0x20 || scalar.value == 0x7f { return false }
            case .emptyInput: return true
            case .error: return false
            }
        }
    }

    /// macOS `security`'s print_buffer, which `find-*-password -g` uses for the password:
    /// `"text"` when every byte is printable ASCII other than `\`; otherwise `0x` and upper-case
    /// hex, then (if any byte is printable) two spaces and the text with the other bytes as
    /// `\ooo` octal; a password of no printable byte keeps the one space macOS leaves after
    /// the hex. Built in locked memory, as it holds the secret.
    static func macOSBuffer(_ secret: SecureBytes) -> SecureBytes {
        secret.withUnsafeBytes { raw in
            func printable(_ b: UInt8) -> Bool { b >= 0x20 && b <= 0x7e && b != UInt8(ascii: "\\") }
            let hex = raw.contains { !printable($0) }, ascii = raw.contains(where: printable)
            let out = SecureBytes(count: 0)
            var n = 0
            out.resize(to: (hex ? 2 + 2 * raw.count + 2 : 0) + (ascii ? 2 + 4 * raw.count : 0))
            out.withUnsafeMutableBytes { dst in
                func put(_ b: UInt8) { dst[n] = b; n += 1 }
                let digits = Array("0123456789ABCDEF".utf8)
                if hex {
                    put(UInt8(ascii: "0")); put(UInt8(ascii: "x"))
                    for b in raw { put(digits[Int(b >> 4)]); put(digits[Int(b & 15)]) }
                    if ascii { put(0x20) }
                    put(0x20)
                }
                if ascii {
                    put(UInt8(ascii: "\""))
                    for b in raw {
                        if printable(b) { put(b); continue }
                        put(UInt8(ascii: "\\"))
                        put(48 + (b >> 6 & 7)); put(48 + (b >> 3 & 7)); put(48 + (b & 7))
                    }
                    put(UInt8(ascii: "\""))
                }
            }
            out.resize(to: n)
            return out
        }
    }
}
