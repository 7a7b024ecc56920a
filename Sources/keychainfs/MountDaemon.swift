import Foundation
import KeychainControl
import KeychainCrypto
import KeychainFileSystem
import KeychainFuse
import KeychainModel
import KeychainStore
import Logging
import Synchronization

/// What a mount is asked to be.
struct MountSettings: Sendable {
    var storePath: String
    var mountpoint: String
    var startLocked: Bool
    var lockAfter: Int?
    var defaultClass: AccessibilityClass
    /// Take a store whose rows or commit counter are older than this machine last saw (`--accept-rollback`).
    var acceptRollback = false
}

/// The daemon behind a mount: holds the store's lock, unlocks, mounts, answers the control
/// socket, locks after idleness, and on exit unmounts and forgets every key.
final class MountDaemon: @unchecked Sendable {
    let settings: MountSettings
    private let log = Logger(label: "keychainfs.daemon")

    init(settings: MountSettings) { self.settings = settings }

    /// Runs until unmounted. `ready` is told once the mount serves, or why it could not.
    func run(passphrase: SecureBytes?, ready: (Result<Void, KeychainError>) -> Void) -> Int32 {
        // Before any key is loaded.
        ProcessHardening.apply()
        let storeLock: Int32, keychain: Keychain, tree: KeychainTree, mount: FuseMount
        do {
            storeLock = try Self.lockStore(settings.storePath)
            keychain = try Keychain(openingAt: settings.storePath, acceptRollback: settings.acceptRollback)
            if !settings.startLocked { try keychain.unlock(passphrase: passphrase) }
            tree = try KeychainTree(keychain: keychain, defaultClass: settings.defaultClass, lockAfter: settings.lockAfter)
            mount = FuseMount(tree: tree, mountpoint: settings.mountpoint)
            try mount.mount()
        } catch {
            let e = error as? KeychainError ?? .mountFailed("\(error)")
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
        if let lockAfter = settings.lockAfter { startIdleLock(tree: tree, after: lockAfter) }
        log.info("serving \(settings.storePath) at \(settings.mountpoint), \(keychain.state.rawValue)")
        ready(.success(()))

        let status = mount.serve()
        server.stop()
        MountRegistry.unregister(record)
        tree.forgetEverything()
        mount.close()
        log.info("unmounted \(settings.mountpoint)")
        return status == 0 ? 0 : 1
    }

    /// One daemon per store: an exclusive flock on the store file, held for the daemon's life.
    static func lockStore(_ path: String) throws -> Int32 {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw KeychainError.noSuchStore(path) }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            throw KeychainError.alreadyServed(path, at: MountRegistry.record(forStore: path)?.mountpoint)
        }
        return fd
    }

    /// The control socket's service: the same store, with every change reflected in the tree.
    private func service(tree: KeychainTree, mount: FuseMount) -> LocalKeychainService {
        let settings = self.settings
        let hooks = DaemonHooks(
            lock: { tree.lock() },
            unlock: { try tree.unlock(passphrase: $0) },
            unmount: { try Fusermount.unmount(settings.mountpoint) },
            status: { MountStatus(mountpoint: settings.mountpoint, lockAfter: settings.lockAfter) })
        return LocalKeychainService(keychain: tree.keychain, hooks: hooks) { change in
            switch change {
            case .saved(let items): tree.apply(saved: items, deleted: [])
            case .deleted(let ids): tree.apply(saved: [], deleted: ids)
            case .lockStateChanged: break
            }
        }
    }

    /// Locks after `seconds` without file access, checked every half second.
    private func startIdleLock(tree: KeychainTree, after seconds: Int) {
        let thread = Thread {
            while true {
                usleep(500_000)
                if tree.keychain.state == .unlocked && tree.idleSeconds >= Int64(seconds) { tree.lock() }
            }
        }
        thread.name = "keychainfs-idle-lock"
        thread.start()
    }
}
