import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStore

/// The owner's operations that the Secret Service needs beyond the control socket's. Each
/// write is one `change`: its commit, index update and `ItemChange` happen where every other
/// write's do.
extension ServedKeychain {
    /// Stores a secret under the first free key of `keys` (tried in order), or replaces the
    /// item at one of them that `replaces` accepts. `extras(old)` makes the new item's extras
    /// from the replaced item's. Returns the item and whether it replaced one.
    package func saveFirstFree(_ keys: some Sequence<ItemKey>, secret: SecureBytes, label: String?,
                               replaces: (KeychainItem, SecureBytes?) -> Bool,
                               extras: (SecureBytes?) -> SecureBytes, origin: ChangeOrigin = .control) throws -> (KeychainItem, replaced: Bool) {
        try change(origin: origin) { c throws -> (KeychainItem, replaced: Bool) in
            for key in keys {
                guard let existing = try self.items(matching: .exactly(key)).first else {
                    if try c.isTaken(key) { continue }
                    let item = try c.save(key, secret: secret, extras: extras(nil), changes: AttributeChanges { $0.label = label },
                                          updateExisting: false)
                    return (item, false)
                }
                let old = try self.extras(of: existing)
                guard replaces(existing, old) else { continue }
                let item = try c.save(key, secret: secret, extras: extras(old), changes: AttributeChanges { $0.label = label },
                                      updateExisting: true)
                return (item, true)
            }
            throw KeychainError.duplicateItem
        }
    }

    /// A new secret and extras for the item, its name and other attributes kept.
    package func replaceSecret(of item: KeychainItem, secret: SecureBytes, extras: (SecureBytes?) -> SecureBytes,
                               origin: ChangeOrigin = .control) throws -> KeychainItem {
        try change(origin: origin) { c throws -> KeychainItem in
            guard let current = try self.item(id: item.id) else { throw KeychainError.itemNotFound }
            return try c.save(current.key, secret: secret, extras: extras(try self.extras(of: current)), changes: AttributeChanges(),
                              updateExisting: true)
        }
    }

    /// The item renamed to `key` (nil: kept) with new extras, its secret kept: one change. Not
    /// a `save` of the secret read back: a write pending on the item's open file would be
    /// dropped as older than a new value (`ItemCommit.save`), though the value did not change.
    package func rename(_ item: KeychainItem, to key: ItemKey?, extras: (SecureBytes?) -> SecureBytes,
                        origin: ChangeOrigin = .control) throws -> KeychainItem {
        try change(origin: origin) { c throws -> KeychainItem in
            guard let current = try self.item(id: item.id) else { throw KeychainError.itemNotFound }
            var record = current.record
            if let key, key != current.key {
                if try c.isTaken(key) { throw KeychainError.duplicateItem }
                record.key = key
            }
            return try c.setAttributes(current, to: record, extras: extras(try self.extras(of: current)))
        }
    }

    /// The item's label set.
    package func setLabel(of item: KeychainItem, to label: String, origin: ChangeOrigin = .control) throws -> KeychainItem {
        try change(origin: origin) { c throws -> KeychainItem in
            guard let current = try self.item(id: item.id) else { throw KeychainError.itemNotFound }
            var record = current.record
            record.attributes.label = label
            return try c.setAttributes(current, to: record)
        }
    }

    /// Deletes the one item, if it is still there.
    package func delete(_ item: KeychainItem, origin: ChangeOrigin = .control) throws {
        try change(origin: origin) { c throws in
            guard let current = try self.item(id: item.id) else { throw KeychainError.itemNotFound }
            try c.delete([current])
        }
    }

    /// Deletes these items in one change, if they are all still there.
    package func delete(_ items: [KeychainItem], origin: ChangeOrigin = .control) throws {
        try change(origin: origin) { c throws in
            let current = try items.map { item in
                guard let current = try self.item(id: item.id) else { throw KeychainError.itemNotFound }
                return current
            }
            try c.delete(current)
        }
    }
}
