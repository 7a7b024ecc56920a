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
        try daemon.unlock(passphrase: status.hasPassphrase
            ? try passphrase.read(prompt: "Passphrase for \(record.storePath): ") : nil)
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
