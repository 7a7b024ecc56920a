import ArgumentParser
import Foundation
import KeychainControl
import KeychainModel
import KeychainStore

/// Which mount a daemon command acts on: the one at MOUNTPOINT, else the store's.
struct MountTarget: ParsableArguments {
    @Argument(help: ArgumentHelp("The mountpoint (default: the mount of the store).", valueName: "mountpoint"))
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
        guard FileManager.default.fileExists(atPath: store) else { throw notMounted }
        guard let (service, record) = try DaemonLocator.daemon(forStore: store),
              canonicalMountpoint == nil || canonicalMountpoint == record.mountpoint else {
            throw notMounted(store: store)
        }
        return (record, service)
    }

    /// The keychainfs mounts in question (at MOUNTPOINT, else every one of the store) whose daemon is gone.
    func staleMounts(store: String) -> [MountEntry] {
        MountTable.keychainfsMounts(ofStore: MountRegistry.canonicalPath(store))
            .filter { canonicalMountpoint == nil || $0.mountpoint == canonicalMountpoint }
            .filter { if case .gone = StaleMount.owner(of: $0) { true } else { false } }
    }

    func notMounted(store: String) -> KeychainError {
        guard let stale = staleMounts(store: store).first else { return notMounted }
        return .notMounted("\(stale.mountpoint) is a stale mount of \(store): its daemon is gone. Run 'keychainfs "
            + "unmount \(stale.mountpoint)' to detach it, or 'keychainfs mount \(stale.mountpoint)' to mount it again.")
    }

    var notMounted: KeychainError {
        if let mountpoint { return .notMounted("no keychainfs daemon serves \(mountpoint)") }
        return .notMounted("\(storeOptions.path) is not mounted")
    }
}

struct LockCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lock",
        abstract: "Lock a mounted keychain: 'when-unlocked' items become unreadable at once.")

    @OptionGroup var target: MountTarget

    func run() throws { try target.daemon().1.lock() }
}

struct UnlockCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unlock",
        abstract: "Unlock a mounted keychain with its passphrase.")

    @OptionGroup var target: MountTarget
    @OptionGroup var passphrase: PassphraseOptions

    func run() throws {
        let (record, daemon) = try target.daemon()
        let status = try daemon.status()
        if status.state == .unlocked {
            Output.line("\(record.mountpoint) is already unlocked")
            return
        }
        try daemon.unlock(passphrase: status.hasPassphrase
            ? try passphrase.read(prompt: "Passphrase for \(record.storePath): ") : nil)
    }
}

struct StatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show a mount's lock state, store, lock-after setting and item counts per class.")

    @OptionGroup var target: MountTarget

    func run() throws {
        let (record, daemon) = try target.daemon()
        let s = try daemon.status()
        var lines = [
            "state: \(s.state.rawValue)",
            "store: \(s.storePath)",
            "mountpoint: \(s.mountpoint ?? record.mountpoint)",
            "lock-after: \(s.lockAfter.map { "\($0) s" } ?? "never")",
            "passphrase: \(s.hasPassphrase ? "yes" : "no")",
            "items: \(s.itemCounts.values.reduce(0, +))",
        ]
        for c in AccessibilityClass.allCases { lines.append("    \(c.rawValue): \(s.itemCounts[c] ?? 0)") }
        if let m = s.memory { lines += Self.describe(m) }
        Output.write(lines.map { $0 + "\n" }.joined())
    }

    static func describe(_ m: MemoryStatus) -> [String] {
        func kib(_ n: Int) -> String { n < 1024 ? "\(n) bytes" : "\((n + 1023) / 1024) KiB" }
        var lines = [
            "locked memory: \(kib(m.lockedBytes)) (limit \(m.limit.map(kib) ?? "none")), unlocked: \(kib(m.unlockedBytes))"
                + (m.refusals > 0 ? ", refused \(m.refusals) times" : ""),
            "cached secrets: \(m.cachedSecrets), \(kib(m.cachedBytes)) of \(kib(m.cacheBudget))",
        ]
        let remedy = "raise the daemon's RLIMIT_MEMLOCK (ulimit -l, or LimitMEMLOCK= under systemd) and mount again"
        if m.isExhausted {
            lines.append("warning: locked memory is exhausted: \(kib(m.unlockedBytes)) of keys and secrets may be swapped out; \(remedy)")
        } else if m.refusals > 0 {
            lines.append("warning: locked memory ran out (the kernel refused to lock pages \(m.refusals) times): "
                + "keys and secrets may have been swapped out; \(remedy)")
        }
        return lines
    }
}

struct UnmountCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unmount",
        abstract: "Unmount a keychain; the daemon forgets every key and exits.",
        discussion: "A mount whose daemon was killed (\"Transport endpoint is not connected\") is detached instead.")

    @OptionGroup var target: MountTarget
    /// How long to wait for the daemon to exit, so that the mountpoint is free when this returns.
    static let exitWait: TimeInterval = 10

    func run() throws {
        let store = try target.storePath()
        do {
            if FileManager.default.fileExists(atPath: store), let (service, record) = try DaemonLocator.daemon(forStore: store),
               target.canonicalMountpoint == nil || target.canonicalMountpoint == record.mountpoint {
                try service.unmount()
                Self.waitForExit(record.pid)
                return
            }
        } catch let error as KeychainError where Self.cannotBeAsked(error) {
            // A daemon that cannot be asked (it does not answer, or speaks another version) is
            // ended by detaching its mount: the one the mount table shows for this store.
            let mounts = MountTable.keychainfsMounts(ofStore: MountRegistry.canonicalPath(store))
                .filter { target.canonicalMountpoint == nil || $0.mountpoint == target.canonicalMountpoint }
            guard !mounts.isEmpty else { throw error }
            let holder = MountRegistry.record(forStore: store)?.pid
            for entry in mounts { try Fusermount.unmount(entry.mountpoint) }
            if let holder { Self.waitForExit(holder) }
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

    static func waitForExit(_ pid: Int32) {
        let deadline = Date().addingTimeInterval(exitWait)
        while ProcessState.isRunning(pid) && Date() < deadline { usleep(20_000) }
    }
}
