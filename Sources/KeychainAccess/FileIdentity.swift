import COpenSSL
import CProcessPin
import Foundation
import Glibc
import KeychainErrors
import KeychainModel
import Synchronization

extension FileIdentity {
    /// The identity of the file at an absolute path now (symbolic links followed, as exec
    /// follows them): what `-T PATH` and the access xattr pin. Bounded as a caller's
    /// executable is (`DigestJobs`): at most 1 GiB, read on a thread of its own and waited for
    /// at most 3 s, since the path may be a huge file or on a file system that does not answer,
    /// and in the daemon the thread asking serves other requests too.
    package static func of(path: String) throws(KeychainError) -> FileIdentity {
        guard PathText.isAbsolute(path) else { throw .invalidInput("'\(path)' is not an absolute path") }
        return try PinningJobs.shared.run(shownAs: path) { () throws(KeychainError) in
            try of(openedAt: AT_FDCWD, path, shownAs: path, sizeLimit: DigestJobs.sizeLimit)
        }
    }

    /// Opens `name` under `directory` without blocking (a FIFO named on a command line must not
    /// hang the daemon) and takes its identity if it is a regular file of at most `sizeLimit`.
    static func of(openedAt directory: Int32, _ name: String, shownAs shown: String,
                   sizeLimit: UInt64 = .max) throws(KeychainError) -> FileIdentity {
        let fd = openat(directory, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
        guard fd >= 0 else { throw .invalidInput("cannot open \(shown): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        return try of(descriptor: fd, shownAs: shown, sizeLimit: sizeLimit)
    }

    static func of(descriptor fd: Int32, shownAs shown: String, sizeLimit: UInt64 = .max) throws(KeychainError) -> FileIdentity {
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw .io("cannot stat \(shown): \(String(cString: strerror(errno)))") }
        guard st.st_mode & S_IFMT == S_IFREG else { throw .invalidInput("\(shown) is not a regular file") }
        guard UInt64(st.st_size) <= sizeLimit else { throw .invalidInput("\(shown) is over \(sizeLimit) bytes") }
        let key = FileStatKey(st)
        if let digest = DigestCache.shared.digest(for: key) { return key.identity(sha256: digest) }
        let digest = try sha256(of: fd, shownAs: shown)
        // A file changed while it was hashed would pair its new stat with a digest of a mix.
        var after = stat()
        guard fstat(fd, &after) == 0, FileStatKey(after) == key else {
            throw .io("\(shown) changed while it was read")
        }
        DigestCache.shared.store(digest, for: key)
        return key.identity(sha256: digest)
    }

    /// The identity of a file already hashed, by its stat now; nil when it was not (or changed).
    static func cached(_ st: stat) -> FileIdentity? {
        guard st.st_mode & S_IFMT == S_IFREG else { return nil }
        let key = FileStatKey(st)
        return DigestCache.shared.digest(for: key).map { key.identity(sha256: $0) }
    }

    private static func sha256(of fd: Int32, shownAs shown: String) throws(KeychainError) -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw .io("OpenSSL: no digest context") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestInit_ex(context, EVP_sha256(), nil) == 1 else { throw .io("OpenSSL: SHA-256 init") }
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        var offset: off_t = 0
        while true {
            let n = chunk.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, offset) }
            if n < 0 {
                if errno == EINTR { continue }
                throw .io("cannot read \(shown): \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            _ = chunk.withUnsafeBytes { EVP_DigestUpdate(context, $0.baseAddress, n) }
            offset += off_t(n)
        }
        var out = [UInt8](repeating: 0, count: 32)
        var len: UInt32 = 32
        guard EVP_DigestFinal_ex(context, &out, &len) == 1, len == 32 else { throw .io("OpenSSL: SHA-256 final") }
        return out
    }
}

/// What says a file is unchanged without reading it: its identity's stat fields plus the
/// change time, which no one but the kernel sets (`touch -d` can put mtime back, not ctime).
struct FileStatKey: Hashable {
    var device: UInt64
    var inode: UInt64
    var size: UInt64
    var modifiedSeconds: Int64
    var modifiedNanoseconds: UInt32
    var changedSeconds: Int64
    var changedNanoseconds: UInt32

    init(_ st: stat) {
        device = UInt64(st.st_dev)
        inode = UInt64(st.st_ino)
        size = UInt64(st.st_size)
        modifiedSeconds = Int64(st.st_mtim.tv_sec)
        modifiedNanoseconds = UInt32(st.st_mtim.tv_nsec)
        changedSeconds = Int64(st.st_ctim.tv_sec)
        changedNanoseconds = UInt32(st.st_ctim.tv_nsec)
    }

    func identity(sha256: [UInt8]) -> FileIdentity {
        FileIdentity(device: device, inode: inode, size: size, modifiedSeconds: modifiedSeconds,
                     modifiedNanoseconds: modifiedNanoseconds, sha256: sha256)
    }
}

/// A process's executable file, held open from when the process was identified so that it
/// can be hashed later (the process may have made itself non-dumpable by then, which hides
/// `/proc/PID/exe`). The digest is taken once, and only if the file still has the stat key
/// it had then: a file changed since fails, and a caller that needs its identity is refused.
/// A file already hashed under the same stat key (`DigestCache`) needs no descriptor: its
/// identity is known when the process is identified.
final class ExecutableImage: Sendable {
    let key: FileStatKey
    /// -1 when the identity was known at once.
    private let fd: Int32
    /// The image's file held open, or -1 (its identity was known at once).
    var descriptor: Int32 { fd }
    private let shown: String
    private let identified: Mutex<FileIdentity?>
    /// When the last try to hash the file failed or gave up (CLOCK_MONOTONIC ns; 0: never).
    private let gaveUpAt = Atomic<UInt64>(0)

    /// The image of process `pid`, whose `/proc/PID/exe` stat'ed as `st` (the link followed).
    /// Opened only when its digest is not known under that stat.
    static func of(pid: pid_t, stat st: stat, shownAs shown: String) throws(KeychainError) -> ExecutableImage {
        if let known = FileIdentity.cached(st) { return ExecutableImage(key: FileStatKey(st), identity: known, shownAs: shown) }
        let fd = kcfs_proc_open(pid, "exe", O_RDONLY)
        guard fd >= 0 else { throw .io("/proc/\(pid)/exe: \(String(cString: strerror(errno)))") }
        return try ExecutableImage(descriptor: fd, shownAs: shown)
    }

    private init(key: FileStatKey, identity: FileIdentity, shownAs shown: String) {
        self.key = key
        self.fd = -1
        self.shown = shown
        self.identified = Mutex(identity)
    }

    /// Takes ownership of `fd`.
    init(descriptor fd: Int32, shownAs shown: String) throws(KeychainError) {
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            let why = String(cString: strerror(errno))
            close(fd)
            throw .io("cannot stat \(shown): \(why)")
        }
        guard st.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            throw .invalidInput("\(shown) is not a regular file")
        }
        self.fd = fd
        self.key = FileStatKey(st)
        self.shown = shown
        self.identified = Mutex(nil)
    }

    deinit { if fd >= 0 { close(fd) } }

    /// The identity if it is known already (hashed, or found in the digest cache when the
    /// process was identified); nil when `identity()` would have to hash the file.
    var knownIdentity: FileIdentity? { identified.withLock { $0 } }

    func identity() throws(KeychainError) -> FileIdentity {
        if let known = identified.withLock({ $0 }) { return known }
        // Bounded: a caller's executable may be huge (a sparse copy) or on a file system that
        // never answers, and the thread asking serves other requests too.
        // One decision asks more than once (the rules, then the log's reason): a caller that
        // waited out the bound is not made to wait again for a while.
        let now = kcfs_monotonic_ns()
        let waited = gaveUpAt.load(ordering: .relaxed)
        let mayWait = waited == 0 || now &- waited > DigestJobs.waitNanoseconds
        let identity: FileIdentity
        do {
            identity = try DigestJobs.shared.identity(of: fd, key: key, shownAs: shown, waiting: mayWait)
        } catch {
            gaveUpAt.store(kcfs_monotonic_ns(), ordering: .relaxed)
            throw error
        }
        // The kernel moves ctime forward at every change: the same key after the hash means
        // the bytes hashed are those the process was identified with.
        var after = stat()
        guard fstat(fd, &after) == 0, FileStatKey(after) == key else {
            throw .io("\(shown) changed since the process was identified")
        }
        identified.withLock { $0 = identity }
        return identity
    }
}

/// Digests of executables already hashed, so that the hundredth `head` costs a stat, not a
/// read of the binary. Keyed by the full stat key: any write changes ctime and misses.
final class DigestCache: Sendable {
    static let shared = DigestCache()
    private static let capacity = 512
    private let digests = Mutex<[FileStatKey: [UInt8]]>([:])

    func digest(for key: FileStatKey) -> [UInt8]? { digests.withLock { $0[key] } }

    func store(_ digest: [UInt8], for key: FileStatKey) {
        digests.withLock { d in
            // Executables in use are few; a full cache is more likely churn than a working set.
            if d.count >= Self.capacity { d.removeAll(keepingCapacity: true) }
            d[key] = digest
        }
    }

    func removeAll() { digests.withLock { $0.removeAll() } }
}

/// Hashes of callers' executables not in `DigestCache` yet, each on a thread of its own, so
/// that one caller's executable cannot hold the threads that serve everyone (the mount's 10
/// workers, the control socket's 6). A caller waits for its executable's hash at most `wait`,
/// and is refused past it (the hash goes on and is cached: a later request of the same file
/// passes); one whose executable is over `sizeLimit` is refused without a read. At most
/// `maxRunning` files are hashed at once, and callers wait for them within `CallerWaits`;
/// past either, a caller that needs a new hash is refused at once. A file that never answers a read keeps
/// its hashing thread for good: at most `maxRunning` such threads.
final class DigestJobs: @unchecked Sendable {
    static let shared = DigestJobs()
    static let maxRunning = 4
    static let wait: Double = 3
    static let waitNanoseconds = UInt64(wait * 1e9)
    /// Executables are tens of MiB; a binary of gigabytes takes seconds to hash (and a sparse
    /// file of terabytes, hours).
    static let sizeLimit: UInt64 = 1 << 30

    // @unchecked Sendable: `result` is read and written under `condition` only.
    private final class Job: @unchecked Sendable {
        var result: Result<FileIdentity, KeychainError>?
    }

    // Guards `jobs`; a leaf: no other lock is taken under it, nothing read under it.
    private let condition = NSCondition()
    private var jobs: [FileStatKey: Job] = [:]

    /// The identity of the file open as `fd`, whose stat key is `key`. `waiting` false: only
    /// a hash done already counts (one is started if none runs).
    func identity(of fd: Int32, key: FileStatKey, shownAs shown: String, waiting: Bool = true) throws(KeychainError) -> FileIdentity {
        if let digest = DigestCache.shared.digest(for: key) { return key.identity(sha256: digest) }
        guard key.size <= Self.sizeLimit else {
            throw .io("its executable \(shown) is over \(Self.sizeLimit >> 20) MiB, too large to hash")
        }
        condition.lock()
        let job: Job
        if let running = jobs[key] {
            job = running
        } else {
            guard jobs.count < Self.maxRunning else {
                condition.unlock()
                throw .io("\(Self.maxRunning) other executables are being hashed already (on a slow file system?)")
            }
            let copy = fcntl(fd, F_DUPFD_CLOEXEC, 0)
            guard copy >= 0 else {
                let why = String(cString: strerror(errno))
                condition.unlock()
                throw .io("cannot hash \(shown): \(why)")
            }
            job = Job()
            jobs[key] = job
            Thread.detachNewThread { [self] in hash(copy, key: key, shownAs: shown, into: job) }
        }
        let result: Result<FileIdentity, KeychainError>?
        if let done = job.result {
            result = done
            condition.unlock()
        } else if !waiting {
            condition.unlock()
            throw .io(Self.notInTime(shown))
        } else {
            guard let held = CallerWaits.shared.enter() else {
                condition.unlock()
                throw .io(CallerWaits.busyReason)
            }
            let deadline = Date(timeIntervalSinceNow: Self.wait)
            while job.result == nil, condition.wait(until: deadline) {}
            result = job.result
            condition.unlock()
            held.end()
        }
        guard let result else {
            throw .io(Self.notInTime(shown))
        }
        return try result.get()
    }

    private static func notInTime(_ shown: String) -> String {
        "its executable \(shown) could not be hashed within \(Int(wait)) s (a huge file, or a slow file system); it is still being hashed"
    }

    private func hash(_ fd: Int32, key: FileStatKey, shownAs shown: String, into job: Job) {
        defer { close(fd) }
        var result = Result { () throws(KeychainError) in try FileIdentity.of(descriptor: fd, shownAs: shown) }
        // What was hashed must be the file the callers stat'ed (`of` stores it under its own key).
        if case .success(let identity) = result, identity != key.identity(sha256: identity.sha256) {
            result = .failure(.io("\(shown) changed while it was hashed"))
        }
        condition.lock()
        job.result = result
        jobs[key] = nil
        condition.broadcast()
        condition.unlock()
    }
}

/// The files `FileIdentity.of(path:)` pins, each opened and hashed on a thread of its own, at
/// most `DigestJobs.maxRunning` at once; the asking thread waits at most `DigestJobs.wait`,
/// within `CallerWaits`. A file that never answers keeps its thread (and its place) until it
/// does.
final class PinningJobs: Sendable {
    static let shared = PinningJobs()
    private let running = HolderLimit(max: DigestJobs.maxRunning)

    private enum Waited {
        case noPlace
        case timedOut
        case done(Result<FileIdentity, KeychainError>)
    }

    func run(shownAs shown: String, _ body: @escaping @Sendable () throws(KeychainError) -> FileIdentity) throws(KeychainError) -> FileIdentity {
        let waited = CallerWaits.shared.holding { () -> Waited in
            guard let place = running.enter() else { return .noPlace }
            let outcome = OneShot<Result<FileIdentity, KeychainError>>()
            Thread.detachNewThread {
                outcome.deliver(Result { () throws(KeychainError) in try body() })
                place.end()
            }
            return outcome.wait(seconds: DigestJobs.wait).map(Waited.done) ?? .timedOut
        }
        switch waited {
        case nil: throw .io(CallerWaits.busyReason)
        case .noPlace?: throw .io("\(DigestJobs.maxRunning) other programs' files are being read already (on a slow file system?)")
        case .timedOut?: throw .io("\(shown) could not be read within \(Int(DigestJobs.wait)) s (a huge file, or a slow file system)")
        case .done(let result)?: return try result.get()
        }
    }
}
