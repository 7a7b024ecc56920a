import Foundation
import GRDB
import KeychainModel

extension Keychain {
    /// The item in this row, when its name is readable now: one probe of the primary key. The
    /// Secret Service names items by their row id, which a rename or an update keeps.
    package func item(id: Int64) throws -> KeychainItem? {
        let row = try select { db in
            try SealedItem.fetchAll(db, sql: "SELECT \(SealedItem.columns) FROM items WHERE id = ?", arguments: [id]).first
        }
        guard let row, case .success(let sealed) = row else { return nil }
        return try? decode(sealed)
    }
}

extension Keychain {
    /// Every row's id and version, from the plaintext columns: nothing is decrypted, so a
    /// caller that remembers what it read at which version (sync's publisher) finds what
    /// changed since without opening a name.
    package func rowVersions() throws -> [(id: Int64, version: Int64)] {
        try select { db in
            var out: [(id: Int64, version: Int64)] = []
            let rows = try Row.fetchCursor(db, sql: "SELECT id, version FROM items")
            while let row = try rows.next() { out.append((row[0], row[1])) }
            return out
        }
    }
}
