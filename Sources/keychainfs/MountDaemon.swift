import Foundation
import KeychainControl
import KeychainControlServer
import KeychainCrypto
import KeychainFileSystem
import KeychainFuse
import KeychainModel
import KeychainStore
import Logging
import Synchronization

/// What a mount is asked to be.
struct MountSettings: Sendable, Codable {
    var storePath: String
    var mountpoint: String
    var startLocked: Bool
    var lockAfter: Int?
    var defaultClass: AccessibilityClass
    var allowRoot = false
    /// Take a store whose rows or commit counter are older than this machine last saw (`--accept-rollback`).
    var acceptRollback = false
}

/// The daemon behind a mount: holds the store's lock, unlocks, mounts, answers the control
/// socket, locks after idleness, and on exit unmounts and forgets every key.
final class MountDaemon: Sendable {
    let settings: MountSettings
    // Made after `DaemonLog.bootstrap`, so that it writes where the daemon logs.
    private var log: Logger { Logger(label: "keychainfs.daemon") }

    /// `foreground`: log to stderr (as under systemd) rather than to the log file.
    init(settings: MountSettings, foreground: Bool) {
        self.settings = settings
        DaemonLog.bootstrap(foreground: foreground)
    }

    /// Runs until unmounted. `ready` is told once the mount serves, or why it could not.
    func run(passphrase: SecureBytes?, ready: (Result<Void, KeychainError>) -> Void) -> Int32 {
        // Before any key is loaded.
        ProcessProtection.makeNotDumpable()
        reportLockedMemory()
        var storeLock: Int32 = -1
        let keychain: Keychain, tree: KeychainTree, mount: FuseMount
        do {
            storeLock = try Self.lockStore(settings.storePath)
            keychain = try Keychain(openingAt: settings.storePath, acceptRollback: settings.acceptRollback)
            // The passphrase is needed only to derive the keys: wiped at once, whatever the outcome.
            defer { passphrase?.wipe() }
            if !settings.startLocked { try keychain.unlock(passphrase: passphrase) }
            tree = try KeychainTree(keychain: keychain, defaultClass: settings.defaultClass, lockAfter: settings.lockAfter)
            mount = FuseMount(tree: tree, mountpoint: settings.mountpoint,
                              source: MountRegistry.canonicalPath(settings.storePath), allowRoot: settings.allowRoot)
            try mount.mount()
        } catch {
            // Released, so that `mount --foreground` can try again with another passphrase.
            if storeLock >= 0 { close(storeLock) }
            let e = error as? KeychainError ?? .mountFailed("\(error)")
            log.error("mount of \(settings.mountpoint) failed: \(e.description)")
            ready(.failure(e))
            return e.exitCode
        }
        defer { close(storeLock) }

        let server: ControlServer
        let record = MountRecord(pid: getpid(), storePath: MountRegistry.canonicalPath(settings.storePath),
                                 mountpoint: MountRegistry.canonicalPath(settings.mountpoint),
                                 socketPath: MountRegistry.socketPath(forStore: settings.storePath))
        do {
            server = try ControlServer(socketPath: record.socketPath, service: service(tree: tree, mount: mount))
            server.start()
            try MountRegistry.register(record)
        } catch {
            mount.close()
            let e = error as? KeychainError ?? .mountFailed("\(error)")
            ready(.failure(e))
            return e.exitCode
        }
        startIdleLock(tree: tree)
        log.info("serving \(settings.storePath) at \(settings.mountpoint), \(keychain.state.rawValue)")
        ready(.success(()))

        let status = mount.serve()
        server.stop()
        MountRegistry.unregister(record)
        tree.forgetEverything()
        mount.close()
        log.info("unmounted \(settings.mountpoint)")
        // libfuse's loop returns the signal that ended it; a stop signal (systemd's, a
        // Ctrl-C in the foreground) is a clean unmount, not a failure.
        return status == 0 || [SIGTERM, SIGINT, SIGHUP].contains(status) ? 0 : 1
    }

    /// Logs when the kernel starts refusing to lock pages of keys and secrets (RLIMIT_MEMLOCK),
    /// and when it stops; at most one line of each a minute, as use may hover at the limit.
    private func reportLockedMemory() {
        let log = self.log
        let lastLogged = Mutex<[Bool: UInt64]>([:])
        LockedMemory.shared.setExhaustionHandler { exhausted, usage in
            let now = Deadline.now.nanoseconds
            let due = lastLogged.withLock { last -> Bool in
                if let t = last[exhausted], now - t < 60_000_000_000 { return false }
                last[exhausted] = now
                return true
            }
            guard due else { return }
            if exhausted {
                let limit = LockedMemory.processLimit.map { "\($0 / 1024) KiB" } ?? "unlimited"
                log.warning("locked memory exhausted (RLIMIT_MEMLOCK \(limit)): \(usage.unlockedBytes / 1024) KiB of keys and secrets may be swapped out; the cache keeps no new secrets meanwhile")
            } else {
                log.notice("locked memory available again: every key and secret is locked in RAM")
            }
        }
    }

    /// One daemon per store: an exclusive flock on the store file, held for the daemon's life.
    static func lockStore(_ path: String) throws -> Int32 { try StoreLock.acquireExclusive(path) }

    /// The control socket's service: the mount's own owner of the store.
    private func service(tree: KeychainTree, mount: FuseMount) -> DaemonKeychainService {
        let mountpoint = settings.mountpoint
        return DaemonKeychainService(tree: tree, settings: settings) {
            // While the loop still serves: a private mapping must not keep pages past the unmount.
            mount.dropCachedPages(all: true)
            try Fusermount.unmount(mountpoint)
        }
    }

    /// Locks after the tree's lock-after setting without file access, checked every half
    /// second; it runs even while the setting is off, since it can be changed at run time.
    private func startIdleLock(tree: KeychainTree) {
        let thread = Thread {
            while true {
                usleep(500_000)
                tree.lockIfIdle()
            }
        }
        thread.name = "keychainfs-idle-lock"
        thread.start()
    }
}
