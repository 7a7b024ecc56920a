import ArgumentParser
import KeychainControl
import KeychainCrypto
import KeychainModel
import KeychainStore

private let protocolHelp = "A name (\(InternetProtocol.knownNames.joined(separator: ", "))) or a four-character code."
private let authenticationHelp = "A name (\(AuthenticationType.knownNames.joined(separator: ", "))) or a four-character code."

/// The attributes that make up an internet password's primary key, all optional for matching.
struct InternetKeyOptions: ParsableArguments {
    @Option(name: .customShort("s"), help: ArgumentHelp("The server.", valueName: "server"))
    var server: String?
    // Unconditional: `-P -1` is a bad port, not a missing value followed by an option `-1`.
    @Option(name: .customShort("P"), parsing: .unconditional,
            help: ArgumentHelp("The port, 1-65535 (0: the protocol's well-known port).", valueName: "port"))
    var port: String?
    @Option(name: .customShort("p"), help: ArgumentHelp("The path.", valueName: "path"))
    var path: String?
    @Option(name: .customShort("r"), help: ArgumentHelp("The protocol. " + protocolHelp, valueName: "protocol"),
            completion: .protocols)
    var proto: String?
    @Option(name: .customShort("t"), help: ArgumentHelp("The authentication type. " + authenticationHelp, valueName: "type"),
            completion: .authenticationTypes)
    var authenticationType: String?
    @Option(name: .customShort("d"), help: ArgumentHelp("The security domain.", valueName: "domain"))
    var securityDomain: String?
    @Option(name: .customShort("a"), help: ArgumentHelp("The account.", valueName: "account"))
    var account: String?

    /// The key of a new item: protocol https, the protocol's port, empty path and domain,
    /// default authentication type where left out.
    func key() throws -> ItemKey {
        let port = try ModelInput.port(port) ?? 0
        let proto = try ModelInput.protocol(proto) ?? .https
        let auth = try ModelInput.authenticationType(authenticationType) ?? .default
        return try ModelInput.parse {
            .internet(try InternetPasswordKey(server: server ?? "", port: port, path: path ?? "", protocol: proto,
                                              authenticationType: auth, securityDomain: securityDomain ?? "",
                                              account: account ?? ""))
        }
    }

    func query() throws -> ItemQuery {
        ItemQuery(kind: .internet, account: account, server: server, port: try ModelInput.port(port), path: path,
                  protocol: try ModelInput.protocol(proto),
                  authenticationType: try ModelInput.authenticationType(authenticationType),
                  securityDomain: securityDomain)
    }
}

struct AddInternetPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add-internet-password",
        abstract: "Add an internet password, or update it with -U.",
        discussion: """
            Left out: protocol https, port 0 (the protocol's well-known port), path "", \
            authentication type default, security domain "". The password comes from -w PASSWORD, \
            -X HEX, or standard input, read exactly as sent: no newline is added or stripped. -w as \
            the last argument asks for it at the terminal (twice, without echo). -w PASSWORD is \
            visible to other users in the process list; standard input is the safe way in scripts.
            """ + MacOSDifferences.addInternet)

    @OptionGroup var keyOptions: InternetKeyOptions
    @OptionGroup var saving: SaveOptions

    func run() throws { try saving.save(keyOptions.key()) }
}

struct FindInternetPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "find-internet-password",
        abstract: "Show the first internet password that matches.",
        discussion: """
            Attributes left out match anything. Matches are ordered by server, port, path, account, \
            protocol, authentication type, security domain; the first one is shown. With -w only its \
            password is written, as its exact bytes with no newline added. With -g the password \
            follows the attributes on standard error, as macOS prints it.
            """ + MacOSDifferences.findInternet)

    @OptionGroup var keyOptions: InternetKeyOptions
    @OptionGroup var filters: AttributeFilterOptions
    @OptionGroup var output: FindOutputOptions
    @OptionGroup var storeOptions: StoreOptions
    @OptionGroup var passphrase: PassphraseOptions

    func run() throws {
        try ItemPrinter.printFirstMatch(of: filters.apply(to: keyOptions.query()), in: storeOptions,
                                        passphrase: passphrase, output: output)
    }
}

struct DeleteInternetPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete-internet-password",
        abstract: "Delete the first internet password that matches (every match with --all).",
        discussion: """
            Matches are ordered as by find-internet-password, so the item deleted is the one it \
            shows. The attributes of what was deleted are written to standard output. --all deletes \
            every match; --all with no filter at all (every internet password) needs --yes, or a \
            "y" at the terminal.
            """ + MacOSDifferences.deleteInternet)

    @OptionGroup var keyOptions: InternetKeyOptions
    @OptionGroup var filters: AttributeFilterOptions
    @OptionGroup var deleting: DeleteOptions
    @OptionGroup var storeOptions: StoreOptions
    @OptionGroup var passphrase: PassphraseOptions

    func run() throws {
        try deleting.delete(filters.apply(to: keyOptions.query()), what: "internet password", storeOptions, passphrase)
    }
}
