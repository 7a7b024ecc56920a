import Foundation
import GRDB
import KeychainCrypto

/// Small records of the store's own that are not items (the Secret Service's collections and
/// aliases): sealed in the meta table under a key derived from the index key, bound to the
/// store and the record's name, so they are as readable as the blind indexes (in every lock
/// state once the store is open) and never in clear.
extension Keychain {
    private func recordKey() throws -> SecureBytes {
        guard let indexKey = keybag.withLock({ $0.indexKey }) else { throw KeychainError.unavailable(.whenUnlocked) }
        return try HKDF.deriveKey(from: indexKey, info: "keychainfs sealed record")
    }

    private func recordAAD(_ name: String) -> [UInt8] {
        Array("kcfs-record|".utf8) + storeID + Array("|\(name)".utf8)
    }

    /// The record `name`, opened; nil when none was stored.
    package func sealedRecord(named name: String) throws -> SecureBytes? {
        let sealed = try select { db in
            try Data.fetchOne(db.cachedStatement(sql: "SELECT value FROM meta WHERE name = ?"), arguments: ["sealed." + name])
        }
        guard let sealed else { return nil }
        do { return try AESGCM.open([UInt8](sealed), key: try recordKey(), aad: recordAAD(name)) } catch {
            throw KeychainError.integrityFailure("the store's record '\(name)' fails authentication")
        }
    }

    /// Replaces the record `name`; once this returns, its earlier value is in none of the
    /// store's files (a checkpoint, as for a replaced item).
    package func setSealedRecord(named name: String, to value: SecureBytes) throws {
        let sealed = try AESGCM.seal(value, key: try recordKey(), aad: recordAAD(name))
        try write(.removes) { db, _ in try StoreDatabase.setMeta(db, "sealed." + name, Data(sealed)) }
    }
}
