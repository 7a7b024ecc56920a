import ArgumentParser
import Foundation
import KeychainControl
import KeychainCrypto
import KeychainModel
import KeychainStore

/// `-w`'s value: a password, or, given as the last argument with none, a request to be asked.
enum PasswordArgument: ExpressibleByArgument, CustomStringConvertible {
    case value(String)
    case prompt

    init?(argument: String) { self = .value(argument) }

    /// Shown by --help as what a bare -w means; never the password itself.
    var description: String {
        switch self {
        case .prompt: "ask at the terminal"
        case .value: "given"
        }
    }
}

/// What both add commands take besides the key: the secret, -U, the attributes, the store.
struct SaveOptions: ParsableArguments {
    @Option(name: .customShort("w"), defaultAsFlag: PasswordArgument.prompt, parsing: .next, help: ArgumentHelp(
        "The password; with no value (as the last argument), ask at the terminal. Visible to other users in the process list: prefer standard input.",
        valueName: "password"))
    var password: PasswordArgument?
    @Option(name: .customShort("X"), help: ArgumentHelp("The password as hexadecimal bytes (binary passwords).", valueName: "hex"))
    var hexPassword: String?
    @Flag(name: .customShort("U"), help: "Update the item if it exists (otherwise a duplicate is an error).")
    var update = false
    @OptionGroup var attributes: AttributeOptions
    @OptionGroup var storeOptions: StoreOptions
    @OptionGroup var passphrase: PassphraseOptions

    func validate() throws {
        if password != nil && hexPassword != nil { throw ValidationError("give either -w or -X, not both") }
    }

    func save(_ key: ItemKey) throws {
        let changes = try attributes.changes()
        let hex = try hexPassword.map(HexInput.decode)
        // Connected first, so that --passphrase-fd 0 can take the first line of standard input
        // and leave the rest for the secret.
        let keychain = try storeOptions.connect(passphrase)
        let secret: SecureBytes
        switch password {
        case .value(let text): secret = SecureBytes(copying: text.utf8)
        case .prompt: secret = try SecretInput.read(preferTerminal: true)
        case nil: secret = try hex ?? SecretInput.read(preferTerminal: false)
        }
        _ = try keychain.save(key: key, secret: secret, changes: changes, updateExisting: update)
    }
}

enum HexInput {
    /// Pairs of hex digits, either case; an optional `0x` in front.
    static func decode(_ text: String) throws -> SecureBytes {
        var digits = Array(text.utf8)
        if digits.count >= 2 && digits[0] == UInt8(ascii: "0") && (digits[1] | 0x20) == UInt8(ascii: "x") {
            digits.removeFirst(2)
        }
        defer { for i in digits.indices { digits[i] = 0 } }
        guard digits.count % 2 == 0 else {
            throw KeychainError.invalidInput("-X takes pairs of hexadecimal digits; got an odd number of them")
        }
        func value(_ c: UInt8) -> UInt8? {
            switch c {
            case 48...57: c - 48
            case 65...70: c - 55
            case 97...102: c - 87
            default: nil
            }
        }
        let out = SecureBytes(count: digits.count / 2)
        try out.withUnsafeMutableBytes { dst in
            for i in 0..<dst.count {
                guard let hi = value(digits[2 * i]), let lo = value(digits[2 * i + 1]) else {
                    // The value is the secret: the message does not repeat it.
                    throw KeychainError.invalidInput("-X takes hexadecimal digits (0-9, a-f, A-F) only")
                }
                dst[i] = hi << 4 | lo
            }
        }
        guard out.count <= maxSecretBytes else { throw KeychainError.secretTooLarge(out.count) }
        return out
    }
}

/// -w and -g of the find commands.
struct FindOutputOptions: ParsableArguments {
    @Flag(name: .customShort("w"), help: "Write only the password (its exact bytes, no newline).")
    var passwordOnly = false
    @Flag(name: .customShort("g"), help: "Also write the password to standard error, after the attributes, as macOS does.")
    var showPassword = false

    var needsSecret: Bool { passwordOnly || showPassword }
}

/// --all and --yes of the delete commands, and the deletion itself.
struct DeleteOptions: ParsableArguments {
    @Flag(help: "Delete every match, not only the first.")
    var all = false
    @Flag(help: "With --all and no filter: delete every item of the kind without asking.")
    var yes = false

    func validate() throws {
        if yes && !all { throw ValidationError("--yes only confirms --all") }
    }

    /// Deletes the first match (or with --all every match), then writes what it deleted.
    func delete(_ query: ItemQuery, what: String, _ store: StoreOptions, _ passphrase: PassphraseOptions) throws {
        let wipesEverything = all && query.isUnfiltered && !yes
        // Known before the passphrase is asked: without a terminal there is nobody to confirm.
        let terminal = wipesEverything
            ? try? Terminal.open(purpose: "confirm", alternatives: "--yes") : nil
        if wipesEverything && terminal == nil {
            throw UsageError("--all with no filter deletes every \(what); add --yes to confirm (there is no terminal to ask on)")
        }
        let service = try store.connect(passphrase)
        if let terminal {
            let count = try service.find(query: query, withSecrets: false).count
            guard count > 0 else { throw KeychainError.itemNotFound }
            let answer = try terminal.ask("Delete all \(count) \(what)\(count == 1 ? "" : "s") in \(store.path)? [y/N] ").lowercased()
            guard answer == "y" || answer == "yes" else {
                Output.error("keychainfs: nothing was deleted")
                throw ExitCode.failure
            }
        }
        let deleted = try service.delete(query: query, all: all)
        Output.write(deleted.map { record in
            ItemPrinter.lines(for: record, itemID: nil, storePath: store.path).joined(separator: "\n") + "\n"
        }.joined(separator: "\n"))
        Output.error("deleted \(deleted.count) item\(deleted.count == 1 ? "" : "s")")
    }
}

/// What the item commands do differently from macOS `security`, for their --help.
enum MacOSDifferences {
    private static let header = "\n\nUnlike macOS security: "
    private static let ports = """
        port 0 (or no -P) means the protocol's well-known port when adding, so an https item \
        is stored with port 443, and matches any port when searching (with -r, -P 0 matches \
        that protocol's well-known port)
        """
    private static let add = """
        -w with a value is not needed (without -w or -X, standard input is read exactly); \
        -T pins a program by its file and the prompt is pinentry, not a system dialog; \
        --store, not an argument, chooses the keychain.
        """
    private static let find = """
        -w writes the password's exact bytes with no newline after them (macOS adds a newline \
        and shows a binary password as hex); the attributes are 'name: value' lines, not \
        macOS's raw attribute dump.
        """
    private static let delete = """
        --all deletes every match (macOS deletes only the first); the attributes of what was \
        deleted go to standard output and "deleted N items" to standard error.
        """

    static let addGeneric = header + add
    static let addInternet = header + "the protocol defaults to https (macOS leaves it unset); " + ports + "; " + add
    static let findGeneric = header + find
    static let findInternet = header + ports + "; " + find
    static let deleteGeneric = header + delete
    static let deleteInternet = header + ports + "; " + delete
}
