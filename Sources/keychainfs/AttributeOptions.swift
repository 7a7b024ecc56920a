import ArgumentParser
import Foundation
import KeychainAccess
import KeychainModel
import KeychainStore

/// The attribute flags of the add commands, as in macOS `security`, and the class.
struct AttributeOptions: ParsableArguments {
    @OptionGroup var flags: AttributeFlags<SettingAttributes>

    @Option(name: .long, help: ArgumentHelp(
        "When the secret may be read: \(AccessibilityClass.allCases.map(\.rawValue).joined(separator: ", ")). Default: when-unlocked.",
        valueName: "class"), completion: .accessibilityClasses)
    var accessible: String?

    @OptionGroup var access: AccessListFlags

    @Flag(inversion: .prefixedNo, help: ArgumentHelp(
        "Whether the item travels to your other devices through the sync folder (default: config.toml's default-synchronizable, else no). Never for a this-device-only class (exit 78)."))
    var synchronizable: Bool?

    /// Bad values are `invalidInput` (exit 65), not usage errors, as for every name.
    func changes() throws -> AttributeChanges {
        var values = try flags.values()
        if let list = try access.list() { values.access = list }
        if let synchronizable { values.synchronizable = synchronizable }
        return AttributeChanges(values, accessible: try accessible.map { a in try ModelInput.parse { try AccessibilityClass(parsing: a) } })
    }
}

/// `-T` and `-A`: an item's whole access list, on the add commands (with -U it replaces the
/// item's) and on `access set-*`.
struct AccessListFlags: ParsableArguments {
    @Option(name: .customShort("T"), help: ArgumentHelp(
        "A program that may use the item without a prompt (repeatable): an absolute path, an interpreter and its script ('/usr/bin/python3 /home/me/sync.py'), or flatpak:APP-ID. Each is pinned by its file as it is now. The programs given replace the item's list.",
        valueName: "program"))
    var trusted: [String] = []

    @Flag(name: .customShort("A"), help: "Any program of the user may use the item (an empty access list, the default); clears the item's list.")
    var anyProgram = false

    var isGiven: Bool { anyProgram || !trusted.isEmpty }

    /// The list given, each program pinned now; nil when neither flag is.
    func list() throws -> AccessList? {
        if anyProgram && !trusted.isEmpty { throw KeychainError.invalidInput("-A (any program) and -T (these programs) exclude each other") }
        if anyProgram { return .anyProgram }
        if trusted.isEmpty { return nil }
        return try AccessList.anyProgram.setting(try trusted.map { try AccessProgram(parsing: $0) })
    }
}

/// The attribute filters of find and delete, as in macOS `security`: an item matches only
/// if it has the attribute, with exactly that value.
struct AttributeFilterOptions: ParsableArguments {
    @OptionGroup var flags: AttributeFlags<MatchingAttributes>

    func apply(to query: ItemQuery) throws -> ItemQuery {
        var q = query
        q.attributes = try flags.values()
        return q
    }
}

/// What an attribute flag does, for its help: set the attribute, or match it.
protocol AttributeFlagRole { static func help(_ attribute: ItemAttribute) -> String }
enum SettingAttributes: AttributeFlagRole { static func help(_ a: ItemAttribute) -> String { a.setHelp } }
enum MatchingAttributes: AttributeFlagRole { static func help(_ a: ItemAttribute) -> String { a.matchHelp } }

/// One option per row of `ItemAttribute.all`, named and described by its row. ArgumentParser
/// finds options only among declared properties, so each row has one here, named as the row
/// (`ItemAttribute.name`); `values()` reads them by that name, and `AttributeTableTests` fails
/// for a row without its property.
struct AttributeFlags<Role: AttributeFlagRole>: ParsableArguments {
    @Option(name: Self.names("label"), help: Self.help("label")) var label: String?
    @Option(name: Self.names("comment"), help: Self.help("comment")) var comment: String?
    @Option(name: Self.names("description"), help: Self.help("description")) var description: String?
    @Option(name: Self.names("generic"), help: Self.help("generic")) var generic: String?
    @Option(name: Self.names("creator"), help: Self.help("creator")) var creator: String?
    @Option(name: Self.names("type"), help: Self.help("type")) var type: String?

    /// The values given, each parsed as its row's kind (a code must be four characters).
    func values() throws -> AttributeValues {
        var values = AttributeValues()
        for (attribute, text) in given {
            values[attribute] = try ModelInput.parse { try attribute.value(parsing: text) }
        }
        return values
    }

    /// The attribute options and what was given for them, found by property name.
    var given: [(ItemAttribute, String)] {
        Mirror(reflecting: self).children.compactMap { child in
            guard let name = child.label?.dropFirst(), let attribute = ItemAttribute.named(String(name)),
                  let text = (child.value as? Option<String?>)?.wrappedValue else { return nil }
            return (attribute, text)
        }
    }

    /// The options declared for rows, by name (set or not): what the test compares with the table.
    static var declared: [String] {
        Mirror(reflecting: Self()).children.compactMap { child in
            guard child.value is Option<String?>, let name = child.label?.dropFirst() else { return nil }
            return String(name)
        }
    }

    private static func row(_ name: String) -> ItemAttribute {
        guard let row = ItemAttribute.named(name) else { preconditionFailure("no attribute '\(name)' in ItemAttribute.all") }
        return row
    }

    private static func names(_ name: String) -> NameSpecification {
        guard let short = row(name).cliShort else { preconditionFailure("'\(name)' has no flag of its own") }
        return [.customShort(short), .customLong(row(name).cliLong)]
    }

    private static func help(_ name: String) -> ArgumentHelp {
        let row = row(name)
        return ArgumentHelp(Role.help(row), valueName: row.kind == .code ? "code" : nil)
    }
}

extension CompletionKind {
    static var accessibilityClasses: CompletionKind { .list(AccessibilityClass.allCases.map(\.rawValue)) }
    static var protocols: CompletionKind { .list(InternetProtocol.knownNames) }
    static var authenticationTypes: CompletionKind { .list(AuthenticationType.knownNames) }
}

/// Turns the item model's errors into the keychain's, so they get its exit codes.
enum ModelInput {
    static func parse<T>(_ body: () throws -> T) throws -> T {
        do { return try body() } catch let error as ModelError { throw KeychainError(error) }
    }

    static func port(_ text: String?) throws -> UInt16? {
        try text.map { t in try parse { try InternetPort.parse(t, allowUnspecified: true) } }
    }

    static func `protocol`(_ text: String?) throws -> InternetProtocol? {
        try text.map { t in try parse { try InternetProtocol(parsing: t) } }
    }

    static func authenticationType(_ text: String?) throws -> AuthenticationType? {
        try text.map { t in try parse { try AuthenticationType(parsing: t) } }
    }
}
