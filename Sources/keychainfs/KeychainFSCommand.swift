import ArgumentParser
import Foundation
import KeychainAccess
import KeychainConfig
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
            SetKeychainSettingsCommand.self, ServiceCommand.self,
            DaemonCommand.self, UnlockAtLoginCommand.self, AccessCommand.self, SyncCommand.self,
        ]
    )

    /// The one place a `KeychainError` becomes a message and an exit status, whichever
    /// command (this file's or the mount's) threw it.
    static func main() {
        InheritedDescriptors.note()
        if let position = CommandArguments.firstNotUTF8() {
            FileHandle.standardError.write(Data("keychainfs: \(CommandArguments.notUTF8Message(position))\n".utf8))
            Glibc.exit(KeychainError.invalidInput("").exitCode)
        }
        if let name = CommandArguments.firstVariableNotUTF8() {
            FileHandle.standardError.write(Data("keychainfs: \(CommandArguments.variableNotUTF8Message(name))\n".utf8))
            Glibc.exit(KeychainError.invalidInput("").exitCode)
        }
        do {
            var command = try parseAsRoot()
            // A command may open the store itself, a program like any other to the items'
            // access lists: known now, before reading a passphrase or the store hardens it.
            if !(command is DaemonCommand) { ThisProcess.identify() }
            try command.run()
        } catch let error as KeychainError {
            FileHandle.standardError.write(Data("keychainfs: \(message(for: error))\n".utf8))
            Glibc.exit(error.exitCode)
        } catch let error as UsageError {
            FileHandle.standardError.write(Data("keychainfs: \(error.message)\n".utf8))
            Glibc.exit(ExitCode.validationFailure.rawValue)
        } catch {
            exit(withError: error)
        }
    }
}

/// A usage error found while a command runs (after parsing): exit 64 with one line, without
/// the usage text of the root command that ArgumentParser would print at that point.
struct UsageError: Error {
    var message: String
    init(_ message: String) { self.message = message }
}

extension KeychainFS {
    /// The error's own text, plus the next step where there is an obvious one.
    /// The locked error already says to unlock; a missing device key is the one case where
    /// unlocking does not help.
    static func message(for error: KeychainError) -> String {
        guard case .unavailable(let name) = error, let c = AccessibilityClass(rawValue: name), c.isThisDeviceOnly,
              !FileManager.default.fileExists(atPath: KeychainLocations.deviceKey) else { return error.description }
        return "Required key not available: '\(name)' items need this machine's device key, "
            + "which is missing at \(KeychainLocations.deviceKey)."
    }
}

/// The exit-status table shown by `keychainfs --help`; it comes from `KeychainError`.
enum ExitStatusHelp {
    static var text: String {
        // Padded by hand: NSString's padding, on every run of every command (ArgumentParser
        // builds the configuration to parse), brought CoreFoundation's string code into the daemon.
        let rows = KeychainError.exitCodeTable.map { row in
            let code = String(row.code)
            return "  " + code + String(repeating: " ", count: max(0, 4 - code.count)) + row.meaning
        }
        return """
            The store is $XDG_DATA_HOME/keychainfs/keychain.db unless --store PATH or \
            KEYCHAINFS_STORE names another. While a store is mounted, the item commands act \
            through its daemon and need no passphrase. A passphrase is never taken from the \
            command line: it comes from --passphrase-fd N, --passphrase-file PATH (first line), \
            or the terminal. 'mount' takes its defaults from $XDG_CONFIG_HOME/keychainfs/config.toml \
            (keys: \(KeychainConfig.keys.joined(separator: ", "))).

            EXIT STATUS
            """ + "\n" + rows.joined(separator: "\n")
    }
}
