import ArgumentParser
import Foundation
import KeychainAccess
import KeychainClient
import KeychainControl
import KeychainModel
import KeychainStore

/// `keychainfs access log`: what the per-program gate decided (issue 17).
struct AccessCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "access",
        abstract: "Per-program access: what the daemon refused, asked and allowed, and changing an item's list.",
        subcommands: [AccessLogCommand.self, AccessSetGeneric.self, AccessSetInternet.self])
}

struct AccessLogCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "log",
        abstract: "Show the access log: each refusal and each prompt's answer, oldest first.",
        discussion: """
            Each entry names the time, the program, its pid and command line, the item, the \
            operation and the decision with its reason; a refusal also shows the one command \
            that would allow it. The log is $XDG_STATE_HOME/keychainfs/access.log (JSON lines).
            """)

    @Flag(help: "One JSON object per line.") var json = false

    func run() throws {
        let (entries, unreadable) = try AccessLog.read(AccessLog.defaultPath)
        Output.write(AccessLog.render(entries, json: json))
        if unreadable > 0 {
            FileHandle.standardError.write(Data("keychainfs: \(unreadable) line\(unreadable == 1 ? "" : "s") of \(AccessLog.defaultPath) could not be read\n".utf8))
        }
    }
}

private let setDiscussion = """
    Replaces the item's whole list: -T PROGRAM for each program that may use it (repeatable; \
    pinned by its file as it is now, while a program already on the list keeps the file it was \
    allowed with, unless named with --repin), or -A for any program. The store's passphrase vouches for the change, also \
    when a daemon serves the store: no program on the list is needed, so this is how a refused \
    program is let in with no prompt configured (the command 'keychainfs access log' shows). \
    A wrong passphrase counts as a failed unlock. The secret is not touched.
    """

struct AccessSetGeneric: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "set-generic",
        abstract: "Set a generic password's access list; the store's passphrase vouches for it.",
        discussion: setDiscussion)

    @OptionGroup var item: GenericKeyOptions
    @OptionGroup var change: AccessListChange

    func run() throws { try change.apply(to: try item.key()) }
}

struct AccessSetInternet: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "set-internet",
        abstract: "Set an internet password's access list; the store's passphrase vouches for it.",
        discussion: setDiscussion + " The item is named as by add-internet-password: protocol https and its well-known port when left out.")

    @OptionGroup var item: InternetKeyOptions
    @OptionGroup var change: AccessListChange

    func run() throws { try change.apply(to: try item.key()) }
}

/// The new list of `access set-*`, and the change itself.
struct AccessListChange: ParsableArguments {
    @OptionGroup var access: AccessListFlags
    @Option(name: .customLong("repin"), help: ArgumentHelp(
        "A program of the -T list to pin anew, as its file is now, though it was listed before (repeatable): one upgraded or rebuilt since.",
        valueName: "program"))
    var repin: [String] = []
    @OptionGroup var storeOptions: StoreOptions
    @OptionGroup var passphrase: PassphraseOptions

    func validate() throws {
        if !access.isGiven { throw ValidationError("give the new list: -T PROGRAM (repeatable), or -A for any program") }
    }

    func apply(to key: ItemKey) throws {
        // Pinned before the passphrase is asked: a program that cannot be read fails first.
        let list = try access.list() ?? .anyProgram
        let again = try repin.map { try AccessProgram(parsing: $0) }
        for p in again where !list.rules.contains(where: { $0.program == p }) {
            throw KeychainError.invalidInput("--repin \(p): it is not among the -T programs")
        }
        let path = storeOptions.path
        // No passphrase to vouch: say so, and what can change the list, before asking for one.
        if try !Self.hasPassphrase(path) {
            throw KeychainError.invalidInput("\(path) has no passphrase (it is protected by the device key only), so none "
                + "can vouch for this change: change the list with a program on it (setfattr -n user.keychain.access), "
                + "through the prompt's Always allow, or give the store a passphrase first ('keychainfs passwd --add')")
        }
        // Asked on either route: a daemon needs no passphrase to serve, but this change does.
        _ = try passphrase.withRetries(prompt: "Passphrase for \(path): ") { read in
            let given = try read()
            defer { given.wipe() }
            let service = try KeychainEndpoint.connect(storePath: path, defaultClass: StoreOptions.configuredDefaultClass,
                                                       defaultSynchronizable: StoreOptions.configuredDefaultSynchronizable,
                                                       passphraseSource: { given.copy() })
            return try service.setAccess(key: key, list: list, repin: again, passphrase: given.copy())
        }
    }

    /// Read from the daemon serving the store, else from the store itself (read-only, under its lease).
    private static func hasPassphrase(_ path: String) throws -> Bool {
        switch try DaemonLocator.route(forStore: path) {
        case .daemon(let service, _): return try service.status().hasPassphrase
        case .direct(let lease): return try withExtendedLifetime(lease) { try StoreProbe(readingAt: path).hasPassphrase }
        }
    }
}
