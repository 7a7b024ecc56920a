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

extension KeychainItem {
    /// A new item that is not in the store yet: a file created through the mount until its
    /// first commit inserts it. Its id is negative and its row empty; it is never unsealed.
    package init(pending record: ItemRecord, id: Int64) {
        precondition(id < 0, "a pending item's id is negative")
        self.init(sealed: SealedItem(id: id, kind: record.key.kind.rawValue, classCode: record.attributes.accessible.code,
                                     version: 0, blind: [], groupBlind: [], wrappedKey: [], attributes: [], secret: [],
                                     generation: 0, extras: nil),
                  record: record)
    }

    package var isPending: Bool { id < 0 }
}
