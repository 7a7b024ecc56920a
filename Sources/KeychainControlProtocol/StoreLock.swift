// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif
import KeychainModel

/// The store file's flock says who may touch it: a daemon holds it exclusively for its life;
/// a command that opens the store itself holds it shared while it works, so that no daemon
/// starts under it. A shared lock that cannot be had means a daemon serves the store.
package enum StoreLock {
    /// How long a starting daemon waits for commands that opened the store themselves.
    package static let daemonWait: Double = 5

    /// The exclusive lock for a daemon's life. Waits up to `daemonWait` for commands working on
    /// the store; a running daemon is refused at once, by its mountpoint.
    package static func acquireExclusive(_ path: String) throws -> Int32 {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw KeychainError.noSuchStore(path) }
        let deadline = Deadline.after(seconds: daemonWait)
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK || errno == EINTR else {
                let why = String(cString: strerror(errno))
                close(fd)
                throw KeychainError.io("cannot lock \(path): \(why)")
            }
            if let record = MountRegistry.record(forStore: path), ProcessState.isRunning(record.pid),
               holders(of: fd).contains(where: { $0.pid == record.pid && $0.exclusive }) {
                close(fd)
                throw KeychainError.alreadyServed(path, at: record.mountpoint)
            }
            if deadline.hasPassed {
                let who = holders(of: fd).map { ProcessState.describe($0.pid) }
                close(fd)
                throw KeychainError.storeBusy("\(path) is in use by \(who.isEmpty ? "another process" : who.joined(separator: ", "))")
            }
            usleep(50_000)
        }
        return fd
    }

    /// A shared lock on the store for as long as the lease lives, or nil when a daemon holds it.
    package static func sharedLease(_ fd: Int32) throws -> StoreLease? {
        while flock(fd, LOCK_SH | LOCK_NB) != 0 {
            if errno == EINTR { continue }
            guard errno == EWOULDBLOCK else { throw KeychainError.io("cannot lock the store: \(String(cString: strerror(errno)))") }
            return nil
        }
        return StoreLease(fd: fd)
    }

    /// Whether a daemon holds the store now; probes with a shared lock dropped at once.
    package static func isHeld(_ path: String) -> Bool {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        while flock(fd, LOCK_SH | LOCK_NB) != 0 {
            if errno != EINTR { return errno == EWOULDBLOCK }
        }
        return false
    }

    /// The processes holding a flock on the file open at `fd`, from /proc/locks (waiters left out).
    /// Split as bytes, not Strings, for the same reason as `ProcessState.procFile`.
    package static func holders(of fd: Int32) -> [(pid: Int32, exclusive: Bool)] {
        var st = stat()
        guard fstat(fd, &st) == 0, let table = ProcessState.procFile("/proc/locks") else { return [] }
        let dev = UInt64(st.st_dev)
        let major = (dev >> 8) & 0xfff | (dev >> 32) & ~0xfff, minor = dev & 0xff | (dev >> 12) & ~0xff
        let id = Array((PathText.hex(major, width: 2) + ":" + PathText.hex(minor, width: 2) + ":" + String(UInt64(st.st_ino))).utf8)
        var holders: [(pid: Int32, exclusive: Bool)] = []
        // "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF"; waiters have "->" after the number.
        var fields: [Int] = []  // start and end of each field of the line, in `table`
        var fieldStart: Int?
        for i in 0...table.count {
            let byte = i < table.count ? table[i] : UInt8(ascii: "\n")
            guard byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\n") else {
                if fieldStart == nil { fieldStart = i }
                continue
            }
            if let start = fieldStart {
                fields += [start, i]
                fieldStart = nil
            }
            guard byte == UInt8(ascii: "\n") else { continue }
            func field(_ n: Int) -> ArraySlice<UInt8> { table[fields[2 * n]..<fields[2 * n + 1]] }
            if fields.count >= 12, field(1).elementsEqual("FLOCK".utf8), !field(2).elementsEqual("->".utf8),
               field(5).elementsEqual(id), let pid = decimal(field(4)) {
                holders.append((pid, field(3).elementsEqual("WRITE".utf8)))
            }
            fields.removeAll(keepingCapacity: true)
        }
        return holders
    }

    private static func decimal(_ digits: ArraySlice<UInt8>) -> Int32? {
        guard !digits.isEmpty, digits.count <= 9 else { return nil }
        var value: Int32 = 0
        for d in digits {
            guard d >= UInt8(ascii: "0"), d <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int32(d - UInt8(ascii: "0"))
        }
        return value
    }
}

/// A shared flock on the store, released when the lease is dropped.
package final class StoreLease: Sendable {
    let fd: Int32
    init(fd: Int32) { self.fd = fd }
    deinit { close(fd) }
}
