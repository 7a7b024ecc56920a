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
