import ArgumentParser
import Foundation
import KeychainClient
import KeychainControl
import KeychainCrypto
import KeychainStore

/// Unlocking with the login password, from `pam_exec.so expose_authtok`.
///
/// PAM runs its auth modules before the session starts, so at a first login the user service
/// has not mounted the keychain yet. `unlock --pam` therefore hands the password to a
/// detached helper (`_unlock-at-login`) that waits for the mount, unlocks it and exits, and
/// returns at once: the login never waits and never fails because of the keychain.
enum LoginUnlock {
    static let waitSeconds = 60
    static let passwordFD: Int32 = 3

    /// `unlock --pam`: reads the password, becomes the user PAM authenticated (pam_exec runs
    /// modules as root for login and sshd), starts the helper, and exits 0 whatever happens.
    static func start(mountpoint: String?, store: String?) -> Never {
        ProcessProtection.makeNotDumpable()
        // Whatever fails from here on, the login goes on, and nothing is printed.
        let null = open("/dev/null", O_WRONLY)
        if null >= 0 { dup2(null, 1); dup2(null, 2); close(null) }
        // pam_exec writes the password followed by a NUL; by hand it ends with a newline.
        guard let password = try? LineReader.readLine(fd: 0, what: "the password", endsAtNUL: true),
              password.count > 0 else { exit(0) }
        guard becomeAuthenticatedUser() else { exit(0) }
        var arguments = ["_unlock-at-login"]
        if let store { arguments += ["--store", store] }
        if let mountpoint { arguments.append(mountpoint) }
        spawnHelper(arguments: arguments, password: password)
        exit(0)
    }

    /// As root with PAM_USER set, drops to that user for good (groups, gid, uid) and takes its
    /// home and runtime directory, where its keychain and its daemon's socket are. As anyone
    /// else, goes on only for its own login. False when it must not go on.
    static func becomeAuthenticatedUser() -> Bool {
        let env = ProcessInfo.processInfo.environment
        let name = env["PAM_USER"].flatMap { $0.isEmpty ? nil : $0 }
        let entry = name.map { getpwnam($0) } ?? getpwuid(getuid())
        guard let pw = entry?.pointee else { return false }
        let uid = pw.pw_uid, gid = pw.pw_gid
        let home = String(cString: pw.pw_dir), user = String(cString: pw.pw_name)
        if getuid() != uid || geteuid() != uid {
            guard geteuid() == 0 else { return false }
            guard initgroups(pw.pw_name, gid) == 0, setgid(gid) == 0, setuid(uid) == 0,
                  getuid() == uid, geteuid() == uid, getegid() == gid else { return false }
        }
        if name != nil || env["HOME"] == nil {
            setenv("HOME", home, 1)
            setenv("USER", user, 1)
            setenv("LOGNAME", user, 1)
        }
        // The user's own runtime directory, as systemd-logind makes it; else the fallback the
        // daemon uses without one.
        if let runtime = env["XDG_RUNTIME_DIR"], isOwnDirectory(runtime, uid: uid) { return true }
        let runtime = "/run/user/\(uid)"
        if isOwnDirectory(runtime, uid: uid) { setenv("XDG_RUNTIME_DIR", runtime, 1) } else { unsetenv("XDG_RUNTIME_DIR") }
        return true
    }

    private static func isOwnDirectory(_ path: String, uid: uid_t) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0 && st.st_mode & S_IFMT == S_IFDIR && st.st_uid == uid
    }

    /// The helper runs in its own session with no terminal and /dev/null for output; the
    /// password reaches it through a `SecretHandover` channel, never argv, and only once the
    /// helper is non-dumpable (its first act), which takes it a few milliseconds.
    private static func spawnHelper(arguments: [String], password: SecureBytes) {
        guard let (_, channel) = try? SecretHandover.spawn([ChildProcess.ownExecutable] + arguments,
                                                         childFD: passwordFD, newSession: true) else { return }
        password.withUnsafeBytes { _ = SecretHandover.send($0, on: channel) }
        close(channel)
    }
}

/// The helper behind `unlock --pam`; not for users.
struct UnlockAtLoginCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "_unlock-at-login", shouldDisplay: false)

    @OptionGroup var target: MountTarget

    func run() throws {
        // It will hold a password: not dumpable, no core file, before the password is sent.
        guard SecretHandover.reportHardened(on: LoginUnlock.passwordFD) else { return }
        _ = chdir("/")
        guard let password = try? readAll(fd: LoginUnlock.passwordFD), password.count > 0 else { return }
        close(LoginUnlock.passwordFD)
        let deadline = Date().addingTimeInterval(TimeInterval(LoginUnlock.waitSeconds))
        while Date() < deadline {
            if let (_, daemon) = try? target.daemon() {
                if let status = try? daemon.status(), status.state != .unlocked {
                    try? daemon.unlock(passphrase: status.hasPassphrase ? password : nil)
                }
                return
            }
            usleep(250_000)
        }
    }

    private func readAll(fd: Int32) throws -> SecureBytes {
        switch Descriptor.readSecretToEnd(fd, limit: LineReader.maxBytes) {
        case .complete(let password): return password
        case .tooLarge: throw KeychainError.invalidInput("the password is too long")
        case .failed: throw KeychainError.io("cannot read the password")
        }
    }
}
