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
