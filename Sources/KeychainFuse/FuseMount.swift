import CFuseShim
import Glibc
import KeychainFileSystem
import KeychainStore

/// A mounted `KeychainTree`: mounts it with libfuse and serves it until unmounted.
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

    public init(tree: KeychainTree, mountpoint: String, source: String = "keychainfs", allowRoot: Bool = false) {
        self.tree = tree
        self.mountpoint = mountpoint
        self.source = source
        self.allowRoot = allowRoot
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
        let userData = Unmanaged.passUnretained(tree).toOpaque()
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
    }

    /// Serves requests on libfuse's worker threads until the filesystem is unmounted.
    public func serve() -> Int32 {
        guard let fuse else { return -1 }
        return kcfs_fuse_loop(fuse)
    }

    /// Unmounts (if still mounted) and frees libfuse's state.
    public func close() {
        guard let f = fuse else { return }
        fuse = nil
        kcfs_fuse_unmount_and_destroy(f)
    }
}

/// The daemon holds keys: it must not be dumpable and must write no core file.
public enum ProcessHardening {
    @discardableResult
    public static func apply() -> Bool { kcfs_harden_process() == 0 }
}
