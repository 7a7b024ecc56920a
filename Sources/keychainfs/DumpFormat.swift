import Foundation
import KeychainControl
import KeychainCrypto
import KeychainModel

/// One item in `dump-keychain --json`. Bytes (the generic attribute and the secret) are
/// base64; a secret that could not be read is left out and `secretError` says why. The
/// settable attributes are keys beside the others, one per row of `ItemAttribute.all`.
struct DumpedItem: Encodable {
    var fields: Fields
    var attributes: AttributeValues

    /// Everything but the settable attributes.
    struct Fields: Encodable {
        var id: Int64
        var kind: String
        var service: String?
        var server: String?
        var port: UInt16?
        var path: String?
        var `protocol`: String?
        var authenticationType: String?
        var securityDomain: String?
        var account: String
        var accessGroup: String
        var accessible: String
        var created: Date
        var modified: Date
        var secret: Data?
        var secretError: String?
    }

    init(_ item: FoundItem) {
        let a = item.record.attributes
        var f = Fields(id: item.itemID, kind: "generic-password", account: item.record.key.account,
                       accessGroup: item.record.key.accessGroup, accessible: a.accessible.rawValue,
                       created: a.created, modified: a.modified)
        switch item.record.key {
        case .generic(let g):
            f.service = g.service
        case .internet(let i):
            f.kind = "internet-password"
            f.server = i.server; f.port = i.port; f.path = i.path; f.protocol = i.protocol.name
            f.authenticationType = i.authenticationType.name; f.securityDomain = i.securityDomain
        }
        switch item.secret {
        case .value(let bytes): f.secret = bytes.withUnsafeBytes { Data($0) }
        case .unavailable(let c): f.secretError = "unavailable: '\(c.rawValue)' items are locked"
        case .damaged(let reason): f.secretError = "integrity failure: \(reason)"
        case nil: break
        }
        fields = f
        attributes = a.values
    }

    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    func encode(to encoder: Encoder) throws {
        try fields.encode(to: encoder)
        var c = encoder.container(keyedBy: Key.self)
        for attribute in ItemAttribute.all {
            let key = Key(stringValue: attribute.jsonKey)
            switch attributes[attribute] {
            case .text(let text)?: try c.encode(text, forKey: key)
            case .bytes(let data)?: try c.encode(data, forKey: key)
            case .code(let code)?: try c.encode(code.text, forKey: key)
            case .programs(let list)?: try c.encode(list.rules.map(\.program.description), forKey: key)
            case .flag(let b)?: try c.encode(b, forKey: key)
            case nil: break
            }
        }
    }
}

struct DumpDocument: Encodable {
    var store: String
    var items: [DumpedItem]
}
