// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif
import KeychainCrypto
import KeychainModel

/// The versions a daemon and a client compare.
package enum ControlProtocol {
    /// The wire format's version; a frame of any other version is answered with a
    /// version-mismatch frame. Raise it whenever a message or field changes meaning.
    /// (Version 1 was the JSON format, which had no version field. Version 3 added delete's
    /// `all`, the deleted records in its reply, the query's attribute filters and lock-after.
    /// Version 4 added the daemon's pid, version, memory lock and allow-root in the status,
    /// and the sealed git extras of an item. Version 5 added import and export, for backups.
    /// Version 6 added the daemon's `identified` frame that opens every connection, and the
    /// access-denied error. Version 7 added the synchronizable attribute (tag 40), the
    /// not-synchronizable error and the `sync` request (issue 20). Version 9 said a sync's
    /// own directory written again apart from its refusals. Version 10 added the refused
    /// secret of a dump, which goes on past it.)
    package static let version: UInt16 = 10
    /// keychainfs's own version, which a mismatch reports to the user.
    package static let softwareVersion = "0.1.0"
}

/// One message on the control socket:
///
///     "KCFS" | version (UInt16) | kind (UInt16) | payload length (UInt32) | payload
///
/// big-endian, the payload being `WireFields`. This 12-byte header and the version-mismatch
/// frame (kind 0xFFFF, fields 1 and 2) are frozen, so that any two versions can tell each
/// other apart. The payload is built and read in locked memory (`SecureBytes`), so a secret
/// never passes through `String`, `Data` or text, and every buffer that held one is wiped.
package enum ControlFrame {
    package static let magic: [UInt8] = Array("KCFS".utf8)
    package static let headerSize = 12
    package static let versionMismatchKind: UInt16 = 0xFFFF
    /// The largest payload: a 16 MiB secret plus 1 MiB for everything else in one request or
    /// one reply frame (an item's key and attributes). Replies with many items are streamed,
    /// one frame per item.
    package static let maxPayload = maxSecretBytes + (1 << 20)
    /// A version-mismatch frame from any version must be small.
    static let maxMismatchPayload = 4096

    package struct Header: Equatable, Sendable {
        package var version: UInt16
        package var kind: UInt16
        package var length: Int

        /// Checks the magic and the length cap; the version is the caller's to compare.
        package init(parsing b: [UInt8]) throws {
            guard b.count == ControlFrame.headerSize, Array(b[0..<4]) == ControlFrame.magic else {
                throw KeychainError.io("the peer does not speak the keychainfs control protocol")
            }
            version = UInt16(b[4]) << 8 | UInt16(b[5])
            kind = UInt16(b[6]) << 8 | UInt16(b[7])
            length = Int(b[8]) << 24 | Int(b[9]) << 16 | Int(b[10]) << 8 | Int(b[11])
            guard length <= ControlFrame.maxPayload else { throw ControlFrame.tooLarge(length) }
        }
    }

    package static func tooLarge(_ n: Int) -> KeychainError {
        .io("a control message of \(n) bytes is over the limit of \(maxPayload) bytes (a 16 MiB secret plus 1 MiB)")
    }

    /// Whether `e` is `tooLarge`, from this side or from the daemon.
    package static func isTooLarge(_ e: KeychainError) -> Bool {
        guard case .io(let message) = e else { return false }
        return message.hasPrefix("a control message of ") && message.hasSuffix("is over the limit of \(maxPayload) bytes (a 16 MiB secret plus 1 MiB)")
    }

    /// A whole frame, header included, in locked memory. Throws when the payload is over the cap.
    package static func encode(kind: UInt16, version: UInt16 = ControlProtocol.version,
                               _ body: (WireWriter) throws -> Void) throws -> SecureBytes {
        let w = WireWriter()
        w.raw(magic)
        w.integer(version)
        w.integer(kind)
        w.integer(UInt32(0))
        try body(w)
        let length = w.count - headerSize
        guard length <= maxPayload else { throw tooLarge(length) }
        w.patch(UInt32(length), at: 8)
        w.buffer.resize(to: w.count)
        return w.buffer
    }

    /// What a daemon answers to a frame of another version: its own versions, in the frozen
    /// layout every version reads.
    package static func versionMismatch() -> SecureBytes {
        // Two short fields cannot exceed the cap.
        try! encode(kind: versionMismatchKind) { w in
            w.field(.softwareVersion, ControlProtocol.softwareVersion)
            w.field(.protocolVersion, ControlProtocol.version)
        }
    }

    /// The error a client reports on a frame of another version: the daemon's own version
    /// from a mismatch frame, else its protocol number.
    package static func mismatchError(_ header: Header, payload: SecureBytes?) -> KeychainError {
        if header.kind == versionMismatchKind, let payload, let fields = try? WireFields(payload),
           let version = try? fields.string(.softwareVersion) {
            let proto = (try? fields.integer(.protocolVersion, as: UInt16.self)).flatMap { $0 }
            return .daemonVersionMismatch(running: version + (proto.map { " (control protocol \($0))" } ?? ""))
        }
        return .daemonVersionMismatch(running: "unknown (control protocol \(header.version))")
    }

    /// Sends a whole frame before `deadline`.
    package static func send(_ frame: SecureBytes, to fd: Int32, deadline: Deadline) throws {
        try frame.withUnsafeBytes { raw in
            var off = 0
            while off < raw.count {
                let w = Glibc.send(fd, raw.baseAddress! + off, raw.count - off, Int32(MSG_NOSIGNAL))
                if w >= 0 { off += w; continue }
                switch errno {
                case EINTR: continue
                case EAGAIN: try SocketWait.until(fd, events: Int16(POLLOUT), deadline: deadline, doing: "writing")
                default: throw KeychainError.io("control socket write failed: \(String(cString: strerror(errno)))")
                }
            }
        }
    }

    /// Reads one frame: nil on a clean end of stream before it. The payload is read into
    /// locked memory. A frame of another version throws `daemonVersionMismatch`.
    package static func receive(from fd: Int32, deadline: Deadline) throws -> (Header, SecureBytes)? {
        var headerBytes = [UInt8](repeating: 0, count: headerSize)
        let got = try headerBytes.withUnsafeMutableBytes { try read(fd, into: $0, deadline: deadline) }
        if got == 0 { return nil }
        guard got == headerSize else { throw KeychainError.io("the control connection closed in the middle of a message") }
        let header = try Header(parsing: headerBytes)
        if header.version != ControlProtocol.version || header.kind == versionMismatchKind {
            var payload: SecureBytes?
            if header.length <= maxMismatchPayload {
                let p = SecureBytes(count: header.length)
                if try p.withUnsafeMutableBytes({ try read(fd, into: $0, deadline: deadline) }) == header.length { payload = p }
            }
            throw mismatchError(header, payload: payload)
        }
        let payload = SecureBytes(count: header.length)
        let n = try payload.withUnsafeMutableBytes { try read(fd, into: $0, deadline: deadline) }
        guard n == header.length else { throw KeychainError.io("the control connection closed in the middle of a message") }
        return (header, payload)
    }

    /// Fills `buffer` unless the stream ends first; returns how many bytes were read.
    private static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, deadline: Deadline) throws -> Int {
        var off = 0
        while off < buffer.count {
            let r = recv(fd, buffer.baseAddress! + off, buffer.count - off, 0)
            if r > 0 { off += r; continue }
            if r == 0 { return off }
            switch errno {
            case EINTR: continue
            case EAGAIN: try SocketWait.until(fd, events: Int16(POLLIN), deadline: deadline, doing: "reading")
            default: throw KeychainError.io("control socket read failed: \(String(cString: strerror(errno)))")
            }
        }
        return off
    }
}

/// A point in time on the monotonic clock, by which a whole exchange must be done.
package struct Deadline: Sendable, Comparable {
    package let nanoseconds: UInt64

    package static var now: Deadline {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Deadline(nanoseconds: UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec))
    }

    package init(nanoseconds: UInt64) { self.nanoseconds = nanoseconds }

    package static func after(seconds: Double) -> Deadline {
        Deadline(nanoseconds: now.nanoseconds + UInt64(seconds * 1e9))
    }

    package var hasPassed: Bool { Deadline.now >= self }

    /// Milliseconds left, rounded up, for poll(); 0 once passed.
    package var remainingMilliseconds: Int32 {
        let n = Deadline.now.nanoseconds
        guard nanoseconds > n else { return 0 }
        return Int32(min((nanoseconds - n + 999_999) / 1_000_000, UInt64(Int32.max)))
    }

    package static func < (a: Deadline, b: Deadline) -> Bool { a.nanoseconds < b.nanoseconds }
}

package enum SocketWait {
    /// Waits until `fd` is ready for `events`, or throws once `deadline` passes.
    package static func until(_ fd: Int32, events: Int16, deadline: Deadline, doing what: String) throws {
        while true {
            let ms = deadline.remainingMilliseconds
            guard ms > 0 else { throw KeychainError.io("the control connection timed out while \(what)") }
            var p = pollfd(fd: fd, events: events, revents: 0)
            let r = poll(&p, 1, ms)
            if r > 0 { return }
            if r < 0 && errno != EINTR { throw KeychainError.io("poll failed: \(String(cString: strerror(errno)))") }
        }
    }
}
