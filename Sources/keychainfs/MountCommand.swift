import ArgumentParser
import Foundation
import KeychainControl
import KeychainCrypto
import KeychainModel
import KeychainStore

struct MountCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mount",
        abstract: "Mount the keychain as a directory.",
        discussion: """
            Asks for the passphrase and unlocks (or, with --locked, starts 'before first unlock', \
            where only 'always' items can be read). Returns once the mount serves; the daemon runs \
            on in the background until 'keychainfs unmount'.
            """)

    @Argument(help: "An existing directory to mount on; its contents are hidden while mounted.") var mountpoint: String
    @OptionGroup var store: StoreOptions
    @Flag(help: "Mount without unlocking (before first unlock).") var locked = false
    @Option(help: "Lock after this many seconds without file access.") var lockAfter: Int?
    @Flag(help: "Stay in the foreground and log to stderr.") var foreground = false
    @Option(help: "Class of items created through the tree (default when-unlocked).") var defaultAccessible: String?
    @Flag(help: "Use the store although it is older than this machine last saw (a backup put back on purpose).")
    var acceptRollback = false
    @OptionGroup var passphrase: PassphraseOptions

    func run() throws {
        var settings = try preflight()
        settings.acceptRollback = acceptRollback
        let keychain = try Keychain(openingAt: settings.storePath, acceptRollback: acceptRollback)
        let secret = !settings.startLocked && keychain.hasPassphrase
            ? try passphrase.read(prompt: "Passphrase for \(settings.storePath): ") : nil
        guard foreground else {
            try DaemonLauncher.launch(arguments: DaemonCommand.arguments(for: settings), passphrase: secret)
            return
        }
        var failure: KeychainError?
        let code = MountDaemon(settings: settings).run(passphrase: secret) { result in
            if case .failure(let e) = result { failure = e }
        }
        if let failure { throw failure }
        if code != 0 { throw ExitCode(code) }
    }

    /// Fails early, with one clear line, on what would make the daemon fail.
    func preflight() throws -> MountSettings {
        let storePath = store.path
        guard FileManager.default.fileExists(atPath: storePath) else { throw KeychainError.noSuchStore(storePath) }
        if let lockAfter, lockAfter <= 0 { throw KeychainError.invalidInput("--lock-after must be a positive number of seconds") }
        let defaultClass: AccessibilityClass
        do { defaultClass = try defaultAccessible.map(AccessibilityClass.init(parsing:)) ?? .default }
        catch { throw KeychainError(error) }
        let mp = MountRegistry.canonicalPath(mountpoint)
        if let live = MountRegistry.liveRecord(forStore: storePath) {
            throw KeychainError.alreadyServed(storePath, at: live.mountpoint)
        }
        if StaleMount.isStale(mp) { try StaleMount.detach(mp) }
        var st = stat()
        guard stat(mp, &st) == 0 else { throw KeychainError.mountFailed("\(mountpoint): \(String(cString: strerror(errno)))") }
        guard st.st_mode & S_IFMT == S_IFDIR else { throw KeychainError.mountFailed("\(mountpoint) is not a directory") }
        if MountTable.isMountpoint(mp) { throw KeychainError.mountFailed("\(mountpoint) is already mounted") }
        guard access("/dev/fuse", R_OK | W_OK) == 0 else {
            throw KeychainError.mountFailed("no usable /dev/fuse (install fuse3 and load the fuse module)")
        }
        return MountSettings(storePath: storePath, mountpoint: mp, startLocked: locked, lockAfter: lockAfter,
                             defaultClass: defaultClass)
    }
}

/// The daemon's own entry point, started by `mount`; not for users.
struct DaemonCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "_daemon", shouldDisplay: false)

    @Argument var mountpoint: String
    @Option var store: String
    @Flag var locked = false
    @Option var lockAfter: Int?
    @Option var defaultAccessible: String
    @Flag var readPassphrase = false
    @Flag var acceptRollback = false

    static func arguments(for s: MountSettings) -> [String] {
        var args = ["_daemon", s.mountpoint, "--store", s.storePath, "--default-accessible", s.defaultClass.rawValue]
        if s.startLocked { args.append("--locked") }
        if let l = s.lockAfter { args += ["--lock-after", String(l)] }
        if !s.startLocked { args.append("--read-passphrase") }
        if s.acceptRollback { args.append("--accept-rollback") }
        return args
    }

    func run() throws {
        // Do not pin the directory the user mounted from.
        _ = chdir("/")
        let settings = MountSettings(storePath: store, mountpoint: mountpoint, startLocked: locked, lockAfter: lockAfter,
                                     defaultClass: AccessibilityClass(rawValue: defaultAccessible) ?? .default,
                                     acceptRollback: acceptRollback)
        let secret = readPassphrase
            ? try? LineReader.readLine(fd: DaemonLauncher.passphraseFD, what: "the passphrase pipe") : nil
        close(DaemonLauncher.passphraseFD)
        let code = MountDaemon(settings: settings).run(passphrase: secret) { DaemonLauncher.report($0, fd: DaemonLauncher.readyFD) }
        if code != 0 { throw ExitCode(code) }
    }
}

/// The kernel's table of mounts, from /proc/self/mountinfo.
enum MountTable {
    static func isMountpoint(_ path: String) -> Bool {
        guard let text = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return false }
        // Field 5 is the mount point, with spaces and the like octal-escaped.
        let escaped = path.replacingOccurrences(of: "\\", with: "\\134").replacingOccurrences(of: " ", with: "\\040")
            .replacingOccurrences(of: "\t", with: "\\011").replacingOccurrences(of: "\n", with: "\\012")
        return text.split(separator: "\n").contains { line in
            let fields = line.split(separator: " ", maxSplits: 5)
            return fields.count > 4 && fields[4] == escaped
        }
    }
}
