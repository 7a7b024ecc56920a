import ArgumentParser
import KeychainControl
import KeychainCrypto
import KeychainModel
import KeychainStore

struct AddGenericPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add-generic-password",
        abstract: "Add a generic password, or update it with -U.",
        discussion: "Without -w the password is read from standard input exactly as sent: no newline is added or stripped.")

    @Option(name: .customShort("s"), help: ArgumentHelp("The service (required, not empty).", valueName: "service"))
    var service = ""
    @Option(name: .customShort("a"), help: ArgumentHelp("The account.", valueName: "account"))
    var account = ""
    @OptionGroup var saving: SaveOptions

    func run() throws {
        try saving.save(ModelInput.parse { ItemKey.generic(try GenericPasswordKey(service: service, account: account)) })
    }
}

struct FindGenericPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "find-generic-password",
        abstract: "Show the first generic password that matches.",
        discussion: """
            Attributes left out match anything. Matches are ordered by service, then account, then \
            access group; the first one is shown. With -w only its password is written, as its exact \
            bytes with no newline added, so binary passwords round-trip.
            """)

    @OptionGroup var match: GenericMatchOptions
    @Flag(name: .customShort("w"), help: "Write only the password.")
    var printPassword = false
    @OptionGroup var storeOptions: StoreOptions
    @OptionGroup var passphrase: PassphraseOptions

    func run() throws {
        try ItemPrinter.printFirstMatch(of: match.query, in: storeOptions, passphrase: passphrase, secretOnly: printPassword)
    }
}

struct DeleteGenericPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete-generic-password",
        abstract: "Delete every generic password that matches, and say how many.")

    @OptionGroup var match: GenericMatchOptions
    @OptionGroup var storeOptions: StoreOptions
    @OptionGroup var passphrase: PassphraseOptions

    func run() throws {
        try storeOptions.deleteMatches(match.query, passphrase)
    }
}

/// What both add commands take besides the key: the secret, -U, the attributes, the store.
struct SaveOptions: ParsableArguments {
    @Option(name: .customShort("w"), help: ArgumentHelp("The password (else standard input).", valueName: "password"))
    var password: String?
    @Flag(name: .customShort("U"), help: "Update the item if it exists (otherwise a duplicate is an error).")
    var update = false
    @OptionGroup var attributes: AttributeOptions
    @OptionGroup var storeOptions: StoreOptions
    @OptionGroup var passphrase: PassphraseOptions

    func save(_ key: ItemKey) throws {
        let changes = try attributes.changes()
        // Connected first, so that --passphrase-fd 0 can take the first line of standard input
        // and leave the rest for the secret.
        let keychain = try storeOptions.connect(passphrase)
        let secret = try password.map { SecureBytes(copying: $0.utf8) } ?? SecretInput.read()
        _ = try keychain.save(key: key, secret: secret, changes: changes, updateExisting: update)
    }
}

extension StoreOptions {
    /// Deletes every match and says how many.
    func deleteMatches(_ query: ItemQuery, _ passphrase: PassphraseOptions) throws {
        let count = try connect(passphrase).delete(query: query)
        Output.line("deleted \(count) item\(count == 1 ? "" : "s")")
    }
}

/// `-s` and `-a` of find and delete; left out, they match anything.
struct GenericMatchOptions: ParsableArguments {
    @Option(name: .customShort("s"), help: ArgumentHelp("Match this service.", valueName: "service"))
    var service: String?
    @Option(name: .customShort("a"), help: ArgumentHelp("Match this account.", valueName: "account"))
    var account: String?

    var query: ItemQuery { ItemQuery(kind: .generic, account: account, service: service) }
}
