import Foundation
import GRDB
import KeychainCrypto
import KeychainModel

/// Lookups for a filesystem that decrypts what it is asked for, not every item at mount: one
/// item by its key (`item(for:)`, one probe of the blind index), the items of one directory
/// (one probe of the group index), and the directories themselves (one row decrypted per name).
extension Keychain {
    /// The services (generic) or servers (internet) that have an item whose name can be read
    /// in this lock state, sorted. SQL picks one row per group index value among the rows whose
    /// keys are held; only those rows are decrypted. A row that fails its integrity check is
    /// passed over for the next one of its group, so a damaged item hides no directory.
    public func groupNames(_ kind: ItemKind) throws -> [String] {
        let readable = keybag.withLock { $0.metadataKeyIDs }
        guard !readable.isEmpty else { return [] }
        let pairs = Array(repeating: "(?, ?)", count: readable.count).joined(separator: ", ")
        var arguments: StatementArguments = [kind.rawValue]
        for id in readable { arguments += [id.accessible.code, id.generation] }
        let held = "kind = ? AND (class, generation) IN (VALUES \(pairs))"
        let rows = try read { db in
            try Row.fetchAll(db, sql: """
                SELECT \(SealedItem.columns) FROM items WHERE id IN
                (SELECT MIN(id) FROM items WHERE \(held) GROUP BY group_blind)
                """, arguments: arguments)
        }
        var names = Set<String>()
        for row in rows {
            if let item = try? decode(try SealedItem(row: row)) {
                names.insert(Self.groupName(of: item.key))
                continue
            }
            // The first row of this group is damaged: look for a readable one after it.
            guard let first = try? SealedItem(row: row) else { continue }
            let others = try read { db in
                try Row.fetchAll(db, sql: "SELECT \(SealedItem.columns) FROM items WHERE \(held) AND group_blind = ? AND id > ? ORDER BY id",
                                 arguments: arguments + [Data(first.groupBlind), first.id])
            }
            for other in others {
                if let item = try? decode(try SealedItem(row: other)) {
                    names.insert(Self.groupName(of: item.key))
                    break
                }
            }
        }
        return names.sorted()
    }

    /// The items of one service (generic) or server (internet) whose names can be read now,
    /// in `ItemOrder`: one probe of the group index, and only that group's rows decrypted.
    public func items(inGroup name: String, kind: ItemKind) throws -> [KeychainItem] {
        try items(matching: kind == .generic ? ItemQuery(kind: kind, service: name) : ItemQuery(kind: kind, server: name))
    }

    static func groupName(of key: ItemKey) -> String {
        switch key {
        case .generic(let g): g.service
        case .internet(let i): i.server
        }
    }
}
