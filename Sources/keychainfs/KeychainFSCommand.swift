import ArgumentParser
import Foundation
import KeychainControl
import KeychainStore

@main
struct KeychainFS: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keychainfs",
        abstract: "An encrypted keychain for Linux that can be mounted as a directory.",
        discussion: ExitStatusHelp.text,
        version: ControlProtocol.softwareVersion,
        subcommands: [
            InitCommand.self, PasswdCommand.self,
            AddGenericPassword.self, FindGenericPassword.self, DeleteGenericPassword.self,
            AddInternetPassword.self, FindInternetPassword.self, DeleteInternetPassword.self,
            DumpKeychain.self, VerifyCommand.self, ExportCommand.self, ImportCommand.self,
            MountCommand.self, UnmountCommand.self, LockCommand.self, UnlockCommand.self, StatusCommand.self,
            ServiceCommand.self,
            DaemonCommand.self, UnlockAtLoginCommand.self,
        ]
    )

    /// The one place a `KeychainError` becomes a message and an exit status, whichever
    /// command (this file's or the mount's) threw it.
    static func main() {
        do {
            var command = try parseAsRoot()
            try command.run()
        } catch let error as KeychainError {
            FileHandle.standardError.write(Data("keychainfs: \(error.description)\n".utf8))
            Glibc.exit(error.exitCode)
        } catch {
            exit(withError: error)
        }
    }
}

/// The exit-status table shown by `keychainfs --help`; it comes from `KeychainError`.
enum ExitStatusHelp {
    static var text: String {
        let rows = KeychainError.exitCodeTable.map { row in
            "  " + String(row.code).padding(toLength: 4, withPad: " ", startingAt: 0) + row.meaning
        }
        return """
            The store is $XDG_DATA_HOME/keychainfs/keychain.db unless --store PATH or \
            KEYCHAINFS_STORE names another. While a store is mounted, the item commands act \
            through its daemon and need no passphrase. A passphrase is never taken from the \
            command line: it comes from --passphrase-fd N, --passphrase-file PATH (first line), \
            or the terminal. 'mount' takes its defaults from $XDG_CONFIG_HOME/keychainfs/config.toml \
            (mountpoint, lock-after, default-accessible, allow-root).

            EXIT STATUS
            """ + "\n" + rows.joined(separator: "\n")
    }
}
