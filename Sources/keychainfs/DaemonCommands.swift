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

    /// The record of the mount, live or not; nil when nothing is known about one.
    func record() -> MountRecord? {
        if let mountpoint { return MountRegistry.record(forMountpoint: mountpoint) }
        return MountRegistry.record(forStore: storeOptions.path)
    }

    /// The daemon of a live mount, or `notMounted`.
    func daemon() throws -> (MountRecord, RemoteKeychainService) {
        guard let record = record() else { throw notMounted }
        guard MountRegistry.isAlive(record) else {
            MountRegistry.removeStale(record)
            throw notMounted
        }
        return (record, RemoteKeychainService(socketPath: record.socketPath))
    }

    var notMounted: KeychainError {
        if let mountpoint { return .notMounted("no keychainfs daemon serves \(mountpoint)") }
        return .notMounted("\(storeOptions.path) is not mounted")
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
        for record in MountRegistry.allRecords() {
            guard MountRegistry.isAlive(record) else { MountRegistry.removeStale(record); continue }
            do { try RemoteKeychainService(socketPath: record.socketPath).lock() } catch {
                Output.error("keychainfs: cannot lock \(record.mountpoint): \(error)")
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

    @Option(name: .customShort("t"), help: ArgumentHelp("Lock after this many seconds without file access.", valueName: "seconds"))
    var timeout: Int?
    @Flag(name: .customShort("u"), help: "Accepted as in macOS (implied by -t); alone, it means never.")
    var lockAfterTimeout = false
    @OptionGroup var target: MountTarget

    func run() throws {
        if let timeout, timeout <= 0 { throw KeychainError.invalidInput("-t must be a positive number of seconds") }
        try target.daemon().1.setLockAfter(timeout)
    }
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
        try passphrase.withRetries(prompt: "Passphrase for \(record.storePath): ") { read in
            try daemon.unlock(passphrase: status.hasPassphrase ? try read() : nil)
        }
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
        Output.write(lines.map { $0 + "\n" }.joined())
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
        let record = target.record()
        if let record, MountRegistry.isAlive(record) {
            try RemoteKeychainService(socketPath: record.socketPath).unmount()
            let deadline = Date().addingTimeInterval(Self.exitWait)
            while kill(record.pid, 0) == 0 && Date() < deadline { usleep(20_000) }
            return
        }
        guard let mountpoint = target.mountpoint ?? record?.mountpoint, StaleMount.isStale(mountpoint) else {
            if let record { MountRegistry.removeStale(record) }
            throw target.notMounted
        }
        try StaleMount.detach(mountpoint)
        if let record { MountRegistry.removeStale(record) }
        Output.line("detached the stale mount at \(mountpoint)")
    }
}
