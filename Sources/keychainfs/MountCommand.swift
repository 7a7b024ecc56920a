import ArgumentParser
import Foundation
import KeychainAccess
import KeychainClient
import KeychainDaemon
import KeychainConfig
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
            on in the background until 'keychainfs unmount'. Without MOUNTPOINT it mounts at the \
            configured mountpoint (default ~/Keychain, created if missing). Defaults come from \
            $XDG_CONFIG_HOME/keychainfs/config.toml; the options here override them. Under \
            systemd (Type=notify), --foreground reports readiness.
            """)

    @Argument(help: "An empty directory to mount on; one holding files is refused (exit 39) (default: the configured mountpoint).",
              completion: .directory)
    var mountpoint: String?
    @OptionGroup var store: StoreOptions
    @Flag(help: "Mount without unlocking (before first unlock).") var locked = false
    @Option(help: ArgumentHelp("Lock after this many seconds without file access; 0 for never (see set-keychain-settings).",
                               valueName: "seconds"))
    var lockAfter: Int?
    @Flag(help: "Stay in the foreground and log to stderr.") var foreground = false
    @Option(help: ArgumentHelp("Class of items created through the tree (default when-unlocked).", valueName: "class"),
            completion: .accessibilityClasses)
    var defaultAccessible: String?
    @Flag(inversion: .prefixedNo, help: "Let root (system services, sudo) read the mount; other users still cannot.")
    var allowRoot: Bool?
    @Flag(inversion: .prefixedNo, help: "Serve the Secret Service API (org.freedesktop.secrets) on the session bus, for libsecret, secret-tool and python keyring.")
    var secretService: Bool?
    @Flag(help: "Use the store although it is older than this machine last saw (a backup put back on purpose).")
    var acceptRollback = false
    @OptionGroup var passphrase: PassphraseOptions

    func run() throws {
        var (settings, hasPassphrase) = try preflight()
        settings.acceptRollback = acceptRollback
        let needsPassphrase = !settings.startLocked && hasPassphrase
        // The daemon unlocks; a wrong passphrase typed at the terminal is asked again.
        try passphrase.withRetries(prompt: "Passphrase for \(settings.storePath): ") { read in
            try start(settings, passphrase: needsPassphrase ? try read() : nil)
        }
    }

    private func start(_ settings: MountSettings, passphrase secret: SecureBytes?) throws {
        guard foreground else {
            try DaemonLauncher.launch(settings: settings, passphrase: secret)
            return
        }
        var failure: KeychainError?
        let code = MountDaemon(settings: settings, foreground: true).run(passphrase: secret) { result in
            if case .failure(let e) = result { failure = e }
        }
        if let failure { throw failure }
        if code != 0 { throw ExitCode(code) }
    }

    /// Fails early, with one clear line, on what would make the daemon fail. Reads the store
    /// (whether it has a passphrase) without changing it, under its lease, and keeps no handle
    /// on it: the daemon opens it itself.
    func preflight() throws -> (MountSettings, hasPassphrase: Bool) {
        let config = try KeychainConfig.load()
        let storePath = store.path
        guard FileManager.default.fileExists(atPath: storePath) else { throw KeychainError.noSuchStore(storePath) }
        if let lockAfter, lockAfter < 0 { throw KeychainError.invalidInput("--lock-after must be a number of seconds (0 for never)") }
        let defaultClass: AccessibilityClass
        do { defaultClass = try defaultAccessible.map(AccessibilityClass.init(parsing:)) ?? config.defaultAccessible ?? .default }
        catch { throw KeychainError(error) }
        let allowRoot = self.allowRoot ?? config.allowRoot ?? false
        if allowRoot { try FuseConfiguration.checkAllowRoot() }
        let mountpoint = self.mountpoint ?? config.effectiveMountpoint
        // The configured mountpoint is ours to create; a directory named on the command line must exist.
        var existing = stat()
        if self.mountpoint == nil && lstat(mountpoint, &existing) != 0 && errno == ENOENT {
            try KeychainLocations.makeDirectory(mountpoint)
        }
        let mp = MountRegistry.canonicalPath(mountpoint)
        try recoverStaleMount(at: mp)
        let hasPassphrase: Bool
        switch try DaemonLocator.route(forStore: storePath) {
        case .daemon(_, let live):
            // Say what to do next: nothing, if it is mounted where asked; else unmount it there.
            let at = live.mountpoint
            if MountRegistry.canonicalPath(at).isSame(as: mp) {
                throw KeychainError.storeBusy("\(storePath) is already mounted at \(at) ('keychainfs status' shows its state)")
            }
            throw KeychainError.storeBusy("\(KeychainError.alreadyServed(storePath, at: at).description); to mount it at \(mountpoint), unmount it first: keychainfs unmount \(at)")
        case .direct(let lease):
            hasPassphrase = try withExtendedLifetime(lease) { try StoreProbe(readingAt: storePath).hasPassphrase }
        }
        // A killed daemon's mount of this store elsewhere is cleaned up too.
        try StaleMount.detachAll(ofStore: storePath)
        var st = stat()
        guard stat(mp, &st) == 0 else {
            let code = errno
            // Only the configured mountpoint is made here; one named on the command line is the user's to make.
            let hint = code == ENOENT ? "; make the directory first: mkdir -p \(mountpoint)" : ""
            throw KeychainError.mountFailed("\(mountpoint): \(String(cString: strerror(code)))\(hint)")
        }
        guard st.st_mode & S_IFMT == S_IFDIR else { throw KeychainError.mountFailed("\(mountpoint) is not a directory") }
        if MountTable.isMountpoint(mp) { throw KeychainError.mountFailed("\(mountpoint) is already mounted") }
        if let entry = Self.firstEntry(of: mp) {
            throw KeychainError.mountpointNotEmpty("\(mountpoint) is not empty (it holds \(Printable.text(entry))); "
                + "a mount there would hide its files: mount on an empty directory, or move them out first")
        }
        if let problem = FuseDevice.problem() { throw KeychainError.mountFailed(problem) }
        let idle = (lockAfter ?? config.lockAfter).flatMap { $0 == 0 ? nil : $0 }
        var settings = MountSettings(storePath: storePath, mountpoint: mp, startLocked: locked, lockAfter: idle,
                                     defaultClass: defaultClass, allowRoot: allowRoot)
        settings.secretService = secretService ?? config.secretService ?? false
        settings.defaultSynchronizable = config.defaultSynchronizable ?? false
        settings.pinentry = config.pinentry
        settings.promptTimeout = config.promptTimeout ?? 30
        // Checked here, as the daemon will use it: a bad pinentry stops the mount with its reason.
        do { _ = try AccessSettings(pinentry: settings.pinentry, promptTimeoutSeconds: settings.promptTimeout) } catch {
            throw KeychainError.invalidInput("\(KeychainConfig.defaultPath): \(error.description)")
        }
        return (settings, hasPassphrase)
    }

    /// A name in `directory` other than `.` and `..`, if any. One that cannot be read is left
    /// for the mount itself to judge.
    static func firstEntry(of directory: String) -> String? {
        guard let dir = opendir(directory) else { return nil }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { return name }
        }
        return nil
    }

    /// A keychainfs mount already at the mountpoint is detached if its daemon is gone, whenever
    /// that happened: the mount table and the store's lock say so, not stat(), which can still
    /// answer from the kernel's cache just after the daemon was killed.
    private func recoverStaleMount(at mp: String) throws {
        guard let entry = MountTable.keychainfsMount(at: mp) else { return }
        switch StaleMount.owner(of: entry) {
        case .gone:
            try StaleMount.detach(mp)
        case .live:
            break  // Refused below: by its store if it is this one, else as a mountpoint in use.
        case .unresponsive(let pid):
            throw KeychainError.storeBusy("\(mp) is mounted by \(pid.map(ProcessState.describe) ?? "a process") "
                + "that does not answer; run 'keychainfs unmount \(mp)'")
        }
    }
}

/// The daemon's own entry point, started by `mount`; not for users.
struct DaemonCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "_daemon", shouldDisplay: false)

    func run() throws {
        // Do not pin the directory the user mounted from.
        _ = chdir("/")
        let fd = DaemonLauncher.passphraseFD
        // Before `mount` sends anything: the passphrase must not wait where another process can copy it.
        guard SecretHandover.reportHardened(on: fd) else {
            DaemonLauncher.report(.failure(.mountFailed("the daemon could not make itself non-dumpable, or is being traced")),
                                  fd: DaemonLauncher.readyFD)
            throw ExitCode(KeychainError.mountFailed("").exitCode)
        }
        // The settings `mount` parsed, whole: a handover that does not decode is a failure, never defaults.
        let line = try LineReader.readLine(fd: fd, what: "the mount settings")
        let handover: DaemonHandover
        do { handover = try line.withUnsafeBytes { try JSONDecoder().decode(DaemonHandover.self, from: Data($0)) } } catch {
            DaemonLauncher.report(.failure(.mountFailed("the daemon could not read its settings: \(error)")), fd: DaemonLauncher.readyFD)
            throw ExitCode(KeychainError.mountFailed("").exitCode)
        }
        let secret = handover.passphraseFollows ? try? LineReader.readLine(fd: fd, what: "the passphrase pipe") : nil
        close(fd)
        let code = MountDaemon(settings: handover.settings, foreground: false).run(passphrase: secret) {
            DaemonLauncher.report($0, notice: DaemonLog.refusal, fd: DaemonLauncher.readyFD)
        }
        if code != 0 { throw ExitCode(code) }
    }
}
