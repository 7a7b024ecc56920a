import Foundation
import KeychainControl
import KeychainCrypto
import KeychainModel
import KeychainStore

/// Items as `key: value` lines, after macOS `security`: the primary key first, then the
/// attributes that are set.
enum ItemPrinter {
    static func printFirstMatch(of query: ItemQuery, in store: StoreOptions, passphrase: PassphraseOptions,
                                secretOnly: Bool) throws {
        let service = try store.connect(passphrase)
        guard let item = try service.find(query: query, withSecrets: secretOnly, limit: 1).first else {
            throw KeychainError.itemNotFound
        }
        if secretOnly {
            Output.write(try item.secretBytes())
        } else {
            Output.write(lines(for: item, storePath: store.path).map { $0 + "\n" }.joined())
        }
    }

    static func lines(for item: FoundItem, storePath: String) -> [String] {
        var out = ["keychain: \(Printable.text(storePath))"]
        func add(_ key: String, _ value: String?) { if let value { out.append("\(key): \(value)") } }
        switch item.record.key {
        case .generic(let g):
            add("class", "generic-password")
            add("service", Printable.text(g.service))
            add("account", Printable.text(g.account))
        case .internet(let i):
            add("class", "internet-password")
            add("server", Printable.text(i.server))
            add("port", String(i.port))
            add("path", Printable.text(i.path))
            add("protocol", Printable.text(i.protocol.name))
            add("authentication-type", Printable.text(i.authenticationType.name))
            add("security-domain", Printable.text(i.securityDomain))
            add("account", Printable.text(i.account))
        }
        let a = item.record.attributes
        if !item.record.key.accessGroup.isEmpty { add("access-group", Printable.text(item.record.key.accessGroup)) }
        add("label", a.label.map(Printable.text))
        add("comment", a.comment.map(Printable.text))
        add("description", a.description.map(Printable.text))
        add("generic", a.generic.map { data in data.withUnsafeBytes { Printable.bytes($0) } })
        add("creator", a.creator.map { Printable.text($0.text) })
        add("type", a.type.map { Printable.text($0.text) })
        add("accessible", a.accessible.rawValue)
        add("created", Printable.date(a.created))
        add("modified", Printable.date(a.modified))
        add("item-id", String(item.itemID))
        return out
    }

    /// The secret line of `dump-keychain -d`: `"text"` when it is UTF-8 without control
    /// characters, else `0x` and hex; or why it could not be read, in angle brackets.
    static func secretLine(_ secret: FoundSecret?) -> String? {
        switch secret {
        case .value(let bytes): "secret: " + bytes.withUnsafeBytes { Printable.bytes($0) }
        case .unavailable(let c): "secret: <unavailable: '\(c.rawValue)' items are locked>"
        case .damaged(let reason): "secret: <integrity failure: \(Printable.text(reason))>"
        case nil: nil
        }
    }
}
