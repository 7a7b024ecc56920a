import Foundation
import GRDB
import KeychainCrypto
import KeychainModel

/// The default access list of a service or server directory (issue 17): what a new item
/// created below it takes when it is given none. Directories are not stored, so the default
/// is kept by the directory's name, in a table of its own: one row per name, the name as its
/// blind index (the items' group index), the list sealed under a key derived from the index
/// key, bound to the store, the kind and that blind. So it holds no plaintext name, a row
/// moved to another name or store fails to open, and an empty directory holds it too.
extension Keychain {
    static let directoryAccessSchema = """
        CREATE TABLE directory_access (group_blind BLOB PRIMARY KEY, sealed BLOB NOT NULL) WITHOUT ROWID;
        """

    private func directoryAccessKey() throws -> SecureBytes {
        guard let indexKey = keybag.withLock({ $0.indexKey }) else { throw KeychainError.unavailable(.whenUnlocked) }
        return try Self.mappingDatabaseErrors { try HKDF.deriveKey(from: indexKey, info: "keychainfs directory access") }
    }

    private func directoryAccessAAD(_ kind: ItemKind, _ groupBlind: [UInt8]) -> [UInt8] {
        Array("kcfs-directory-access-v1|".utf8) + storeID + [UInt8(kind.rawValue)] + groupBlind
    }

    /// The default list of the directory `name` (a generic service, or an internet server),
    /// or nil. A row that fails to open is tampering: `io`, so that no item is made with
    /// another list than the one the user set.
    package func directoryAccess(kind: ItemKind, name: String) throws -> AccessList? {
        let group = try blind(ItemKey.groupBytes(kind: kind, name: name))
        let sealed = try select { db in
            try Data.fetchOne(db.cachedStatement(sql: "SELECT sealed FROM directory_access WHERE group_blind = ?"),
                              arguments: [Data(group)])
        }
        guard let sealed else { return nil }
        let key = try directoryAccessKey()
        let plain: SecureBytes
        do { plain = try AESGCM.open(Array(sealed), key: key, aad: directoryAccessAAD(kind, group)) } catch {
            throw KeychainError.io("the default access list of '\(name)' fails its seal (the store was changed outside keychainfs)")
        }
        let bytes = plain.withUnsafeBytes { Array($0) }
        do { return try AccessList(decoding: bytes) } catch {
            throw KeychainError.io("the default access list of '\(name)' is unreadable: \(error)")
        }
    }

    /// Sets (nil or an empty list: removes) the default list of the directory `name`.
    package func setDirectoryAccess(_ list: AccessList?, kind: ItemKind, name: String) throws {
        let group = try blind(ItemKey.groupBytes(kind: kind, name: name))
        let sealed: [UInt8]?
        if let list, !list.isAnyProgram {
            let key = try directoryAccessKey()
            sealed = try Self.mappingDatabaseErrors {
                try list.encoded.withUnsafeBytes { try AESGCM.seal($0, key: key, aad: directoryAccessAAD(kind, group)) }
            }
        } else {
            sealed = nil
        }
        try write(.removes) { db, _ in
            try db.cachedStatement(sql: "DELETE FROM directory_access WHERE group_blind = ?").execute(arguments: [Data(group)])
            if let sealed {
                try db.cachedStatement(sql: "INSERT INTO directory_access (group_blind, sealed) VALUES (?, ?)")
                    .execute(arguments: [Data(group), Data(sealed)])
            }
        }
    }
}
