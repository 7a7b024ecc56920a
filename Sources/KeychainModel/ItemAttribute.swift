// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif

/// The attributes a user sets on an item, each optional. Every one of them has its row in
/// `ItemAttribute.all`, which every channel (store, wire, backup, xattrs, CLI, printer, JSON)
/// walks; Swift cannot declare a stored property from a table, so the property and its row
/// stand together here, and `AttributeTableTests` fails if one lacks the other.
///
/// Not here, on purpose: the protocol, authentication type and security domain are part of an
/// internet item's key (changing them renames the item), and the class, created and modified
/// dates are not set freely (the class picks the key that seals the item and is not optional;
/// the dates are kept by the store).
public struct AttributeValues: Hashable, Codable, Sendable {
    /// `kSecAttrLabel`: the name a person reads.
    public var label: String?
    /// `kSecAttrComment`.
    public var comment: String?
    /// `kSecAttrDescription`: what kind of item it is.
    public var description: String?
    /// `kSecAttrGeneric`: bytes for the program that stored the item.
    public var generic: Data?
    /// `kSecAttrCreator`.
    public var creator: FourCharCode?
    /// `kSecAttrType`.
    public var type: FourCharCode?
    /// The programs that may use the item (`-T`, `user.keychain.access`; issue 17). Not set, or
    /// empty, is any program of the user. Sealed with the other attributes.
    package var access: AccessList?
    /// `kSecAttrSynchronizable`: the item travels to the user's other devices through the sync
    /// folder (issue 20). Not set is no. Never yes on a this-device-only item (`ItemAttributes.checkSynchronizable`).
    public var synchronizable: Bool?

    /// No attribute set.
    public init() {}

    /// Values set by `build`: `AttributeValues { $0.label = "work" }`.
    public init(_ build: (inout AttributeValues) throws -> Void) rethrows { try build(&self) }

    /// The attribute's value, by its row in the table; nil is not set.
    package subscript(attribute: ItemAttribute) -> AttributeValue? {
        get { attribute.value(in: self) }
        set { attribute.set(newValue, in: &self) }
    }

    /// Every value set here is set in `other` to the same value.
    package func isContained(in other: AttributeValues) -> Bool {
        ItemAttribute.all.allSatisfy { a in self[a].map { $0 == other[a] } ?? true }
    }

    /// The values set in `changes` replace those here; the rest stay.
    package mutating func apply(_ changes: AttributeValues) {
        for a in ItemAttribute.all { if let v = changes[a] { self[a] = v } }
    }
}

extension ItemAttribute {
    /// The table. The order is the order of the fields in the store's and the backup's
    /// formats; `presenceBit` and `wireTag` are frozen in stores, backups and the control
    /// protocol: never change them, and never give a retired one to a new attribute. Wire
    /// tags 36 to 38 are the class and dates. Bit 6 is the backup's extras flag, never an
    /// attribute's. Bits 0 to 7 fit the one-byte mask of the store's format 1; a row with a
    /// higher bit set is written in format 2 (a two-byte mask), and backups from version 2 carry
    /// a two-byte mask. `AttributeTableTests` checks all this.
    package static let all: [ItemAttribute] = [
        ItemAttribute("label", .text, presenceBit: 0, wireTag: 30, short: "l",
                      { $0.label.map { .text($0) } }, { $0.label = $1?.asText },
                      set: "The item's label.", match: "Match this label."),
        ItemAttribute("comment", .text, presenceBit: 1, wireTag: 31, short: "j",
                      { $0.comment.map { .text($0) } }, { $0.comment = $1?.asText },
                      set: "A comment.", match: "Match this comment."),
        ItemAttribute("description", .text, presenceBit: 2, wireTag: 32, short: "D",
                      { $0.description.map { .text($0) } }, { $0.description = $1?.asText },
                      set: "The kind of item (its description).", match: "Match this kind (description)."),
        ItemAttribute("generic", .bytes, presenceBit: 3, wireTag: 33, short: "G",
                      { $0.generic.map { .bytes($0) } }, { $0.generic = $1?.asData },
                      set: "The generic attribute (stored as its UTF-8 bytes).",
                      match: "Match this generic attribute (its UTF-8 bytes)."),
        ItemAttribute("creator", .code, presenceBit: 4, wireTag: 34, short: "c",
                      { $0.creator.map { .code($0) } }, { $0.creator = $1?.asCode },
                      set: "The creator: a four-character code.", match: "Match this creator code."),
        ItemAttribute("type", .code, presenceBit: 5, wireTag: 35, short: "C",
                      { $0.type.map { .code($0) } }, { $0.type = $1?.asCode },
                      set: "The type: a four-character code.", match: "Match this type code."),
        // Set on the command line by -T (repeatable) and -A, not by one flag, and never matched.
        ItemAttribute("access", .programs, presenceBit: 7, wireTag: 39, short: nil,
                      // Set and empty (-A) reads as set, so that an update clears the list.
                      { $0.access.map { .programs($0) } }, { $0.access = $1?.asPrograms },
                      set: "A program that may use the item's secret without a prompt (repeatable; a path, an interpreter and its script, or flatpak:APP-ID).",
                      match: ""),
        // Set on the command line by --synchronizable / --no-synchronizable, and never matched.
        ItemAttribute("synchronizable", .flag, presenceBit: 8, wireTag: 40, short: nil,
                      { $0.synchronizable.map { .flag($0) } }, { $0.synchronizable = $1?.asFlag },
                      set: "Whether the item travels to the user's other devices through the sync folder (yes or no).",
                      match: ""),
    ]
}

/// One attribute's value, in the kinds the table's attributes take. Each channel encodes a
/// kind the same way for every attribute of that kind, so a new kind is a new case that the
/// compiler then asks every channel to handle.
package enum AttributeValue: Hashable, Sendable {
    case text(String)
    /// Bytes that need not be text (`generic`).
    case bytes(Data)
    /// One of Apple's four-character codes (`creator`, `type`).
    case code(FourCharCode)
    /// An access list (`access`): its sealed form (`AccessList.encoded`) in the store, backups
    /// and the control protocol, its text form (one program a line) in the tree.
    case programs(AccessList)
    /// A yes/no (`synchronizable`): `yes` or `no` in the tree and the control protocol, one byte
    /// (0 or 1) in the store and backups.
    case flag(Bool)

    /// Text compares as bytes (`String.isSame`), as names do: a search by a label in one form
    /// does not find (or delete) the item labelled in the other.
    package static func == (a: Self, b: Self) -> Bool {
        switch (a, b) {
        case (.text(let x), .text(let y)): x.isSame(as: y)
        case (.bytes(let x), .bytes(let y)): x == y
        case (.code(let x), .code(let y)): x == y
        case (.programs(let x), .programs(let y)): x == y
        case (.flag(let x), .flag(let y)): x == y
        default: false
        }
    }

    package func hash(into hasher: inout Hasher) {
        switch self {
        case .text(let v): hasher.combine(0); ExactName.hash(v, into: &hasher)
        case .bytes(let v): hasher.combine(1); hasher.combine(v)
        case .code(let v): hasher.combine(2); hasher.combine(v)
        case .programs(let v): hasher.combine(3); hasher.combine(v)
        case .flag(let v): hasher.combine(4); hasher.combine(v)
        }
    }

    package var asText: String? { if case .text(let v) = self { v } else { nil } }
    package var asData: Data? { if case .bytes(let v) = self { v } else { nil } }
    package var asCode: FourCharCode? { if case .code(let v) = self { v } else { nil } }
    package var asPrograms: AccessList? { if case .programs(let v) = self { v } else { nil } }
    package var asFlag: Bool? { if case .flag(let v) = self { v } else { nil } }

    /// The bytes an xattr value and a control-protocol field carry: text as UTF-8, a code as
    /// its four ASCII bytes, bytes as they are.
    package var bytes: [UInt8] {
        switch self {
        case .text(let s): Array(s.utf8)
        case .bytes(let d): Array(d)
        case .code(let c): Array(c.text.utf8)
        case .programs(let list): list.encoded
        case .flag(let b): Array((b ? "yes" : "no").utf8)
        }
    }
}

/// The declaration of one settable item attribute: its names in every channel, the kind of
/// its value, and where the model keeps it. A class, so that walking the table on every
/// item encoded or decoded passes one reference, not a dozen fields.
package final class ItemAttribute: Sendable, Hashable, CustomStringConvertible {
    package enum Kind: Sendable { case text, bytes, code, programs, flag }

    /// The model's name: also the key in the JSON rows of old stores, so it never changes.
    package let name: String
    package let kind: Kind
    /// Its bit in the presence mask of the store's format 1 and of backups.
    package let presenceBit: UInt8
    /// Its field tag in the control protocol.
    package let wireTag: UInt16
    /// `user.keychain.<xattrName>` in the mounted tree.
    package let xattrName: String
    /// The add, find and delete commands' `-<cliShort>` and `--<cliLong>`, as in macOS `security`;
    /// nil for the access list, which the add commands set with `-T` (repeatable) and `-A`.
    package let cliShort: Character?
    package let cliLong: String
    /// Its `tag: value` line in what find and delete print.
    package let printTag: String
    /// Its key in `dump-keychain --json`.
    package let jsonKey: String
    /// The CLI's help for setting it and for matching it.
    package let setHelp: String
    package let matchHelp: String

    private let read: @Sendable (AttributeValues) -> AttributeValue?
    private let write: @Sendable (inout AttributeValues, AttributeValue?) -> Void

    package var description: String { name }
    package static func == (a: ItemAttribute, b: ItemAttribute) -> Bool { a.name == b.name }
    package func hash(into h: inout Hasher) { h.combine(name) }

    package static func named(_ name: String) -> ItemAttribute? { all.first { $0.name == name } }
    package static func withXattrName(_ name: String) -> ItemAttribute? { all.first { $0.xattrName == name } }

    func value(in values: AttributeValues) -> AttributeValue? { read(values) }

    /// Sets (or with nil removes) the attribute; a value of another kind removes it too, but
    /// every decoder makes values of the row's `kind`.
    func set(_ value: AttributeValue?, in values: inout AttributeValues) { write(&values, value) }

    /// The value of text as given on the command line: bytes are its UTF-8, a code must be one.
    package func value(parsing text: String) throws(ModelError) -> AttributeValue {
        switch kind {
        case .text: .text(text)
        case .bytes: .bytes(Data(text.utf8))
        case .code: .code(try FourCharCode(text))
        case .programs: throw .invalid("the access list is set with -T PROGRAM and -A, or the user.keychain.access attribute")
        case .flag:
            switch text {
            case "yes": .flag(true)
            case "no": .flag(false)
            default: throw .invalid("the \(name) attribute is yes or no, not '\(text)'")
            }
        }
    }

    /// The value of raw bytes, as an xattr or a control-protocol field carries them.
    package func value(from raw: some Collection<UInt8>) throws(ModelError) -> AttributeValue {
        if kind == .bytes { return .bytes(Data(raw)) }
        // The sealed form (the control protocol's); the tree's text form is parsed and pinned
        // by the tree, which alone may read the programs' files.
        if kind == .programs {
            do throws(KeychainError) { return .programs(try AccessList(decoding: Array(raw))) } catch {
                throw .invalid("the access list: \(error.description)")
            }
        }
        guard let text = String(validating: Array(raw), as: UTF8.self) else {
            throw .invalid("the \(name) attribute must be UTF-8 text")
        }
        return try value(parsing: text)
    }

    // Closures over the property, not key paths: applying a key path through a generic
    // projection cost ten times as much, and the store walks the table for every item.
    init(_ name: String, _ kind: Kind, presenceBit: UInt8, wireTag: UInt16, short: Character?,
         _ read: @escaping @Sendable (AttributeValues) -> AttributeValue?,
         _ write: @escaping @Sendable (inout AttributeValues, AttributeValue?) -> Void, set: String, match: String) {
        self.name = name; self.kind = kind; self.presenceBit = presenceBit; self.wireTag = wireTag
        // One name everywhere today; a channel that must differ changes only its own field.
        xattrName = name; cliShort = short; cliLong = name; printTag = name; jsonKey = name
        setHelp = set; matchHelp = match
        self.read = read; self.write = write
    }
}
