import ArgumentParser
import Foundation
import KeychainModel
import KeychainStore

/// The attribute flags of the add commands, as in macOS `security`.
struct AttributeOptions: ParsableArguments {
    @Option(name: [.customShort("l"), .long], help: "The item's label.")
    var label: String?

    @Option(name: [.customShort("j"), .long], help: "A comment.")
    var comment: String?

    @Option(name: [.customShort("D"), .customLong("description")], help: "The kind of item (its description).")
    var kindDescription: String?

    @Option(name: [.customShort("G"), .long], help: "The generic attribute (stored as its UTF-8 bytes).")
    var generic: String?

    @Option(name: [.customShort("c"), .long], help: ArgumentHelp("The creator: a four-character code.", valueName: "code"))
    var creator: String?

    @Option(name: [.customShort("C"), .long], help: ArgumentHelp("The type: a four-character code.", valueName: "code"))
    var type: String?

    @Option(name: .long, help: ArgumentHelp(
        "When the secret may be read: \(AccessibilityClass.allCases.map(\.rawValue).joined(separator: ", ")). Default: when-unlocked.",
        valueName: "class"), completion: .accessibilityClasses)
    var accessible: String?

    /// Bad values are `invalidInput` (exit 65), not usage errors, as for every name.
    func changes() throws -> AttributeChanges {
        try ModelInput.parse {
            AttributeChanges(label: label, comment: comment, description: kindDescription,
                             generic: generic.map { Data($0.utf8) },
                             creator: try creator.map { try FourCharCode($0) },
                             type: try type.map { try FourCharCode($0) },
                             accessible: try accessible.map { try AccessibilityClass(parsing: $0) })
        }
    }
}

/// The attribute filters of find and delete, as in macOS `security`: an item matches only
/// if it has the attribute, with exactly that value.
struct AttributeFilterOptions: ParsableArguments {
    @Option(name: [.customShort("l"), .long], help: "Match this label.")
    var label: String?

    @Option(name: [.customShort("j"), .long], help: "Match this comment.")
    var comment: String?

    @Option(name: [.customShort("D"), .customLong("description")], help: "Match this kind (description).")
    var kindDescription: String?

    @Option(name: [.customShort("G"), .long], help: "Match this generic attribute (its UTF-8 bytes).")
    var generic: String?

    @Option(name: [.customShort("c"), .long], help: ArgumentHelp("Match this creator code.", valueName: "code"))
    var creator: String?

    @Option(name: [.customShort("C"), .long], help: ArgumentHelp("Match this type code.", valueName: "code"))
    var type: String?

    func apply(to query: ItemQuery) throws -> ItemQuery {
        var q = query
        q.label = label; q.comment = comment; q.description = kindDescription
        q.generic = generic.map { Data($0.utf8) }
        q.creator = try creator.map { c in try ModelInput.parse { try FourCharCode(c) } }
        q.type = try type.map { t in try ModelInput.parse { try FourCharCode(t) } }
        return q
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
