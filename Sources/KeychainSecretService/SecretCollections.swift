import Foundation
import KeychainCrypto
import KeychainStore

/// The Secret Service's collections and aliases, kept sealed in the store
/// (`Keychain.sealedRecord`), so they outlive the daemon. The `login` collection always exists:
/// it holds every item not put in another, the tree's and the CLI's included. An item's
/// collection is sealed in its extras and has a blind tag in the store, so a collection's items
/// are found (and listed while locked) without decrypting anything.
struct SecretCollections: Equatable {
    struct Collection: Equatable {
        /// The last element of its object path: letters, digits and `_`.
        var id: String
        var label: String
        var created: UInt64
        var modified: UInt64
    }

    static let recordName = "secret-service.collections"
    static let login = SecretAttributes.defaultCollection

    var collections: [Collection] = [Collection(id: login, label: "Login", created: 0, modified: 0)]
    /// Alias → collection id; aliases compare as bytes (`ExactName`), as names do.
    var aliases: [ExactName: String] = ["default": login, "login": login]

    func collection(_ id: String) -> Collection? { collections.first { $0.id == id } }
    var ids: [String] { collections.map(\.id) }

    /// A new id from a label, as gnome-keyring makes them: its letters and digits, lowercased,
    /// others as `_`, made unique with a number.
    func newID(for label: String) -> String {
        var base = String(label.lowercased().unicodeScalars.prefix(64).map { c -> Character in
            c.isASCII && (CharacterSet.alphanumerics.contains(c)) ? Character(c) : "_"
        })
        if base.isEmpty { base = "collection" }
        var id = base, n = 1
        while collection(id) != nil {
            n += 1
            id = base + String(n)
        }
        return id
    }

    // MARK: the sealed record: one line per collection and per alias

    func encoded() -> SecureBytes {
        var out: [UInt8] = []
        func field(_ s: String) -> [UInt8] { SecretAttributeLines.escape(s) }
        for c in collections {
            out += Array("c=".utf8) + field(c.id) + [0x09] + Array("\(c.created)\t\(c.modified)\t".utf8) + field(c.label) + [0x0A]
        }
        for (alias, id) in aliases.sorted(by: { $0.key < $1.key }) {
            out += Array("a=".utf8) + field(alias.text) + [0x09] + field(id) + [0x0A]
        }
        return SecureBytes(copying: out)
    }

    init() {}

    init(decoding record: SecureBytes) {
        collections = []
        aliases = [:]
        record.withUnsafeBytes { b in
            for line in b.split(separator: 0x0A) where line.count > 2 {
                let fields = line.dropFirst(2).split(separator: 0x09, omittingEmptySubsequences: false)
                    .map { SecretAttributeLines.unescape($0) }
                switch (line.first, fields.count) {
                case (UInt8(ascii: "c"), 4):
                    collections.append(Collection(id: fields[0], label: fields[3], created: UInt64(fields[1]) ?? 0,
                                                  modified: UInt64(fields[2]) ?? 0))
                case (UInt8(ascii: "a"), 2):
                    aliases[fields[0].exact] = fields[1]
                default:
                    continue
                }
            }
        }
        if collection(Self.login) == nil {
            collections.insert(Collection(id: Self.login, label: "Login", created: 0, modified: 0), at: 0)
        }
        aliases = aliases.filter { collection($0.value) != nil }
    }
}
