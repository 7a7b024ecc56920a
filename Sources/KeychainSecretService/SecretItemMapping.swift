import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStore

/// The rule that puts a Secret Service item in the tree and gives a keychain item its
/// Secret Service attributes (README, "Secret Service"):
///
/// - An attribute map with `xdg:schema` = `org.git.Password` (git's libsecret helper), or with
///   `server` and no `service`, is an internet item: `server`, account from `user` (or
///   `username`, `account`), `protocol`, `port`, path from `object` (or `path`).
/// - Else a map with `service` is a generic item: that service, account from `username` (or
///   `account`, `user`).
/// - Else it is a generic item in the directory named after its schema (`xdg:schema`, or
///   `org.freedesktop.Secret.Generic`), its account a digest of the whole map.
///
/// The map a client gave is kept whole, sealed in the item's extras beside git's; the name
/// fields in it follow the item when it is renamed in the tree. An item made through the tree
/// or the CLI has its natural attributes: `service`, `account` and `username`; or `server`,
/// `account`, `user`, `protocol`, `port`, `path` and `object`, with git's schema.
package enum SecretItemMapping {
    package static let schemaAttribute = SecretAttributes.schemaAttribute
    package static let gitSchema = SecretAttributes.gitSchema
    /// libsecret's compatibility schema for network passwords, which git's libsecret helper used
    /// before 2.45 (Debian 12's git 2.39): the same attributes as git's own, save `domain` and
    /// `authtype`. An internet item made elsewhere answers to either.
    package static let networkSchema = SecretAttributes.networkSchema
    static let internetSchemas: Set<String> = [gitSchema, networkSchema]
    package static let genericSchema = "org.freedesktop.Secret.Generic"
    package static let defaultContentType = "text/plain"

    /// The key a new item with this map takes, before `disambiguated`.
    package static func key(for a: [String: String]) throws -> ItemKey {
        let schema = a[schemaAttribute]
        if let server = a["server"], !server.isEmpty, schema.map(internetSchemas.contains) == true || a["service"] == nil {
            let account = a["user"] ?? a["username"] ?? a["account"] ?? ""
            let proto = try a["protocol"].map { try InternetProtocol(parsing: $0) } ?? .https
            let port = try a["port"].map { try InternetPort.parse($0) } ?? 0
            return .internet(try InternetPasswordKey(server: server, port: port, path: a["object"] ?? a["path"] ?? "",
                                                     protocol: proto, account: account.isEmpty ? digestName(a) : account))
        }
        if let service = a["service"], !service.isEmpty {
            let account = a["username"] ?? a["account"] ?? a["user"] ?? ""
            return .generic(try GenericPasswordKey(service: service, account: account.isEmpty ? digestName(a) : account))
        }
        return .generic(try GenericPasswordKey(service: schema.flatMap { $0.isEmpty ? nil : $0 } ?? genericSchema,
                                               account: digestName(a)))
    }

    /// The same key with its account made distinct (`name (2)`, …, cut short to fit a file
    /// name): a map that differs from the item holding a key never overwrites it.
    package static func disambiguated(_ key: ItemKey, _ n: Int) throws -> ItemKey {
        switch key {
        case .generic(let g):
            return .generic(try GenericPasswordKey(service: g.service, account: SecretAttributes.distinct(g.account, n),
                                                   accessGroup: g.accessGroup))
        case .internet(let i):
            return .internet(try InternetPasswordKey(server: i.server, port: i.port, path: i.path, protocol: i.protocol,
                                                     authenticationType: i.authenticationType, securityDomain: i.securityDomain,
                                                     account: SecretAttributes.distinct(i.account, n), accessGroup: i.accessGroup))
        }
    }

    /// `item-` and 12 hex digits of the map's digest: stable for the same map.
    static func digestName(_ a: [String: String]) -> String {
        var bytes: [UInt8] = []
        for (k, v) in a.sorted(by: { $0.key < $1.key }) {
            bytes += Array(k.utf8) + [0] + Array(v.utf8) + [0]
        }
        return "item-" + SHA256Digest.hash(bytes).prefix(6).map { String(format: "%02x", $0) }.joined()
    }

    /// Whether two attribute maps are the same as bytes (`ExactName`): a dictionary's own `==`
    /// takes two forms of a name for one.
    package static func same(_ a: [String: String], _ b: [String: String]) -> Bool {
        guard a.count == b.count else { return false }
        let x = a.sorted { $0.key.exact < $1.key.exact }, y = b.sorted { $0.key.exact < $1.key.exact }
        return zip(x, y).allSatisfy { $0.key.isSame(as: $1.key) && $0.value.isSame(as: $1.value) }
    }

    /// The item's attributes: the map it was given, its name fields following its key; or, for
    /// an item made elsewhere, its natural attributes (the store's rule, which it indexes).
    package static func attributes(of key: ItemKey, stored: [String: String]?) -> [String: String] {
        SecretAttributes.of(key, stored: stored)
    }

    package static func natural(_ key: ItemKey) -> [String: String] { SecretAttributes.natural(key) }

    // MARK: the sealed part (the item's extras)

    /// The map, content type and collection kept in an item's extras (`SecretAttributeLines`);
    /// nil where none was kept. Other lines (git's, which may hold a refresh token) are not
    /// copied out of locked memory.
    package static func decode(extras: SecureBytes?) -> (attributes: [String: String]?, contentType: String?, collection: String?) {
        guard let extras else { return (nil, nil, nil) }
        return extras.withUnsafeBytes { SecretAttributeLines.parse($0) }
    }

    /// Extras holding `attributes`, `contentType` and `collection`, with the lines of `keeping` that are not
    /// ours (git's) kept as they were.
    package static func extras(attributes: [String: String], contentType: String, collection: String? = nil,
                               keeping old: SecureBytes?) -> SecureBytes {
        let ours = SecretAttributeLines.encode(attributes, contentType: contentType, collection: collection)
        guard let old else { return SecureBytes(copying: ours) }
        return old.withUnsafeBytes { b in
            let kept = b.split(separator: 0x0A).filter { !SecretAttributeLines.isOurs($0) }
            let out = SecureBytes(count: kept.reduce(0) { $0 + $1.count + 1 } + ours.count)
            out.withUnsafeMutableBytes { o in
                var at = 0
                for line in kept {
                    UnsafeMutableRawBufferPointer(rebasing: o[at..<(at + line.count)]).copyMemory(from: UnsafeRawBufferPointer(rebasing: line))
                    at += line.count
                    o[at] = 0x0A
                    at += 1
                }
                UnsafeMutableRawBufferPointer(rebasing: o[at...]).copyBytes(from: ours)
            }
            return out
        }
    }
}
