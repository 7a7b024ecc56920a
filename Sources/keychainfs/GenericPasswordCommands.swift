import ArgumentParser
import KeychainControl
import KeychainCrypto
import KeychainModel
import KeychainStore

struct AddGenericPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add-generic-password",
        abstract: "Add a generic password, or update it with -U.",
        discussion: """
            The password comes from -w PASSWORD, -X HEX, or standard input, read exactly as sent: \
            no newline is added or stripped. -w as the last argument asks for it at the terminal \
            (twice, without echo). -w PASSWORD is visible to other users in the process list; \
            standard input is the safe way in scripts: printf '%s' "$pw" | keychainfs add-generic-password -s S -a A
            """ + MacOSDifferences.addGeneric)

    @OptionGroup var item: GenericKeyOptions
    @OptionGroup var saving: SaveOptions

    func run() throws { try saving.save(try item.key()) }
}

/// `-s` and `-a` naming one generic password (add, and `access set-generic`).
struct GenericKeyOptions: ParsableArguments {
    @Option(name: .customShort("s"), help: ArgumentHelp("The service (required, not empty).", valueName: "service"))
    var service = ""
    @Option(name: .customShort("a"), help: ArgumentHelp("The account.", valueName: "account"))
    var account = ""

    func key() throws -> ItemKey {
        try ModelInput.parse { ItemKey.generic(try GenericPasswordKey(service: service, account: account)) }
    }
}

struct FindGenericPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "find-generic-password",
        abstract: "Show the first generic password that matches.",
        discussion: """
            Attributes left out match anything. Matches are ordered by service, then account, then \
            access group; the first one is shown. With -w only its password is written, as its exact \
            bytes with no newline added, so binary passwords round-trip. With -g the password follows \
            the attributes on standard error, as macOS prints it.
            """ + MacOSDifferences.findGeneric)

    @OptionGroup var match: GenericMatchOptions
    @OptionGroup var filters: AttributeFilterOptions
    @OptionGroup var output: FindOutputOptions
    @OptionGroup var storeOptions: StoreOptions
    @OptionGroup var passphrase: PassphraseOptions

    func run() throws {
        try ItemPrinter.printFirstMatch(of: filters.apply(to: match.query), in: storeOptions, passphrase: passphrase,
                                        output: output)
    }
}

struct DeleteGenericPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete-generic-password",
        abstract: "Delete the first generic password that matches (every match with --all).",
        discussion: """
            Matches are ordered as by find-generic-password, so the item deleted is the one it shows. \
            The attributes of what was deleted are written to standard output. --all deletes every \
            match; --all with no filter at all (every generic password) needs --yes, or a "y" at the \
            terminal.
            """ + MacOSDifferences.deleteGeneric)

    @OptionGroup var match: GenericMatchOptions
    @OptionGroup var filters: AttributeFilterOptions
    @OptionGroup var deleting: DeleteOptions
    @OptionGroup var storeOptions: StoreOptions
    @OptionGroup var passphrase: PassphraseOptions

    func run() throws {
        try deleting.delete(filters.apply(to: match.query), what: "generic password", storeOptions, passphrase)
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
