import CProcessPin
import Glibc
import KeychainErrors
import KeychainModel

/// A process held by a pidfd, so that its pid cannot be handed to another process while we
/// read about it: whatever we read under `/proc/PID` counts only if the pidfd still says the
/// process runs afterwards (`isAlive`).
// @unchecked Sendable: the descriptor is set once and closed only in deinit.
package final class PinnedProcess: @unchecked Sendable {
    /// The process (thread group) id.
    package let pid: pid_t
    /// The thread that asked; FUSE names a thread, a socket peer its process (then `pid`).
    package let threadID: pid_t
    package let pidfd: Int32

    private init(pid: pid_t, threadID: pid_t, pidfd: Int32) {
        self.pid = pid
        self.threadID = threadID
        self.pidfd = pidfd
    }

    deinit { close(pidfd) }

    /// True while the pinned process runs (a zombie counts as gone).
    package var isAlive: Bool { kcfs_pidfd_alive(pidfd) == 1 }

    /// The process a thread belongs to (a FUSE request carries the calling thread's id):
    /// its `Tgid` from `/proc/TID/status`, pinned.
    ///
    /// The pid is read before the pidfd is opened, so if the caller died and its pid went to
    /// another process in between, that process is the one pinned and identified. For FUSE
    /// that is harmless: the caller is blocked in the request, so it was killed, and the
    /// answer goes to no one; the facts cached are those of the process the pidfd pins.
    package static func forThread(_ tid: pid_t) throws(KeychainError) -> PinnedProcess {
        guard tid > 0 else { throw .invalidInput("no such thread \(tid)") }
        // A thread group leader (most callers: cat, head) is pinned by its own id in one
        // system call: pidfd_open refuses any other thread (EINVAL), whose Tgid is read then.
        if let leader = leader(tid) { return leader }
        let status = try ProcFile.read("/proc/\(tid)/status")
        guard let tgid = ProcStatus(status).tgid else { throw .io("/proc/\(tid)/status has no Tgid") }
        return try forThread(tid, tgid: tgid)
    }

    /// The process `tid` leads, pinned; nil when `tid` is not a thread group leader.
    package static func leader(_ tid: pid_t) -> PinnedProcess? {
        let pidfd = kcfs_pidfd_open(tid)
        return pidfd >= 0 ? PinnedProcess(pid: tid, threadID: tid, pidfd: pidfd) : nil
    }

    /// A thread whose process (`tgid`) the caller has read already.
    static func forThread(_ tid: pid_t, tgid: pid_t) throws(KeychainError) -> PinnedProcess {
        let pidfd = kcfs_pidfd_open(tgid)
        guard pidfd >= 0 else { throw .io("cannot pin process \(tgid): \(String(cString: strerror(errno)))") }
        return PinnedProcess(pid: tgid, threadID: tid, pidfd: pidfd)
    }

    /// A process by its pid (a thread group leader).
    package static func forProcess(_ pid: pid_t) throws(KeychainError) -> PinnedProcess {
        try forThread(pid)
    }

    /// The process at the other end of a connected Unix socket. SO_PEERPIDFD (Linux 6.5) pins
    /// the very process that connected; before it, SO_PEERCRED's pid is pinned after the fact,
    /// and a peer that exited while a child kept its socket could lend it its reused pid.
    package static func forSocketPeer(_ socket: Int32) throws(KeychainError) -> PinnedProcess {
        let pidfd = kcfs_peer_pidfd(socket)
        if pidfd >= 0 {
            guard let pid = pidOfPidfd(pidfd), pid > 0 else {
                close(pidfd)
                throw .io("the socket's peer has exited")
            }
            return PinnedProcess(pid: pid, threadID: pid, pidfd: pidfd)
        }
        var cred = PeerCredentials()
        var len = socklen_t(MemoryLayout<PeerCredentials>.size)
        guard getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0, cred.pid > 0 else {
            throw .io("cannot read the socket's peer: \(String(cString: strerror(errno)))")
        }
        return try forProcess(cred.pid)
    }

    /// The pid a pidfd refers to, from `/proc/self/fdinfo` (-1 once the process is gone).
    private static func pidOfPidfd(_ pidfd: Int32) -> pid_t? {
        guard let text = try? ProcFile.read("/proc/self/fdinfo/\(pidfd)") else { return nil }
        for line in text.split(separator: 10) where line.starts(with: Array("Pid:".utf8)) {
            return pid_t(String(decoding: line.dropFirst(4), as: UTF8.self).trimmingSpaces)
        }
        return nil
    }

    /// Linux's `struct ucred`, which Glibc only declares under _GNU_SOURCE.
    private struct PeerCredentials {
        var pid: pid_t = 0
        var uid: uid_t = 0
        var gid: gid_t = 0
    }
}

/// Reading `/proc` files: small, generated on read, never regular files we could stat first.
enum ProcFile {
    /// The whole file, up to `limit` bytes.
    static func read(_ path: String, limit: Int = 1 << 20) throws(KeychainError) -> [UInt8] {
        try read(in: AT_FDCWD, path, limit: limit)
    }

    /// The file at `name` under an open `/proc/PID` directory (or an absolute path).
    static func read(in directory: Int32, _ name: String, limit: Int = 1 << 20) throws(KeychainError) -> [UInt8] {
        let fd = openat(directory, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { throw .io("\(directory == AT_FDCWD ? name : "/proc/PID/" + name): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        return try readAll(fd, path: name, limit: limit)
    }

    /// Reads from offset 0 again: `/proc` regenerates the text on each read from the start, so
    /// a descriptor kept open rereads a process's state in one system call.
    static func reread(_ fd: Int32, into buffer: inout [UInt8]) -> Int {
        buffer.withUnsafeMutableBytes { b in
            var n: Int
            repeat { n = pread(fd, b.baseAddress, b.count, 0) } while n < 0 && errno == EINTR
            return n
        }
    }

    /// The whole file from offset 0 (the descriptor's offset untouched), or nil when it cannot
    /// be read or is larger than `limit`.
    static func preadAll(_ fd: Int32, limit: Int) -> [UInt8]? {
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while out.count <= limit {
            let n = chunk.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(out.count)) }
            if n < 0 {
                if errno == EINTR { continue }
                return nil
            }
            if n == 0 { return out }
            out += chunk[..<n]
        }
        return nil
    }

    static func readAll(_ fd: Int32, path: String, limit: Int) throws(KeychainError) -> [UInt8] {
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while out.count < limit {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, min($0.count, limit - out.count)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw .io("\(path): \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            out += chunk[..<n]
        }
        return out
    }

    /// A symbolic link's target as bytes, relative to our root.
    static func readLink(_ path: String) throws(KeychainError) -> String {
        try readLink(at: AT_FDCWD, path)
    }

    static func readLink(at directory: Int32, _ name: String) throws(KeychainError) -> String {
        switch readLinkResult(at: directory, name) {
        case .success(let target): return target
        case .failure(let e): throw .io("\(name): \(String(cString: strerror(e.code)))")
        }
    }

    /// The target, or the errno.
    static func readLinkResult(at directory: Int32, _ name: String) -> Result<String, Errno> {
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = buffer.withUnsafeMutableBytes { readlinkat(directory, name, $0.baseAddress!.assumingMemoryBound(to: CChar.self), $0.count) }
        guard n >= 0 else { return .failure(Errno(errno)) }
        return .success(String(decoding: buffer[..<n], as: UTF8.self))
    }

    /// `/proc/PID/NAME`'s link target, or the errno. Read into a small buffer on the stack
    /// first (an executable's path is short; a PATH_MAX one is a heap allocation, on the path
    /// of every new caller of a guarded item), then into a PATH_MAX one if it filled.
    static func readLinkResult(of pid: pid_t, _ name: String) -> Result<String, Errno> {
        func read(_ capacity: Int) -> Result<String, Errno>? {
            withUnsafeTemporaryAllocation(of: CChar.self, capacity: capacity) { buffer in
                let n = kcfs_proc_readlink(pid, name, buffer.baseAddress!, buffer.count)
                guard n >= 0 else { return .failure(Errno(errno)) }
                // A target that fills the buffer may have been cut.
                guard n < buffer.count else { return nil }
                return .success(String(decoding: UnsafeRawBufferPointer(start: buffer.baseAddress!, count: n), as: UTF8.self))
            }
        }
        return read(256) ?? read(Int(PATH_MAX) + 1) ?? .failure(Errno(ENAMETOOLONG))
    }

    /// The loader variables and `TERM` of a process's environment (`CallerFacts.scanEnvironment`)
    /// through its open `/proc/PID/environ`, read whole from its start or not at all, and how
    /// many bytes it holds. Most environments fit one read into the stack, with nothing
    /// allocated; a larger one is read again whole.
    static func scanEnvironment(_ fd: Int32, pid: pid_t, limit: Int) throws(KeychainError) -> (loader: [String], term: String?, size: Int) {
        var scan = kcfs_environment()
        var termLength = -1
        let (size, term) = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 256) { b -> (Int, String?) in
            let n = kcfs_read_environment(fd, &scan, b.baseAddress!, b.count, &termLength)
            return (n, termLength >= 0 ? String(decoding: UnsafeBufferPointer(rebasing: b[..<termLength]), as: UTF8.self) : nil)
        }
        // Unreadable is not empty: fail closed.
        if size == -1 { throw .io("/proc/\(pid)/environ: \(String(cString: strerror(errno)))") }
        if size >= 0 && termLength != -2 { return (CallerFacts.loaderNames(scan.loader), term, size) }
        // Larger than the stack buffer (or a TERM too long to copy there): read whole. A read
        // stops short only at the end (or where the process's memory cannot be read, as the
        // next read would too).
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while bytes.count <= limit {
            let n = chunk.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(bytes.count)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw .io("/proc/\(pid)/environ: \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            bytes += chunk[..<n]
        }
        guard bytes.count <= limit else { throw .io("process \(pid) has an environment too large to check") }
        let (loader, fullTerm) = CallerFacts.scanEnvironment(bytes)
        return (loader, fullTerm, bytes.count)
    }

    struct Errno: Error, Equatable {
        var code: Int32
        init(_ code: Int32) { self.code = code }
    }
}

/// The lines of `/proc/PID/status` we use. Parsed on bytes in C (`kcfs_parse_status`), and
/// only as far as needed: it is read on every guarded request, and `TracerPid` is its eighth
/// line of fifty-odd.
struct ProcStatus {
    var tgid: pid_t?
    var parentPID: pid_t?
    var tracerPID: pid_t?

    init(_ text: [UInt8]) {
        self.init(text, count: text.count)
    }

    /// The first `count` bytes of `buffer`.
    init(_ buffer: [UInt8], count: Int) {
        self = buffer.withUnsafeBufferPointer { ProcStatus(UnsafeBufferPointer(rebasing: $0[..<min(count, $0.count)])) }
    }

    init(_ text: UnsafeBufferPointer<UInt8>) {
        var ids = kcfs_status_ids()
        kcfs_parse_status(text.baseAddress, text.count, &ids)
        self.init(ids)
    }

    init(_ ids: kcfs_status_ids) {
        tgid = ids.tgid >= 0 ? ids.tgid : nil
        parentPID = ids.ppid >= 0 ? ids.ppid : nil
        tracerPID = ids.tracer >= 0 ? ids.tracer : nil
    }

    /// Reread through an open descriptor (offset 0) with nothing allocated; nil when it reads
    /// nothing (the process is gone).
    static func reread(_ fd: Int32) -> ProcStatus? {
        var ids = kcfs_status_ids()
        return kcfs_read_status_ids(fd, &ids) == 0 ? ProcStatus(ids) : nil
    }
}

enum ProcNumber {
    /// The first decimal number in text[start..<end], skipping blanks before it.
    static func parse(_ text: UnsafeBufferPointer<UInt8>, _ start: Int, _ end: Int) -> UInt64? {
        var i = start
        while i < end && (text[i] == 32 || text[i] == 9) { i += 1 }
        guard i < end, text[i] >= 48, text[i] <= 57 else { return nil }
        var v: UInt64 = 0
        while i < end, text[i] >= 48, text[i] <= 57 {
            v = v &* 10 &+ UInt64(text[i] &- 48)
            i += 1
        }
        return v
    }
}

/// The fields of `/proc/PID/stat` we use. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from the last `)`.
struct ProcStat: Equatable {
    var terminal: UInt64 = 0
    var startTime: UInt64 = 0
    /// Addresses the kernel sets afresh at each execve (code, stack, brk, argv and environ
    /// bounds): when they change, the process runs another image and is identified again.
    /// Field numbers as in proc(5): startcode endcode startstack 26–28; start_data end_data
    /// start_brk arg_start arg_end env_start env_end 45–51.
    var imageLayout: [UInt64] = []

    init?(_ text: [UInt8]) {
        self.init(text, count: text.count)
    }

    init?(_ buffer: [UInt8], count: Int) {
        guard let parsed = buffer.withUnsafeBufferPointer({ ProcStat(UnsafeBufferPointer(rebasing: $0[..<min(count, $0.count)])) }) else { return nil }
        self = parsed
    }

    init?(_ text: UnsafeBufferPointer<UInt8>) {
        var close = text.count - 1
        while close >= 0 && text[close] != 41 { close -= 1 }
        guard close >= 0 else { return nil }
        imageLayout.reserveCapacity(10)
        // tty_nr is field 7, starttime 22.
        var field = 2, i = close + 1
        var seenTerminal = false, seenStart = false
        let n = text.count
        while i < n && field < 51 {
            if text[i] == 32 || text[i] == 10 { i += 1; continue }
            field += 1
            var end = i
            while end < n && text[end] != 32 && text[end] != 10 { end += 1 }
            switch field {
            case 7: terminal = ProcNumber.parse(text, i, end) ?? 0; seenTerminal = true
            case 22: startTime = ProcNumber.parse(text, i, end) ?? 0; seenStart = true
            case 26...28, 45...51: imageLayout.append(ProcNumber.parse(text, i, end) ?? 0)
            default: break
            }
            i = end
        }
        guard seenTerminal, seenStart else { return nil }
    }

    /// False while an execve is laying out the new image: its argv and environ bounds are
    /// still zero, and what /proc shows of them is not yet the new program's.
    var isSettled: Bool { imageLayout.count == 10 && imageLayout[6...9].allSatisfy { $0 != 0 } }
}

extension String {
    var trimmingSpaces: String {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\t" || f == "\n" { s.removeFirst() }
        while let l = s.last, l == " " || l == "\t" || l == "\n" { s.removeLast() }
        return String(s)
    }
}

/// Who wrote a request on a control-socket connection. The connection's peer (SO_PEERCRED,
/// SO_PEERPIDFD) is the process that connected, which need not be the one that writes: it may
/// hand the connection to another process (a child that inherits it, or SCM_RIGHTS) and exec a
/// listed program, which is then identified as the peer while the other asks. So every read of
/// a request also takes the pid of its writer (SCM_CREDENTIALS), which must be the connector's.
package enum SocketSender {
    /// Asks the kernel to tell the writer of what each read returns.
    package static func passCredentials(_ socket: Int32) -> Bool {
        var on: Int32 = 1
        return setsockopt(socket, SOL_SOCKET, SO_PASSCRED, &on, socklen_t(MemoryLayout<Int32>.size)) == 0
    }

    /// The pid of the process that connected (SO_PEERCRED), in our pid namespace.
    package static func connector(_ socket: Int32) -> pid_t? {
        var cred = Credentials()
        var len = socklen_t(MemoryLayout<Credentials>.size)
        guard getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0, cred.pid > 0 else { return nil }
        return cred.pid
    }

    /// Whether bytes wait to be read: a client writes its request only once it has the
    /// daemon's `identified` frame, so bytes waiting when it has been identified were written
    /// before, perhaps by another program the process ran until an exec.
    package static func hasWaitingBytes(_ socket: Int32) -> Bool {
        var byte: UInt8 = 0
        return recv(socket, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) > 0
    }

    /// recv(2) into `buffer`, and the pid of the process that wrote those bytes (0: unknown).
    package static func receive(_ socket: Int32, into buffer: UnsafeMutableRawBufferPointer) -> (count: Int, sender: pid_t) {
        var sender: pid_t = 0
        let n = kcfs_recv_sender(socket, buffer.baseAddress, buffer.count, &sender)
        return (n, sender)
    }

    /// Linux's `struct ucred`.
    private struct Credentials {
        var pid: pid_t = 0
        var uid: uid_t = 0
        var gid: gid_t = 0
    }
}
