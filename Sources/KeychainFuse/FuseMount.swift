import CFuseShim
import Glibc
import KeychainFileSystem
import KeychainStore
import Synchronization

/// What the FUSE callbacks reach through libfuse's private data: the tree, and the kernel's
/// nodes whose pages may hold a secret.
///
/// Files are opened with direct I/O, so read(2) never fills the page cache; but a private
/// memory mapping (MAP_PRIVATE) of a file does, and keeps showing those pages after the lock.
/// So every node read through is noted with its handle, and once a lock has revoked the
/// handle, the node's pages are dropped: a mapping then faults, the read fails, and the
/// process gets SIGBUS rather than the secret.
final class MountContext: Sendable {
    let tree: KeychainTree
    /// Node id to the handle it was last read through.
    private let readNodes = Mutex<[UInt64: UInt64]>([:])

    init(tree: KeychainTree) { self.tree = tree }

    func noteRead(node: UInt64, handle: UInt64) {
        guard node != 0 else { return }
        readNodes.withLock { if $0[node] != handle { $0[node] = handle } }
    }

    /// Drops, through `invalidate`, the pages of every node whose handle no longer reads (or
    /// of every node read, with `all`).
    func dropPages(all: Bool = false, _ invalidate: (UInt64) -> Void) {
        let nodes = readNodes.withLock { $0 }
        var dropped: [(UInt64, UInt64)] = []
        for (node, handle) in nodes where all || !tree.isReadable(handle: handle) {
            invalidate(node)
            dropped.append((node, handle))
        }
        readNodes.withLock { for (node, handle) in dropped where $0[node] == handle { $0[node] = nil } }
    }
}

/// A mounted `KeychainTree`: mounts it with libfuse and serves it until unmounted.
// @unchecked Sendable because `fuse` and `operations` are set by `mount` before `serve` starts
// libfuse's threads and read only after; the rest is constant or behind a Mutex.
public final class FuseMount: @unchecked Sendable {
    public let tree: KeychainTree
    public let mountpoint: String
    /// What the mount table shows as the mount's source: the store's real path, by which
    /// `keychainfs` finds the store (and its daemon) of a mountpoint.
    public let source: String
    /// Root may use the mount too (`allow_root`); every other user still gets EACCES.
    public let allowRoot: Bool
    private var fuse: OpaquePointer?
    private var operations = FuseOperations.make()
    private let context: MountContext
    /// The session while it can take notifications; nil once closed.
    private let session = Mutex<Session?>(nil)

    // @unchecked Sendable because libfuse's notification calls are thread-safe on a live session.
    private struct Session: @unchecked Sendable { let fuse: OpaquePointer }

    public init(tree: KeychainTree, mountpoint: String, source: String = "keychainfs", allowRoot: Bool = false) {
        self.tree = tree
        self.mountpoint = mountpoint
        self.source = source
        self.allowRoot = allowRoot
        context = MountContext(tree: tree)
    }

    /// Mounts; after this returns the kernel routes the mountpoint to us, and `serve()` answers.
    public func mount() throws {
        // default_permissions: the kernel enforces our 0600/0700 modes, so other users get EACCES.
        // libfuse splits options at commas; a backslash escapes the next character.
        let fsname = source.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: ",", with: "\\,")
        // allow_root lets the kernel pass root's requests, and libfuse refuses those of any
        // other user but the owner.
        let options = "default_permissions,fsname=\(fsname),subtype=keychainfs" + (allowRoot ? ",allow_root" : "")
        let args = ["keychainfs", "-o", options]
        var cArgs = args.map { strdup($0) }
        defer { cArgs.forEach { free($0) } }
        let userData = Unmanaged.passUnretained(context).toOpaque()
        guard let f = cArgs.withUnsafeMutableBufferPointer({ buf in
            kcfs_fuse_new(Int32(buf.count), buf.baseAddress, &operations, userData)
        }) else { throw KeychainError.mountFailed("libfuse could not start (bad options?)") }
        guard kcfs_fuse_mount(f, mountpoint) == 0 else {
            fuse_destroy(f)
            let hint = allowRoot && getuid() != 0
                ? "allow_root needs 'user_allow_other' in /etc/fuse.conf" : "is /dev/fuse usable and fusermount3 installed?"
            throw KeychainError.mountFailed("cannot mount at \(mountpoint) (\(hint))")
        }
        fuse = f
        session.withLock { $0 = Session(fuse: f) }
        // After a lock (and after the keys are forgotten at unmount), no page of a revoked
        // file stays in the kernel's cache.
        tree.setAfterLock { [weak self] in self?.dropCachedPages(all: false) }
    }

    /// Drops the kernel's cached pages of files the lock revoked (or of every file read, with
    /// `all`, before an unmount). Only while the loop serves: the kernel may wait for a read
    /// of those pages to be answered.
    public func dropCachedPages(all: Bool) {
        session.withLock { s in
            guard let s else { return }
            context.dropPages(all: all) { _ = kcfs_invalidate_inode(s.fuse, $0) }
        }
    }

    /// Serves requests on libfuse's worker threads until the filesystem is unmounted.
    public func serve() -> Int32 {
        guard let fuse else { return -1 }
        let status = kcfs_fuse_loop(fuse)
        session.withLock { $0 = nil }
        return status
    }

    /// Unmounts (if still mounted) and frees libfuse's state.
    public func close() {
        guard let f = fuse else { return }
        tree.setAfterLock(nil)
        session.withLock { $0 = nil }
        fuse = nil
        kcfs_fuse_unmount_and_destroy(f)
    }
}

/// The daemon holds keys: it must not be dumpable and must write no core file.
public enum ProcessHardening {
    @discardableResult
    public static func apply() -> Bool { kcfs_harden_process() == 0 }
}
