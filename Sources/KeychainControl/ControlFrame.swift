import Foundation
import KeychainCrypto
import KeychainStore

/// Length-prefixed frames: a UInt32 big-endian byte count, then that many bytes of JSON.
enum ControlFrame {
    /// Large enough for a dump with many 16 MiB secrets in base64; small enough that a
    /// garbage length cannot make us allocate without bound.
    static let maxBytes = 256 << 20

    /// Encodes `value`, sends it, and zeroes the encoded copy, which may hold a secret.
    static func send<T: Encodable>(_ value: T, to fd: Int32) throws {
        var body: Data
        do { body = try JSONEncoder().encode(value) } catch {
            throw KeychainError.io("cannot encode a control message: \(error)")
        }
        defer { body.resetBytes(in: 0..<body.count) }
        guard body.count <= maxBytes else { throw KeychainError.io("control message of \(body.count) bytes is too large") }
        let n = UInt32(body.count)
        try writeAll(fd, [UInt8(n >> 24), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)])
        try body.withUnsafeBytes { try writeAll(fd, $0) }
    }

    /// Reads one frame and decodes it; nil on a clean end of stream before the frame.
    /// The frame is read into locked memory, which is wiped when this returns.
    static func receive<T: Decodable>(_ type: T.Type, from fd: Int32) throws -> T? {
        let header = SecureBytes(count: 4)
        guard try readAll(fd, header, allowEOF: true) else { return nil }
        let n = header.withUnsafeBytes { b in Int(b[0]) << 24 | Int(b[1]) << 16 | Int(b[2]) << 8 | Int(b[3]) }
        guard n <= maxBytes else { throw KeychainError.io("control message of \(n) bytes is too large") }
        let body = SecureBytes(count: n)
        guard try readAll(fd, body, allowEOF: false) else { return nil }
        return try body.withUnsafeBytes { raw in
            let view = raw.count == 0 ? Data() :
                Data(bytesNoCopy: UnsafeMutableRawPointer(mutating: raw.baseAddress!), count: raw.count, deallocator: .none)
            do { return try JSONDecoder().decode(T.self, from: view) } catch {
                throw KeychainError.io("malformed control message: \(error)")
            }
        }
    }

    private static func writeAll(_ fd: Int32, _ bytes: some Collection<UInt8>) throws {
        try Array(bytes).withUnsafeBytes { try writeAll(fd, $0) }
    }

    private static func writeAll(_ fd: Int32, _ raw: UnsafeRawBufferPointer) throws {
        var off = 0
        while off < raw.count {
            let w = Glibc.send(fd, raw.baseAddress! + off, raw.count - off, Int32(MSG_NOSIGNAL))
            if w < 0 {
                if errno == EINTR { continue }
                throw KeychainError.io("control socket write failed: \(String(cString: strerror(errno)))")
            }
            off += w
        }
    }

    /// Fills `buffer`; false if the stream ended before the first byte and `allowEOF`.
    private static func readAll(_ fd: Int32, _ buffer: SecureBytes, allowEOF: Bool) throws -> Bool {
        try buffer.withUnsafeMutableBytes { raw in
            var off = 0
            while off < raw.count {
                let r = recv(fd, raw.baseAddress! + off, raw.count - off, 0)
                if r < 0 {
                    if errno == EINTR { continue }
                    let reason = errno == EAGAIN ? "timed out" : String(cString: strerror(errno))
                    throw KeychainError.io("control socket read failed: \(reason)")
                }
                if r == 0 {
                    if off == 0 && allowEOF { return false }
                    throw KeychainError.io("the control connection closed in the middle of a message")
                }
                off += r
            }
            return true
        }
    }
}
