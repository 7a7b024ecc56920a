import ArgumentParser
import Foundation
import KeychainControl
import KeychainModel
import KeychainStore

/// Which mount a daemon command acts on: the one at MOUNTPOINT, else the store's.
struct MountTarget: ParsableArguments {
    @Argument(help: ArgumentHelp("The mountpoint (default: the mount of the store).", valueName: "mountpoint"),
              completion: .directory)
    var mountpoint: String?
    @OptionGroup var storeOptions: StoreOptions

    /// MOUNTPOINT as the mount table spells it.
    var canonicalMountpoint: String? { mountpoint.map(MountRegistry.canonicalPath) }

    /// The store in question: the one the mount table shows at MOUNTPOINT, else --store's.
    func storePath() throws -> String {
        guard let mp = canonicalMountpoint else { return storeOptions.path }
        guard let entry = MountTable.keychainfsMount(at: mp) else { throw notMounted }
        return entry.source
    }

    /// The daemon of a live mount; `notMounted` (naming a stale mount, if there is one, and what
    /// to run) without one; `storeBusy` when a daemon holds the store but does not answer.
    func daemon() throws -> (MountRecord, RemoteKeychainService) {
        let store = try storePath()
        guard FileManager.default.fileExists(atPath: store) else {
            let create = storeOptions.store == nil ? "keychainfs init" : "keychainfs init --store \(store)"
            throw KeychainError.notMounted("\(store) is not mounted: there is no store there (create one with '\(create)')")
        }
        guard let (service, record) = try DaemonLocator.daemon(forStore: store),
              record.mountpoint.matches(canonicalMountpoint) else {
            throw notMounted(store: store)
        }
        return (record, service)
    }

    /// The keychainfs mounts in question (at MOUNTPOINT, else every one of the store) whose daemon is gone.
    func staleMounts(store: String) -> [MountEntry] {
        MountTable.keychainfsMounts(ofStore: MountRegistry.canonicalPath(store))
            .filter { $0.mountpoint.matches(canonicalMountpoint) }
            .filter { if case .gone = StaleMount.owner(of: $0) { true } else { false } }
    }

    func notMounted(store: String) -> KeychainError {
        guard let stale = staleMounts(store: store).first else { return notMountedMountIt }
        return .notMounted("\(stale.mountpoint) is a stale mount of \(store): its daemon is gone. Run 'keychainfs "
            + "unmount \(stale.mountpoint)' to detach it, or 'keychainfs mount \(stale.mountpoint)' to mount it again.")
    }

    var notMounted: KeychainError {
        if let mountpoint { return .notMounted("no keychainfs daemon serves \(mountpoint)") }
        return .notMounted("\(storeOptions.path) is not mounted" + otherMounts)
    }

    /// This user's mounts of other stores, named when the store a command finds is not mounted:
    /// a store made and mounted with `--store` is not the one a later command without it acts on.
    private var otherMounts: String {
        let store = MountRegistry.canonicalPath(storeOptions.path)
        let others = MountTable.ourKeychainfsMounts().filter { !$0.source.isSame(as: store) }
        guard !others.isEmpty else { return "" }
        return ". Mounted: " + others.map { "\($0.source) at \($0.mountpoint)" }.joined(separator: ", ")
            + " (name a store with --store or KEYCHAINFS_STORE)"
    }

    /// `notMounted`, saying how to mount it: for the commands that need a mount to act on
    /// (lock, unlock, set-keychain-settings), not for unmount.
    var notMountedMountIt: KeychainError {
        if mountpoint != nil { return notMounted }
        let mount = storeOptions.store == nil ? "keychainfs mount" : "keychainfs mount MOUNTPOINT --store \(storeOptions.path)"
        return .notMounted("\(storeOptions.path) is not mounted; '\(mount)' mounts it" + otherMounts)
    }
}

struct LockCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lock",
        abstract: "Lock a mounted keychain: 'when-unlocked' items become unreadable at once.",
        discussion: "With -a, every keychain this user has mounted is locked (none mounted is not an error).")

    @OptionGroup var target: MountTarget
    @Flag(name: [.customShort("a"), .customLong("all")], help: "Lock every mount of this user.")
    var all = false

    func validate() throws {
        if all && (target.mountpoint != nil || target.storeOptions.store != nil) {
            throw ValidationError("-a locks every mount; give no mountpoint or --store with it")
        }
    }

    func run() throws {
        guard all else { return try target.daemon().1.lock() }
        // One mount that fails does not keep the others unlocked.
        var failure: Error?
        // The mount table names each mount's store; a store mounted twice is locked once. A
        // mount whose daemon is gone (stale) has nothing to lock.
        var stores: [String] = []
        for entry in MountTable.ourKeychainfsMounts() where !stores.contains(where: entry.source.isSame) {
            stores.append(entry.source)
        }
        for store in stores where FileManager.default.fileExists(atPath: store) {
            do {
                guard let (service, _) = try DaemonLocator.daemon(forStore: store) else { continue }
                try service.lock()
            } catch {
                Output.error("keychainfs: cannot lock the keychain \(store): \(error)")
                failure = failure ?? error
            }
        }
        if let failure { throw failure }
    }
}

struct SetKeychainSettingsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "set-keychain-settings",
        abstract: "Change when a mounted keychain locks itself.",
        discussion: """
            -t SECONDS locks the mount after that many seconds without file access, counted from \
            now. Without -t (-u alone, or nothing) it never locks by itself, as with macOS \
            security, where leaving out -t means no timeout and -t implies -u. The setting lasts \
            until unmount ('mount --lock-after' sets it at mount); 'status' and the root's \
            user.keychain.lock-after attribute show it, and 'setfattr -n user.keychain.lock-after \
            -v SECONDS|off MOUNTPOINT' changes it too. macOS's -l (lock on sleep) is not supported.
            """)

    // Unconditional: `-t -3` is a bad timeout, not a missing value followed by an option `-3`.
    @Option(name: .customShort("t"), parsing: .unconditional,
            help: ArgumentHelp("Lock after this many seconds without file access.", valueName: "seconds"))
    var timeout: Int?
    @Flag(name: .customShort("u"), help: "Accepted as in macOS (implied by -t); alone, it means never.")
    var lockAfterTimeout = false
    @OptionGroup var target: MountTarget

    func run() throws {
        if let timeout, timeout <= 0 { throw KeychainError.invalidInput("-t must be a positive number of seconds; for never, give -u alone") }
        try target.daemon().1.setLockAfter(timeout)
    }
}

struct UnlockCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unlock",
        abstract: "Unlock a mounted keychain with its passphrase.",
        discussion: """
            --pam is for pam_exec with expose_authtok: the login password comes on standard input \
            (ended by a NUL, a newline or the end of input), and the keychain is unlocked with it \
            once its mount is up (waiting up to \(LoginUnlock.waitSeconds) s in the background, since \
            the login's user service mounts it after authentication). It prints nothing and always \
            exits 0, so a wrong or missing password never blocks a login.
            """)

    @OptionGroup var target: MountTarget
    @OptionGroup var passphrase: PassphraseOptions
    @Flag(help: "Read the login password from pam_exec on standard input; never fails.") var pam = false

    func validate() throws {
        if pam && passphrase.isGiven { throw ValidationError("--pam reads the password from standard input") }
    }

    func run() throws {
        if pam { LoginUnlock.start(mountpoint: target.mountpoint, store: target.storeOptions.store) }
        let (record, daemon) = try target.daemon()
        let status = try daemon.status()
        if status.state == .unlocked {
            Output.line("\(record.mountpoint) is already unlocked")
            return
        }
        // Not asked only to be told to wait: the daemon would not judge it yet.
        if status.hasPassphrase, let wait = status.passphraseWait, wait > 0 { throw KeychainError.tooManyAttempts(retryAfter: wait) }
        try passphrase.withRetries(prompt: "Passphrase for \(record.storePath): ") { read in
            try daemon.unlock(passphrase: status.hasPassphrase ? try read() : nil)
        }
    }
}

struct UnmountCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unmount",
        abstract: "Unmount a keychain; the daemon forgets every key and exits.",
        discussion: "A mount whose daemon was killed (\"Transport endpoint is not connected\") is detached instead.")

    @OptionGroup var target: MountTarget
    func run() throws {
        let store = try target.storePath()
        do {
            if FileManager.default.fileExists(atPath: store), let (service, record) = try DaemonLocator.daemon(forStore: store),
               record.mountpoint.matches(target.canonicalMountpoint) {
                try service.unmount()
                try Self.awaitExit(record.pid)
                return
            }
        } catch let error as KeychainError where Self.cannotBeAsked(error) {
            // A daemon that cannot be asked (it does not answer, or speaks another version) is
            // ended by detaching its mount: the one the mount table shows for this store.
            let mounts = MountTable.keychainfsMounts(ofStore: MountRegistry.canonicalPath(store))
                .filter { $0.mountpoint.matches(target.canonicalMountpoint) }
            guard !mounts.isEmpty else { throw error }
            let holder = MountRegistry.record(forStore: store)?.pid
            for entry in mounts { try Fusermount.unmount(entry.mountpoint) }
            if let holder { try Self.awaitExit(holder) }
            return
        }
        let stale = target.staleMounts(store: store)
        guard !stale.isEmpty else { throw target.notMounted }
        for entry in stale {
            try StaleMount.detach(entry.mountpoint)
            Output.line("detached the stale mount at \(entry.mountpoint)")
        }
    }

    static func cannotBeAsked(_ error: KeychainError) -> Bool {
        switch error {
        case .storeBusy, .daemonVersionMismatch: true
        default: false
        }
    }

    static func awaitExit(_ pid: Int32) throws { try ProcessState.awaitDaemonExit(pid, note: { Output.error("keychainfs: \($0)") }) }
}
