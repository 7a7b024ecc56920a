// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif
import KeychainModel

/// What a process may believe about files others could have made: a directory or record is
/// trusted only if this user owns it, it is not a symlink, and no one else can write to it.
/// Anything else (a `/tmp/keychainfs-UID` another user made first, say) is ignored, never
/// read, written or removed.
package enum TrustedPath {
    /// The contents of a regular file this user owns that no one else can write, up to
    /// `maxBytes`; nil for anything else.
    package static func readOwnFile(_ path: String, maxBytes: Int = 64 << 10) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_uid == getuid(), st.st_mode & 0o022 == 0,
              Int(st.st_size) <= maxBytes else { return nil }
        var out = [UInt8](repeating: 0, count: Int(st.st_size))
        var off = 0
        while off < out.count {
            let n = out.withUnsafeMutableBytes { read(fd, $0.baseAddress! + off, $0.count - off) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return nil }
            off += n
        }
        return out
    }
}

/// Whether a process still runs: it exists and is not a zombie, which would still answer
/// kill(pid, 0) though it holds no lock and serves nothing.
package enum ProcessState {
    package static func isRunning(_ pid: Int32) -> Bool {
        guard pid > 0, let stat = procFile("/proc/\(pid)/stat"),
              let close = stat.lastIndex(of: UInt8(ascii: ")")) else { return false }
        let state = stat[(close + 1)...].first { $0 != UInt8(ascii: " ") }
        return state != nil && state != UInt8(ascii: "Z") && state != UInt8(ascii: "X")
    }

    /// A file of /proc, whose size stat does not tell, read whole as bytes: String(contentsOfFile:)
    /// costs the keychainfs front's lookup more than the daemon's answer does.
    package static func procFile(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var content: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 << 10)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { return nil }
            if n == 0 { return content }
            content.append(contentsOf: chunk[0..<n])
        }
    }

    /// Waits up to `seconds` for the process to end, checking every millisecond; true if it did.
    @discardableResult
    package static func waitForExit(_ pid: Int32, upTo seconds: Double) -> Bool {
        let deadline = Deadline.after(seconds: seconds)
        while isRunning(pid) && !deadline.hasPassed { usleep(1_000) }
        return !isRunning(pid)
    }

    /// How long `unmount` waits for a daemon it asked to exit.
    package static let daemonExitLimit: Double = 300

    /// `unmount` returns once the daemon has exited, so that its store is free for the next
    /// `mount` or command. A daemon exits milliseconds after its mount is detached, but it closes
    /// the store first, and that syncs it: on a disk busy with other writers a sync has taken
    /// over ten seconds, and a shorter fixed wait then returned while the daemon still held the
    /// store, and the next `mount` failed as busy. So it waits as long as it takes, up to a limit
    /// no sync reaches, and says why after a second; a daemon still alive then is an error.
    package static func awaitDaemonExit(_ pid: Int32, limit: Double = daemonExitLimit,
                                        note: (String) -> Void) throws(KeychainError) {
        if waitForExit(pid, upTo: min(1, limit)) { return }
        note("waiting for the daemon (\(describe(pid))) to close the store")
        if waitForExit(pid, upTo: limit - min(1, limit)) { return }
        throw .storeBusy("the mount is gone, but its daemon (\(describe(pid))) has not exited after "
            + "\(Int(limit)) s; the store stays held until it does")
    }

    /// "process 123 (keychainfs)", for messages.
    package static func describe(_ pid: Int32) -> String {
        let comm = (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8))
            .map { String($0.prefix { $0 != "\n" }) }
        return "process \(pid)" + (comm.map { " (\($0))" } ?? "")
    }
}
