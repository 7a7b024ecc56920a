import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStore

/// A request on the control socket: one `KeychainService` call. Secrets travel as `Data` and
/// are turned into `SecureBytes` as soon as they are decoded.
enum ControlRequest: Codable {
    case save(key: ItemKey, secret: Data, extras: Data?, changes: AttributeChanges, updateExisting: Bool)
    case find(query: ItemQuery, withSecrets: Bool, limit: Int?)
    case delete(query: ItemQuery)
    case dump(withSecrets: Bool)
    case verify
    case status
    case lock
    case unlock(passphrase: Data?)
    case unmount
}

/// The reply to one request. Failures carry the `KeychainError` itself, so the client
/// rethrows the very error the daemon met, and exits with the same code.
enum ControlResponse: Codable {
    case saved(ItemRecord)
    case found([WireItem])
    case deleted(count: Int)
    case verified(VerifyReport)
    case status(KeychainStatus)
    case done
    case failed(KeychainError)
}

/// `FoundItem` as it crosses the socket.
struct WireItem: Codable {
    var itemID: Int64
    var record: ItemRecord
    var secret: WireSecret?
    var extras: Data?

    enum WireSecret: Codable {
        case value(Data)
        case unavailable(AccessibilityClass)
        case damaged(String)
    }

    init(_ item: FoundItem) {
        itemID = item.itemID
        record = item.record
        switch item.secret {
        case .value(let bytes): secret = .value(bytes.withUnsafeBytes { Data($0) })
        case .unavailable(let c): secret = .unavailable(c)
        case .damaged(let reason): secret = .damaged(reason)
        case nil: secret = nil
        }
        extras = item.extras?.wireData
    }

    var foundItem: FoundItem {
        let found: FoundSecret? = switch secret {
        case .value(let data): .value(SecureBytes(copying: data))
        case .unavailable(let c): .unavailable(c)
        case .damaged(let reason): .damaged(reason)
        case nil: nil
        }
        return FoundItem(itemID: itemID, record: record, secret: found, extras: extras.map { SecureBytes(copying: $0) })
    }
}

extension SecureBytes {
    /// A `Data` copy for the wire; the caller drops it as soon as it is encoded.
    var wireData: Data { withUnsafeBytes { Data($0) } }
}
