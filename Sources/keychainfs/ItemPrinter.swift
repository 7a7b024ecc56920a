import Foundation
import KeychainControl
import KeychainCrypto
import KeychainModel
import KeychainStore

/// Items as `key: value` lines, after macOS `security`: the primary key first, then the
/// attributes that are set.
enum ItemPrinter {
    static func printFirstMatch(of query: ItemQuery, in store: StoreOptions, passphrase: PassphraseOptions,
                                output: FindOutputOptions) throws {
        let service = try store.connect(passphrase)
        guard let item = try service.find(query: query, withSecrets: output.needsSecret, limit: 1).first else {
            throw KeychainError.itemNotFound
        }
        if output.passwordOnly {
            Output.write(try item.secretBytes())
            return
        }
        // Read before anything is printed, so a locked secret fails the command cleanly.
        let secret = output.showPassword ? try item.secretBytes() : nil
        Output.write(lines(for: item, storePath: store.path).map { $0 + "\n" }.joined())
        if let secret {
            let prefix = Array("password: ".utf8)
            let shown = Printable.macOSBuffer(secret)
            let line = SecureBytes(count: prefix.count + shown.count + 1)
            line.withUnsafeMutableBytes { dst in
                for (i, b) in prefix.enumerated() { dst[i] = b }
                shown.withUnsafeBytes { src in for i in 0..<src.count { dst[prefix.count + i] = src[i] } }
                dst[dst.count - 1] = UInt8(ascii: "\n")
            }
            Output.error(line)
        }
    }

    static func lines(for item: FoundItem, storePath: String) -> [String] {
        lines(for: item.record, itemID: item.itemID, storePath: storePath)
    }

    /// `itemID` nil leaves out the item-id line (a deleted item has none left).
    static func lines(for record: ItemRecord, itemID: Int64?, storePath: String) -> [String] {
        var out = ["keychain: \(Printable.text(storePath))"]
        func add(_ key: String, _ value: String?) { if let value { out.append("\(key): \(value)") } }
        switch record.key {
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
        let a = record.attributes
        if !record.key.accessGroup.isEmpty { add("access-group", Printable.text(record.key.accessGroup)) }
        for attribute in ItemAttribute.all {
            add(attribute.printTag, a.values[attribute].map { value in
                switch value {
                case .text(let text): Printable.text(text)
                case .bytes(let data): data.withUnsafeBytes { Printable.bytes($0) }
                case .code(let code): Printable.text(code.text)
                // One program a line in the tree; here on one line, each program as the xattr writes it.
                case .programs(let list): Printable.text(list.rules.map(\.program.description).joined(separator: " ; "))
                case .flag(let b): Printable.text(b ? "yes" : "no")
                }
            })
        }
        add("accessible", a.accessible.rawValue)
        add("created", Printable.date(a.created))
        add("modified", Printable.date(a.modified))
        add("item-id", itemID.map(String.init))
        return out
    }

    /// The secret line of `dump-keychain -d` for a secret that could not be read: why, in
    /// angle brackets. A secret that was read is `Printable.secretLine`'s.
    static func secretLine(_ secret: FoundSecret?) -> String? {
        switch secret {
        case .value: nil
        case .unavailable(let c): "secret: <unavailable: '\(c.rawValue)' items are locked>"
        case .damaged(let reason): "secret: <integrity failure: \(Printable.text(reason))>"
        case .refused(let reason): "secret: <access denied: \(Printable.text(reason))>"
        case nil: nil
        }
    }
}
