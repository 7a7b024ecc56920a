import ArgumentParser
import Foundation
import KeychainStore

struct ServiceCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "service",
        abstract: "Install or remove the systemd user service that mounts the keychain at login, locked.",
        discussion: """
            The unit runs 'keychainfs mount --locked --foreground' (Type=notify), so at login the \
            default store is mounted at the configured mountpoint before first unlock; 'keychainfs \
            unlock', or the login password through PAM, unlocks it. It unmounts on stop, restarts \
            after a crash (the stale mount is detached first), and logs to the journal \
            (journalctl --user -u keychainfs).
            """,
        subcommands: [Install.self, Uninstall.self, Show.self])

    struct Install: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write ~/.config/systemd/user/keychainfs.service and enable it.")

        @OptionGroup var storeOptions: StoreOptions

        func run() throws {
            let unit = UserService(store: storeOptions.store)
            try KeychainLocations.makeDirectory(UserService.directory, mode: 0o755)
            let text = unit.text
            do { try Data(text.utf8).write(to: URL(fileURLWithPath: UserService.unitPath), options: .atomic) } catch {
                throw KeychainError.io("cannot write \(UserService.unitPath): \(error.localizedDescription)")
            }
            chmod(UserService.unitPath, 0o644)
            Output.line("wrote \(UserService.unitPath)")
            if UserService.managerReachable {
                try UserService.systemctl(["daemon-reload"])
                try UserService.systemctl(["enable", UserService.name])
                Output.line("enabled \(UserService.name): it mounts the keychain at every login; to mount it now: systemctl --user start keychainfs")
            } else {
                try UserService.linkIntoDefaultTarget()
                Output.line("""
                    enabled \(UserService.name) for your next login (no systemd user manager is reachable from here, so nothing was started).
                    Once logged in under systemd, to mount it at once: systemctl --user daemon-reload && systemctl --user start keychainfs
                    """)
            }
        }
    }

    struct Uninstall: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Stop and disable the service, and remove its unit file.")

        func run() throws {
            var removed: [String] = []
            if UserService.managerReachable {
                // Stopping unmounts the keychain.
                try? UserService.systemctl(["disable", "--now", UserService.name])
            }
            for path in [UserService.wantsLink, UserService.unitPath] {
                var st = stat()
                if lstat(path, &st) == 0 {
                    guard unlink(path) == 0 else {
                        throw KeychainError.io("cannot remove \(path): \(String(cString: strerror(errno)))")
                    }
                    removed.append(path)
                }
            }
            if UserService.managerReachable { try? UserService.systemctl(["daemon-reload"]) }
            if removed.isEmpty {
                Output.line("\(UserService.name) was not installed")
            } else {
                for path in removed { Output.line("removed \(path)") }
            }
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the unit file that 'install' writes.")

        @OptionGroup var storeOptions: StoreOptions

        func run() throws { Output.write(UserService(store: storeOptions.store).text) }
    }
}

/// The systemd user unit that mounts the keychain at login.
struct UserService {
    static let name = "keychainfs.service"
    static var directory: String { KeychainLocations.configHome + "/systemd/user" }
    static var unitPath: String { directory + "/" + name }
    static var wantsLink: String { directory + "/default.target.wants/" + name }

    /// `--store` given to `install`, written into the unit.
    var store: String?
    /// The keychainfs that was run, so the unit runs what was installed: the front passes its
    /// own real path as argv[0] when it runs this tool; run directly, this very binary.
    var executable = PathText.isAbsolute(CommandLine.arguments[0]) ? CommandLine.arguments[0]
        : (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]

    /// Exit statuses after which a restart cannot help: no store, a bad store, a bad
    /// configuration, or the store served by a mount made by hand.
    static let noRestartStatuses: [Int32] = [
        KeychainError.notAKeychain("").exitCode, KeychainError.noSuchStore("").exitCode, 64,
        KeychainError.invalidInput("").exitCode, KeychainError.storeBusy("").exitCode,
    ]

    /// ExecStop's `-`: after a stop signal (`kill`, `systemctl kill`) the daemon has already
    /// unmounted, and a busy mount is stopped by systemd's SIGTERM next, as cleanly; neither
    /// failed `unmount` is a failure for Restart=on-failure to undo.
    var text: String {
        let exe = Self.quoted(executable)
        let storeArgument = store.map { " --store " + Self.quoted(KeychainLocations.absolute($0)) } ?? ""
        // The shell's XDG directories, so that the service finds the same store, device key and configuration.
        let environment = ["XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "KEYCHAINFS_STORE"].compactMap { name in
            ProcessInfo.processInfo.environment[name].flatMap { PathText.isAbsolute($0) ? "Environment=" + Self.quoted("\(name)=\($0)", commandLine: false) + "\n" : nil }
        }.joined()
        return """
            # Written by 'keychainfs service install'; 'keychainfs service uninstall' removes it.
            [Unit]
            Description=keychainfs: the keychain mounted at login, locked until unlocked

            [Service]
            Type=notify
            NotifyAccess=main
            \(environment)ExecStart=\(exe) mount --locked --foreground\(storeArgument)
            ExecStop=-\(exe) unmount\(storeArgument)
            Restart=on-failure
            RestartSec=2
            RestartPreventExitStatus=\(Self.noRestartStatuses.map(String.init).joined(separator: " "))
            TimeoutStopSec=20

            [Install]
            WantedBy=default.target

            """
    }

    /// One word of a systemd command line (or of Environment=, where `$` is not special):
    /// quoted, with `%`, `\`, `"` and on a command line `$` escaped.
    /// Scalar by scalar: a `"` followed by a combining mark is one Swift character with it,
    /// which a loop over characters would leave unescaped, ending the quoted word early.
    static func quoted(_ word: String, commandLine: Bool = true) -> String {
        var out = ""
        for c in word.unicodeScalars {
            switch c {
            case "%": out += "%%"
            case "$" where commandLine: out += "$$"
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            default: out.unicodeScalars.append(c)
            }
        }
        return "\"" + out + "\""
    }

    /// Whether `systemctl --user` reaches a running user manager (it does not under `su`, in a
    /// container without systemd, or over a session without XDG_RUNTIME_DIR).
    static var managerReachable: Bool {
        (try? run(["systemctl", "--user", "show-environment"])) == 0
    }

    static func systemctl(_ arguments: [String]) throws {
        let status = try run(["systemctl", "--user"] + arguments)
        guard status == 0 else {
            throw KeychainError.io("'systemctl --user \(arguments.joined(separator: " "))' failed with status \(status)")
        }
    }

    /// What `systemctl --user enable` does, for when no user manager answers.
    static func linkIntoDefaultTarget() throws {
        let dir = PathText.parent(wantsLink)
        try KeychainLocations.makeDirectory(dir, mode: 0o755)
        unlink(wantsLink)
        guard symlink(unitPath, wantsLink) == 0 else {
            throw KeychainError.io("cannot create \(wantsLink): \(String(cString: strerror(errno)))")
        }
    }

    /// Runs a command from PATH with output discarded (systemctl's own errors go to stderr).
    private static func run(_ argv: [String]) throws -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = argv
        process.standardOutput = FileHandle.nullDevice
        if argv.contains("show-environment") { process.standardError = FileHandle.nullDevice }
        try process.run()
        process.waitUntilExit()
        return process.terminationStatus
    }
}
