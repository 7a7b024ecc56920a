import Foundation
import KeychainControl
import KeychainCrypto
import KeychainModel

/// One item in `dump-keychain --json`. Bytes (the generic attribute and the secret) are
/// base64; a secret that could not be read is left out and `secretError` says why.
struct DumpedItem: Encodable {
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
    var label: String?
    var comment: String?
    var description: String?
    var generic: Data?
    var creator: String?
    var type: String?
    var accessible: String
    var created: Date
    var modified: Date
    var secret: Data?
    var secretError: String?

    init(_ item: FoundItem) {
        id = item.itemID
        account = item.record.key.account
        accessGroup = item.record.key.accessGroup
        switch item.record.key {
        case .generic(let g):
            kind = "generic-password"
            service = g.service
        case .internet(let i):
            kind = "internet-password"
            server = i.server; port = i.port; path = i.path; `protocol` = i.protocol.name
            authenticationType = i.authenticationType.name; securityDomain = i.securityDomain
        }
        let a = item.record.attributes
        label = a.label; comment = a.comment; description = a.description; generic = a.generic
        creator = a.creator?.text; type = a.type?.text
        accessible = a.accessible.rawValue; created = a.created; modified = a.modified
        switch item.secret {
        case .value(let bytes): secret = bytes.withUnsafeBytes { Data($0) }
        case .unavailable(let c): secretError = "unavailable: '\(c.rawValue)' items are locked"
        case .damaged(let reason): secretError = "integrity failure: \(reason)"
        case nil: break
        }
    }
}

struct DumpDocument: Encodable {
    var store: String
    var items: [DumpedItem]
}
