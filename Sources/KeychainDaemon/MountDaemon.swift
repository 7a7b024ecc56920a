import Foundation
import KeychainAccess
import KeychainControl
import KeychainControlServer
import KeychainCrypto
import KeychainFileSystem
import KeychainFuse
import KeychainModel
import KeychainSecretService
import KeychainStore
import KeychainSync
import Logging
import Synchronization

/// What a mount is asked to be.
package struct MountSettings: Sendable, Codable {
    package var storePath: String
    package var mountpoint: String
    package var startLocked: Bool
    package var lockAfter: Int?
    package var defaultClass: AccessibilityClass
    /// config.toml's `default-synchronizable`.
    package var defaultSynchronizable = false
    package var allowRoot = false
    /// Take a store whose rows or commit counter are older than this machine last saw (`--accept-rollback`).
    package var acceptRollback = false
    /// Serve the Secret Service D-Bus API (`--secret-service`, `secret-service = true`).
    package var secretService = false
    /// `[access] pinentry` and `prompt-timeout`: how the Secret Service's unlock prompt and per-program access ask.
    package var pinentry: String?
    package var promptTimeout = 30

    package init(storePath: String, mountpoint: String, startLocked: Bool, lockAfter: Int?,
                 defaultClass: AccessibilityClass, allowRoot: Bool = false, acceptRollback: Bool = false) {
        self.storePath = storePath; self.mountpoint = mountpoint; self.startLocked = startLocked
        self.lockAfter = lockAfter; self.defaultClass = defaultClass; self.allowRoot = allowRoot
        self.acceptRollback = acceptRollback
    }
}

/// The daemon behind a mount: holds the store's lock, unlocks, mounts, answers the control
/// socket, locks after idleness, and on exit unmounts and forgets every key.
package final class MountDaemon: Sendable {
    package let settings: MountSettings
    // Made after `DaemonLog.bootstrap`, so that it writes where the daemon logs.
    private var log: Logger { Logger(label: "keychainfs.daemon") }

    /// `foreground`: log to stderr (as under systemd) rather than to the log file.
    package init(settings: MountSettings, foreground: Bool) {
        self.settings = settings
        DaemonLog.bootstrap(foreground: foreground)
    }

    /// Runs until unmounted. `ready` is told once the mount serves, or why it could not.
    package func run(passphrase: SecureBytes?, ready: (Result<Void, KeychainError>) -> Void) -> Int32 {
        // Before any key is loaded.
        ProcessProtection.makeNotDumpable()
        reportLockedMemory()
        raiseDescriptorLimit()
        var storeLock: Int32 = -1
        let owner: ServedKeychain, tree: KeychainTree, mount: FuseMount
        var secretService: SecretService?
        do {
            storeLock = try Self.lockStore(settings.storePath)
            owner = try Self.owner(settings)
            // The passphrase is needed only to derive the keys: wiped at once, whatever the outcome.
            defer { passphrase?.wipe() }
            if !settings.startLocked { try owner.unlock(passphrase: passphrase) }
            // Before the mount: a name another service owns fails the mount, saying who has it.
            if settings.secretService {
                secretService = try SecretService.start(owner: owner, pinentry: settings.pinentry.map {
                    PinentryPassphrase(program: $0, timeout: settings.promptTimeout)
                })
            }
            tree = KeychainTree(served: owner)
            mount = FuseMount(tree: tree, mountpoint: settings.mountpoint,
                              source: MountRegistry.canonicalPath(settings.storePath), allowRoot: settings.allowRoot)
            try mount.mount()
        } catch {
            secretService?.stop()
            // Released, so that `mount --foreground` can try again with another passphrase.
            if storeLock >= 0 { close(storeLock) }
            let e = error as? KeychainError ?? .mountFailed("\(error)")
            if case .wrongPassphrase = e {
                // At a terminal, `mount` asks again: this attempt failed, not the mount.
                log.notice("mount of \(settings.mountpoint): the passphrase is wrong")
            } else {
                log.error("mount of \(settings.mountpoint) failed: \(e.description)")
            }
            ready(.failure(e))
            return e.exitCode
        }
        defer { close(storeLock) }

        let server: ControlServer
        let record = MountRecord(pid: getpid(), storePath: MountRegistry.canonicalPath(settings.storePath),
                                 mountpoint: MountRegistry.canonicalPath(settings.mountpoint),
                                 socketPath: MountRegistry.socketPath(forStore: settings.storePath))
        do {
            let mountpoint = settings.mountpoint
            let service = Self.controlService(owner, settings) {
                // While the loop still serves: a private mapping must not keep pages past the unmount.
                mount.dropCachedPages(all: true)
                // Not lazy: a mount in use here stays, and the unmount fails as busy, whatever the
                // mount table says. One detached here already, some other way (`fusermount3 -u`,
                // `umount`), while a copy in another mount namespace kept the session: the
                // daemon stops all the same.
                do {
                    try Fusermount.unmount(mountpoint)
                } catch KeychainError.mountpointBusy(let why) {
                    throw KeychainError.mountpointBusy(why)
                } catch {
                    if Self.isMounted(record) { throw error }
                }
                // The kernel ends the session only if no other mount namespace has a copy of
                // the mount; the daemon ends it, and the copies with it, as on a stop signal.
                if !mount.stopAfterDetach() {
                    Logger(label: "keychainfs.daemon").error("unmount of \(mountpoint): cannot end the FUSE session; a copy of the mount in another mount namespace keeps it until a stop signal")
                }
            }
            // Each connection's peer is identified as it is accepted (per-program access), and
            // its request answered as that caller.
            server = try ControlServer(socketPath: record.socketPath, serving: { service.serving($0) },
                                       identify: { [access = owner.access] in access.identifyPeer($0) })
            server.start()
            try MountRegistry.register(record)
        } catch {
            mount.close()
            secretService?.stop()
            let e = error as? KeychainError ?? .mountFailed("\(error)")
            ready(.failure(e))
            return e.exitCode
        }
        Self.startIdleLock(owner)
        // Sync (issue 20): exchanges after each commit and when another device's state arrives.
        let sync = try? SyncWatcher(session: SyncSession(owner: owner, storePath: settings.storePath))
        if sync == nil { log.error("sync: cannot watch the sync folder (inotify); this mount does not sync") }
        sync?.start()
        log.info("serving \(settings.storePath) at \(settings.mountpoint), \(owner.lockState.rawValue)")
        // Under systemd (Type=notify) the unit turns active only now, once the mount serves.
        SystemdNotify.send("READY=1\nSTATUS=serving \(settings.storePath) at \(settings.mountpoint)")
        ready(.success(()))
        let detachWatch = MountTable.keychainfsMount(at: record.mountpoint).flatMap { entry in
            DetachWatch(mountID: entry.id) { [log, settings] in
                log.info("\(settings.mountpoint) was detached here; ending its FUSE session, and any copy of it in another mount namespace")
                mount.stopAfterDetach()
            }
        }
        if detachWatch == nil { log.error("cannot watch the mount table: a mount detached by fusermount3 -u while another mount namespace holds a copy keeps serving that copy until keychainfs unmount or a stop signal") }

        // A stop signal forgets the keys and drops the kernel's cached pages while the loop still
        // serves (a private mapping would keep them past the daemon), as `unmount` drops them
        // first; requests racing the stop are refused as after a lock.
        let status = mount.serve(stopping: { [log, settings] in
            if mount.wasDetached {
                log.info("unmount: forgetting every key and ending the FUSE session of \(settings.mountpoint) in every mount namespace")
            } else {
                log.info("stop signal: forgetting every key and unmounting \(settings.mountpoint)")
            }
            owner.forgetEverything()
            mount.dropCachedPages(all: true)
        })
        detachWatch?.stop()
        sync?.stop()
        secretService?.stop()
        server.stop()
        // The daemon exits without closing its store: what waits for commits to pause is done
        // here, not left to the timer (`Keychain+FilesRecord.swift`).
        owner.settle()
        MountRegistry.unregister(record)
        owner.forgetEverything()
        mount.close()
        log.info("unmounted \(settings.mountpoint)")
        // libfuse's loop returns the signal that ended it; a stop signal (systemd's, a
        // Ctrl-C in the foreground) is a clean unmount, not a failure.
        return status == 0 || [SIGTERM, SIGINT, SIGHUP].contains(status) ? 0 : 1
    }

    /// RLIMIT_NOFILE's soft limit up to its hard one: per-program access keeps up to seven
    /// descriptors for each of up to 128 identified processes (a pidfd, its status, its image
    /// witness, its pagemap and stat, its executable, a held image), and as many for up to 128 more dropped from
    /// its table and not yet closed (`DroppedProcesses`), beside the store's, the FUSE
    /// session's and the clients'; a soft limit of 1024 (the usual default) leaves too little
    /// room. The hard limit is the administrator's (LimitNOFILE= under systemd).
    private func raiseDescriptorLimit() {
        var limit = rlimit()
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        guard getrlimit(resource, &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        let soft = limit.rlim_cur
        limit.rlim_cur = limit.rlim_max
        if setrlimit(resource, &limit) != 0 {
            log.warning("cannot raise the open-file limit from \(soft) to \(limit.rlim_max): \(String(cString: strerror(errno)))")
        }
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
    package static func lockStore(_ path: String) throws -> Int32 { try StoreLock.acquireExclusive(path) }

    /// The mount's owner of the store, with the mount's settings.
    static func owner(_ settings: MountSettings, clock: any MonotonicClock = SystemMonotonicClock()) throws -> ServedKeychain {
        let keychain = try Keychain(openingAt: settings.storePath, acceptRollback: settings.acceptRollback)
        let access = AccessControl(settings: try AccessSettings(pinentry: settings.pinentry, promptTimeoutSeconds: settings.promptTimeout),
                                   log: AccessLog(path: AccessLog.defaultPath),
                                   logLine: { line in Logger(label: "keychainfs.access").notice("\(line)") })
        return try ServedKeychain(keychain: keychain, defaultClass: settings.defaultClass, lockAfter: settings.lockAfter,
                                  clock: clock, access: access, defaultSynchronizable: settings.defaultSynchronizable)
    }

    /// Whether the record's mount is still in this mount namespace's table.
    static func isMounted(_ record: MountRecord) -> Bool {
        MountTable.ourKeychainfsMounts().contains {
            $0.mountpoint.isSame(as: record.mountpoint) && $0.source.isSame(as: record.storePath)
        }
    }

    /// The control socket's service: the one service, over the mount's own owner.
    static func controlService(_ owner: ServedKeychain, _ settings: MountSettings,
                               unmount: @escaping @Sendable () throws -> Void) -> ServedKeychainService {
        ServedKeychainService(owner: owner, mount: ServedMount(storePath: settings.storePath, mountpoint: settings.mountpoint,
                                                               allowRoot: settings.allowRoot, unmount: unmount))
    }

    /// Asks the owner to lock if idle (`ServedKeychain.lockIfIdle`) every `interval` seconds;
    /// it runs even while the setting is off, since it can be changed at run time.
    @discardableResult
    static func startIdleLock(_ owner: ServedKeychain, interval: useconds_t = 500_000) -> Thread {
        let thread = Thread {
            while true {
                usleep(interval)
                owner.lockIfIdle()
            }
        }
        thread.name = "keychainfs-idle-lock"
        thread.start()
        return thread
    }
}
