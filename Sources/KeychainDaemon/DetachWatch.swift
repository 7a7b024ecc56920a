import Foundation
import KeychainClient

/// Ends the mount's session once the mount is detached from the daemon's mount namespace by
/// anything but `keychainfs unmount` (`fusermount3 -u`, `umount`, a desktop's eject). The
/// kernel ends the connection at a detach only when no other mount namespace holds a copy of
/// the mount (`unshare -m`, a container, a service's private mounts); with one, the daemon
/// would go on serving every unlocked secret through the copy, to whoever can reach it, until
/// a stop signal. `/proc/self/mountinfo` signals each change of the namespace's mounts
/// (POLLPRI); the mount is looked for by its id, which a directory renamed above it keeps.
final class DetachWatch: Sendable {
    private let wakeWrite: Int32

    /// Watches the mount `id`; `detached` runs once, on the watch's thread, when it is gone.
    /// Nil if the mount table cannot be watched (the daemon then ends only as before).
    init?(mountID id: UInt64, detached: @escaping @Sendable () -> Void) {
        var wake: [Int32] = [0, 0]
        let table = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC)
        guard table >= 0 else { return nil }
        guard pipe(&wake) == 0 else {
            close(table)
            return nil
        }
        for fd in wake { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        wakeWrite = wake[1]
        let wakeRead = wake[0]
        let thread = Thread {
            defer {
                close(table)
                close(wakeRead)
            }
            var fds = [pollfd(fd: table, events: Int16(POLLPRI), revents: 0), pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)]
            // A detach between the mount and the open above changed nothing the poll would see.
            while Self.isMounted(id, table: table) {
                guard poll(&fds, 2, -1) >= 0 || errno == EINTR else { return }
                if fds[1].revents != 0 { return }
            }
            detached()
        }
        thread.name = "keychainfs.detach-watch"
        thread.start()
    }

    /// Ends the watch (the daemon is ending the session itself).
    func stop() {
        var byte: UInt8 = 0
        _ = write(wakeWrite, &byte, 1)
    }

    deinit { close(wakeWrite) }

    /// Read again from its start through the descriptor kept open, so that no failure to open
    /// (a descriptor limit reached) is ever taken for a detach; a table that cannot be read
    /// at all is taken for one still mounted.
    static func isMounted(_ id: UInt64, table: Int32) -> Bool {
        guard lseek(table, 0, SEEK_SET) == 0 else { return true }
        let text = Descriptor.readToEnd(table, chunk: 16 << 10)
        return text.isEmpty || MountTable.entries(text).contains { $0.id == id }
    }
}
