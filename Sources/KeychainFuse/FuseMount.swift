import CFuseShim
import Glibc
import KeychainAccess
import KeychainFileSystem
import KeychainStore
import Synchronization

/// A mounted `KeychainTree`: mounts it with libfuse and serves it until unmounted.
// @unchecked Sendable because `session` and `operations` are set by `mount` before `serve` starts
// libfuse's threads and read only after; the rest is constant or behind a Mutex.
package final class FuseMount: @unchecked Sendable {
    package let tree: KeychainTree
    package let mountpoint: String
    /// What the mount table shows as the mount's source: the store's real path, by which
    /// `keychainfs` finds the store (and its daemon) of a mountpoint.
    package let source: String
    /// Root may use the mount too (`allow_root`); every other user still gets EACCES.
    package let allowRoot: Bool
    private let fileSystem: FuseFileSystem
    private var session: OpaquePointer?
    private var operations = FuseOperations.make()
    /// The session while it can take notifications; nil once closed.
    private let live = Mutex<LiveSession?>(nil)
    /// Detached from this mount namespace already (`stopAfterDetach`): `close` unmounts nothing.
    private let detached = Atomic<Bool>(false)

    // @unchecked Sendable because libfuse's notification calls are thread-safe on a live session.
    private struct LiveSession: @unchecked Sendable { let session: OpaquePointer }

    package init(tree: KeychainTree, mountpoint: String, source: String = "keychainfs", allowRoot: Bool = false) {
        self.tree = tree
        self.mountpoint = mountpoint
        self.source = source
        self.allowRoot = allowRoot
        fileSystem = FuseFileSystem(tree: tree)
    }

    /// Mounts; after this returns the kernel routes the mountpoint to us, and `serve()` answers.
    package func mount() throws {
        // No default_permissions: it would have the kernel check a directory's mode before each
        // lookup in it, with a GETATTR after every change there (a create asked one more round
        // trip). Modes here are fixed (0600, 0700) and the kernel lets only the owner in (with
        // allow_root, root too, and libfuse refuses the others' requests), so the check could
        // refuse only the execution of a file, which the kernel checks against the mode anyway
        // (access(2), which it asks of us then, `FuseOperations.access`).
        // libfuse splits options at commas; a backslash escapes the next character. Scalar by
        // scalar: `replacingOccurrences` matches characters, and would miss a `\` or `,` with a
        // combining mark after it (a store path the mount table then misnames).
        var fsname = ""
        for c in source.unicodeScalars {
            if c == "\\" || c == "," { fsname += "\\" }
            fsname.unicodeScalars.append(c)
        }
        // allow_root lets the kernel pass root's requests, and libfuse refuses those of any
        // other user but the owner.
        let options = "fsname=\(fsname),subtype=keychainfs" + (allowRoot ? ",allow_root" : "")
        let args = ["keychainfs", "-o", options]
        var cArgs = args.map { strdup($0) }
        defer { cArgs.forEach { free($0) } }
        let userData = Unmanaged.passUnretained(fileSystem).toOpaque()
        guard let se = cArgs.withUnsafeMutableBufferPointer({ buf in
            kcfs_session_new(Int32(buf.count), buf.baseAddress, &operations, userData)
        }) else { throw KeychainError.mountFailed("libfuse could not start (bad options?)") }
        guard kcfs_session_mount(se, mountpoint) == 0 else {
            fuse_session_destroy(se)
            let hint = allowRoot && getuid() != 0
                ? "allow_root needs 'user_allow_other' in /etc/fuse.conf" : "is /dev/fuse usable and fusermount3 installed?"
            throw KeychainError.mountFailed("cannot mount at \(mountpoint) (\(hint))")
        }
        session = se
        live.withLock { $0 = LiveSession(session: se) }
        // After a lock (and after the keys are forgotten at unmount), no page of a revoked
        // file stays in the kernel's cache.
        tree.setAfterLock { [weak self] in self?.dropCachedPages(all: false) }
        // The loop answers on the thread that read the request; one that may wait passes the
        // reading on first.
        tree.served.setBeforeWaiting { kcfs_loop_pass_lead() }
        let notifier = KernelCacheNotifier(fileSystem: fileSystem) { [weak self] body in
            self?.live.withLock { s in if let s { body(s.session) } }
        }
        tree.served.addObserver(notifier)
        fileSystem.setNotifier(notifier)
    }

    /// Drops the kernel's cached pages of files the lock revoked (or of every file read, with
    /// `all`, before an unmount). Only while the loop serves: the kernel may wait for a read
    /// of those pages to be answered.
    package func dropCachedPages(all: Bool) {
        live.withLock { s in
            guard let s else { return }
            fileSystem.dropPages(all: all) { _ = kcfs_invalidate_inode(s.session, $0) }
        }
    }

    /// Serves requests on the loop's worker threads (`kcfs_session_loop`) until unmounted, or
    /// until a stop signal: then `stopping` runs while the workers still answer (so the kernel's
    /// cached pages can be dropped, as before an unmount), and the session ends.
    package func serve(stopping: @escaping @Sendable () -> Void = {}) -> Int32 {
        guard let session else { return -1 }
        // At the end, an open prompt is ended: its worker would keep the daemon (and, after a
        // stop signal, the mount) until the prompt's timeout.
        let hooks = LoopHooks(stopping: stopping, access: tree.served.access)
        let status = withExtendedLifetime(hooks) {
            kcfs_session_loop(session, { context in
                Unmanaged<LoopHooks>.fromOpaque(context!).takeUnretainedValue().stopping()
            }, { context in
                Unmanaged<LoopHooks>.fromOpaque(context!).takeUnretainedValue().access.endPrompts()
            }, Unmanaged.passUnretained(hooks).toOpaque())
        }
        live.withLock { $0 = nil }
        return status
    }

    /// What the loop's C callbacks reach through their one context pointer.
    private final class LoopHooks: Sendable {
        let stopping: @Sendable () -> Void
        let access: AccessControl
        init(stopping: @escaping @Sendable () -> Void, access: AccessControl) { self.stopping = stopping; self.access = access }
    }

    /// Whether `stopAfterDetach` ended the session (rather than a stop signal or the kernel).
    package var wasDetached: Bool { detached.load(ordering: .sequentiallyConsistent) }

    /// Once the mount is detached here (`fusermount -u`), ends `serve` as a stop signal does
    /// (`stopping` runs while the workers still answer, then the loop returns). The kernel ends
    /// the connection at a detach only when no other mount namespace has a copy of the mount:
    /// any process that made one while it was mounted (`unshare -m`, a container, a service's
    /// private mounts) kept the loop serving, with every key, through that copy. `close` then
    /// closes /dev/fuse, which ends the connection for every copy (ENOTCONN there). False if
    /// this session does not take the stop signals (another was mounted later in this process).
    @discardableResult
    package func stopAfterDetach() -> Bool {
        detached.store(true, ordering: .sequentiallyConsistent)
        // `live` is nil once the loop has ended: nothing is left to stop.
        return live.withLock { s in s.map { kcfs_session_stop($0.session) == 0 } ?? true }
    }

    /// Unmounts (if still mounted, and not detached already) and frees libfuse's state.
    package func close() {
        guard let se = session else { return }
        tree.setAfterLock(nil)
        tree.served.setBeforeWaiting(nil)
        fileSystem.setNotifier(nil)
        live.withLock { $0 = nil }
        session = nil
        // Detached: an unmount by path would detach whatever is mounted there by now.
        if wasDetached { kcfs_session_destroy_detached(se) } else { kcfs_session_unmount_and_destroy(se) }
    }
}
