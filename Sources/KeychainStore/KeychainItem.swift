import KeychainModel

/// An item as read from the store: its decrypted record, and its sealed row, from which
/// the secret is opened on demand. A summary (`summary`) keeps the record but none of the
/// sealed blobs: `Keychain.complete(_:)` reads them again from the row.
public struct KeychainItem: Sendable, Hashable {
    package let sealed: SealedItem
    /// The decrypted key and attributes.
    public let record: ItemRecord
    /// Bytes of the sealed secret, which a summary still knows.
    package let sealedSecretCount: Int
    package let isSummary: Bool
    /// The row id, stable for the item's life; export pages go by it.
    public var id: Int64 { sealed.id }
    /// The item's primary key.
    public var key: ItemKey { record.key }
    /// The item's class.
    public var accessible: AccessibilityClass { record.attributes.accessible }

    init(sealed: SealedItem, record: ItemRecord) {
        self.sealed = sealed
        self.record = record
        sealedSecretCount = sealed.secret.count
        isSummary = false
    }

    private init(summarizing item: KeychainItem) {
        let s = item.sealed
        sealed = SealedItem(id: s.id, kind: s.kind, classCode: s.classCode, version: s.version, blind: [], groupBlind: [],
                            wrappedKey: [], attributes: [], secret: [], generation: s.generation, extras: nil)
        record = item.record
        sealedSecretCount = item.sealedSecretCount
        isSummary = true
    }

    /// The item without its sealed blobs: what a cache of many items holds.
    package var summary: KeychainItem { isSummary ? self : KeychainItem(summarizing: self) }
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
