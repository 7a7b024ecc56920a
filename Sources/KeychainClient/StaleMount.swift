// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif
import KeychainControlProtocol
import KeychainModel

/// One mount in the kernel's table.
package struct MountEntry: Equatable, Sendable {
    package var mountpoint: String
    package var fstype: String
    /// For keychainfs mounts, the real path of the store (the FUSE `fsname`).
    package var source: String
    /// Who mounted it, for FUSE mounts (their `user_id` option).
    package var ownerUID: uid_t? = nil
    /// The kernel's id of the mount, unique while it is mounted: the mountpoint's path may
    /// change under it (a directory above renamed).
    package var id: UInt64 = 0
}

/// The kernel's table of mounts, from /proc/self/mountinfo. It is the truth about what is
/// mounted: unlike stat(), it does not answer from the attribute cache of a dead mount.
package enum MountTable {
    package static let keychainfsType = "fuse.keychainfs"

    package static func entries() -> [MountEntry] {
        // Bytes, not text: the kernel escapes only space, tab, newline and backslash, so another
        // user's mountpoint or source may be any bytes, which must not make the table unreadable
        // (strict UTF-8 decoding of the whole file would), nor, beginning with a combining mark,
        // be joined to the space before it (as splitting a Swift string would).
        let fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return [] }
        defer { close(fd) }
        return entries(Descriptor.readToEnd(fd, chunk: 16 << 10))
    }

    /// The entries of a whole `mountinfo` text.
    package static func entries(_ text: [UInt8]) -> [MountEntry] {
        text.split(separator: UInt8(ascii: "\n")).compactMap { line in
            // "36 35 98:0 /root /mnt opts [optional fields...] - fstype source superopts"
            let fields = line.split(separator: UInt8(ascii: " "), omittingEmptySubsequences: false)
            guard fields.count > 4, let dash = fields.firstIndex(where: { $0.elementsEqual([UInt8(ascii: "-")]) }),
                  dash + 2 < fields.count else { return nil }
            let options = dash + 3 < fields.count ? fields[dash + 3].split(separator: UInt8(ascii: ",")) : []
            let prefix = Array("user_id=".utf8)
            let owner = options.first { $0.starts(with: prefix) }.flatMap { uid_t(String(decoding: $0.dropFirst(prefix.count), as: UTF8.self)) }
            return MountEntry(mountpoint: unescape(fields[4]), fstype: String(decoding: fields[dash + 1], as: UTF8.self),
                              source: unescape(fields[dash + 2]), ownerUID: owner,
                              id: UInt64(String(decoding: fields[0], as: UTF8.self)) ?? 0)
        }
    }

    /// The kernel writes space, tab, newline and backslash as octal escapes (`\040`).
    static func unescape(_ field: ArraySlice<UInt8>) -> String {
        let b = Array(field)
        func octal(_ c: UInt8) -> UInt8? { c >= 0x30 && c <= 0x37 ? c - 0x30 : nil }
        var out: [UInt8] = []
        var i = 0
        while i < b.count {
            if b[i] == UInt8(ascii: "\\"), i + 3 < b.count,
               let d1 = octal(b[i + 1]), let d2 = octal(b[i + 2]), let d3 = octal(b[i + 3]) {
                out.append(d1 << 6 | d2 << 3 | d3)
                i += 4
            } else {
                out.append(b[i])
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    package static func isMountpoint(_ path: String) -> Bool { entries().contains { $0.mountpoint.isSame(as: path) } }

    /// The keychainfs mounts that are this user's: the only entries of the table that anything
    /// here believes or acts on. Any user can mount a FUSE file system that names our store as
    /// its source (`-o fsname=STORE,subtype=keychainfs`); the kernel's `user_id` option, which
    /// no one can set for another, says who mounted it.
    package static func ourKeychainfsMounts() -> [MountEntry] {
        let uid = getuid()
        return entries().filter { $0.fstype.isSame(as: keychainfsType) && $0.ownerUID == uid }
    }

    /// Our keychainfs mount at `mountpoint` (a real path), if any.
    package static func keychainfsMount(at mountpoint: String) -> MountEntry? {
        ourKeychainfsMounts().last { $0.mountpoint.isSame(as: mountpoint) }
    }

    /// Our keychainfs mounts of a store (its real path).
    package static func keychainfsMounts(ofStore store: String) -> [MountEntry] {
        ourKeychainfsMounts().filter { $0.source.isSame(as: store) }
    }
}

/// A FUSE mount whose daemon died: every access fails with ENOTCONN ("Transport endpoint is
/// not connected") until it is detached. Whether a mount is stale is decided from the mount
/// table, the store's flock and the record's owner, never from stat(), which may answer from
/// the kernel's cache for a while after the daemon died.
package enum StaleMount {
    package enum Owner: Equatable {
        /// The daemon holding the store serves this mountpoint and answers.
        case live(MountRecord)
        /// No daemon serves this mountpoint: the mount is stale.
        case gone(pid: Int32?)
        /// A process holds the store but does not answer, even after waiting.
        case unresponsive(pid: Int32?)
    }

    /// Whose the keychainfs mount `entry` is. A daemon that is still dying (just killed) or
    /// still starting is waited for, up to `waiting` seconds.
    package static func owner(of entry: MountEntry, waiting: Double = DaemonLocator.startupGrace) -> Owner {
        let store = entry.source
        var st = stat()
        guard stat(store, &st) == 0, st.st_mode & S_IFMT == S_IFREG else {
            // Not a store path: a mount made by an older keychainfs. Only stat can tell.
            return stat(entry.mountpoint, &st) != 0 && errno == ENOTCONN ? .gone(pid: nil) : .unresponsive(pid: nil)
        }
        let deadline = Deadline.after(seconds: waiting)
        while true {
            let record = MountRegistry.record(forStore: store)
            guard StoreLock.isHeld(store) else { return .gone(pid: record?.pid) }
            if let record, ProcessState.isRunning(record.pid) {
                guard record.mountpoint.isSame(as: entry.mountpoint) else { return .gone(pid: nil) }
                if let fd = try? RemoteKeychainService.connect(record.socketPath, deadline: .after(seconds: 1)) {
                    close(fd)
                    return .live(record)
                }
            }
            if deadline.hasPassed { return .unresponsive(pid: record?.pid) }
            usleep(50_000)
        }
    }

    /// Detaches a mount lazily, so that a process still sitting in the directory does not block it.
    package static func detach(_ mountpoint: String) throws {
        try Fusermount.unmount(mountpoint, lazy: true)
    }

    /// Detaches every stale mount of the store; returns their mountpoints.
    @discardableResult
    package static func detachAll(ofStore store: String) throws -> [String] {
        var detached: [String] = []
        for entry in MountTable.keychainfsMounts(ofStore: MountRegistry.canonicalPath(store)) {
            if case .gone = owner(of: entry, waiting: 0) {
                try detach(entry.mountpoint)
                detached.append(entry.mountpoint)
            }
        }
        return detached
    }
}

/// `fusermount3 -u`, which unmounts a FUSE mount for the user who made it (root or not).
package enum Fusermount {
    static let path = "/bin/fusermount3"

    package static func unmount(_ mountpoint: String, lazy: Bool = false) throws {
        var err: [Int32] = [0, 0]
        guard pipe(&err) == 0 else {
            throw KeychainError.io("cannot run fusermount3: pipe: \(String(cString: strerror(errno)))")
        }
        // Only the dup2'ed copy reaches fusermount3 (threads may spawn meanwhile).
        for fd in err { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        let pid: pid_t
        do {
            defer { close(err[1]) }
            pid = try ChildProcess.spawn([path, "-u"] + (lazy ? ["-z"] : []) + [mountpoint], descriptors: [(err[1], 2)])
        } catch {
            close(err[0])
            throw KeychainError.io("cannot run fusermount3: \(error.reason)")
        }
        var message: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 512)
        while true {
            let n = read(err[0], &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            message += buffer[0..<n]
        }
        close(err[0])
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        // WIFEXITED and WEXITSTATUS, which Swift does not import.
        guard status & 0x7f == 0 && (status >> 8) & 0xff == 0 else {
            let why = String(decoding: message, as: UTF8.self).split(whereSeparator: \.isWhitespace).joined(separator: " ")
            if why.isEmpty || why.lowercased().firstRange(of: "busy") != nil {
                throw KeychainError.mountpointBusy(
                    "cannot unmount \(mountpoint): it is busy (a process has a file open or its working directory there); "
                    + "'fuser -vm \(mountpoint)' lists them")
            }
            throw KeychainError.storeBusy("cannot unmount \(mountpoint): \(why)")
        }
    }
}
