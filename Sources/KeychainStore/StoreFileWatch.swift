import Foundation
import KeychainModel
import CProcessPin

/// Hears every write to the store's database and WAL (inotify), whoever makes it: a content
/// write or truncation, a change of mode, owner, times or links, and a file created, removed
/// or renamed under either name. A commit asks it whether the files are still as this
/// instance left them instead of reading their times (`Keychain+FilesRecord.swift`).
///
/// Why not `stat`: a `stat` that returns a file's times makes the kernel give the file's next
/// write a fine-grained time (multigrain timestamps, Linux 6.13), so a commit that read the
/// WAL's times before and after itself had every next commit change the WAL's inode; and on
/// ext4 without a journal, as here, `fdatasync` then writes the inode too: a second I/O per
/// commit (a create took 467 µs with it, 390 without; docs/performance-notes.md, session 13).
///
/// A write through a shared `mmap` raises no event; a process that can map the store's files
/// (mode 0600, the user's) can rewrite the record beside the counter just as well.
final class StoreFileWatch: Sendable {
    private let fd: Int32
    private let directory: Int32
    private let names: [[UInt8]]

    /// Nil when inotify cannot watch the files (no WAL yet, the user's inotify limits reached,
    /// or a file system whose writes may come from elsewhere): commits then compare the files'
    /// times, as before.
    init?(storePath: String) {
        // inotify hears only this kernel's writes: not another machine's to a network file
        // system, nor those to the layers under an overlay or behind a FUSE mount.
        let directoryFD = open(PathText.parent(storePath), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directoryFD >= 0 else { return nil }
        let local = kcfs_stat_is_local(directoryFD) == 1
        close(directoryFD)
        guard local else { return nil }
        let fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0 else { return nil }
        let fileEvents = UInt32(IN_MODIFY | IN_ATTRIB | IN_MOVE_SELF | IN_DELETE_SELF)
        let nameEvents = UInt32(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_MOVE_SELF | IN_DELETE_SELF)
        let directory = inotify_add_watch(fd, PathText.parent(storePath), nameEvents | UInt32(IN_ONLYDIR))
        guard directory >= 0, inotify_add_watch(fd, storePath, fileEvents) >= 0,
              inotify_add_watch(fd, storePath + "-wal", fileEvents) >= 0 else {
            close(fd)
            return nil
        }
        self.fd = fd
        self.directory = directory
        let name = PathText.lastComponent(storePath)
        names = [Array(name.utf8), Array((name + "-wal").utf8)]
    }

    deinit { close(fd) }

    /// Reads every event queued since the last call; true if any was about the store's files,
    /// or if events were lost (the queue overflowed) or cannot be read.
    func drain() -> Bool {
        var changed = false
        return withUnsafeTemporaryAllocation(byteCount: 4096, alignment: 8) { buffer in
            while true {
                let n = read(fd, buffer.baseAddress, buffer.count)
                if n < 0 && errno == EINTR { continue }
                if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return changed }
                guard n > 0 else { return true }
                // struct inotify_event: wd, mask, cookie, len (4 bytes each), then len bytes of name.
                var at = 0
                while at + 16 <= n {
                    let wd = buffer.loadUnaligned(fromByteOffset: at, as: Int32.self)
                    let nameLength = Int(buffer.loadUnaligned(fromByteOffset: at + 12, as: UInt32.self))
                    // Overflow (IN_Q_OVERFLOW) comes with wd -1, a removed watch (IN_IGNORED)
                    // with the file's: both count.
                    if wd != directory || named(UnsafeRawBufferPointer(buffer), from: at + 16, length: min(nameLength, n - at - 16)) {
                        changed = true
                    }
                    at += 16 + nameLength
                }
            }
        }
    }

    /// Whether a directory event's name (NUL-padded to `length`) is the database's or the WAL's.
    private func named(_ raw: UnsafeRawBufferPointer, from start: Int, length: Int) -> Bool {
        // Events about the directory itself (moved, removed) carry no name: they count.
        guard length > 0 else { return true }
        let name = raw[start..<start + length].prefix { $0 != 0 }
        return names.contains { $0.elementsEqual(name) }
    }
}
