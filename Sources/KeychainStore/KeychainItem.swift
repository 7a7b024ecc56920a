import KeychainModel

/// An item as read from the store: its decrypted record, and its sealed row, from which
/// the secret is opened on demand.
public struct KeychainItem: Sendable, Hashable {
    package let sealed: SealedItem
    public let record: ItemRecord
    public var id: Int64 { sealed.id }
    public var key: ItemKey { record.key }
    public var accessible: AccessibilityClass { record.attributes.accessible }
}
