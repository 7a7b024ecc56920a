import Foundation
import GRDB
import GRDBSQLite
import KeychainCrypto
import KeychainModel

/// What a daemon needs to serve a big store without decrypting it whole: one item by its
/// key, one group (a service's or server's items), one row per group for the names of the
/// root, and the sealed blobs of a summary when its secret is read. Each is one indexed query.
extension Keychain {
    /// The item with exactly this key, as a summary; nil when there is none.
    package func summary(for key: ItemKey) throws -> KeychainItem? {
        try item(for: key)?.summary
    }

    /// Whether a row holds this key, readable now or not: one probe of the blind index.
    package func containsItem(for key: ItemKey) throws -> Bool {
        let b = try blind(key.canonicalBytes)
        return try select { db in
            try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM items WHERE blind = ?", arguments: [Data(b)]) ?? 0
        } > 0
    }

    /// Every item of the group (generic: a service; internet: a server) whose name is readable
    /// now, access groups included, as summaries. A row that fails its check is left out, as
    /// `items(matching:)` leaves it out (`verify` reports it).
    package func groupSummaries(kind: ItemKind, name: String) throws -> [KeychainItem] {
        try groupSummaries(blind: try blind(ItemKey.groupBytes(kind: kind, name: name))).filter { $0.key.kind == kind }
    }

    private func groupSummaries(blind g: [UInt8]) throws -> [KeychainItem] {
        let rows = try select { db in try Row.fetchAll(db.cachedStatement(sql: GroupQuery.rows), arguments: [Data(g)]) }
        return rows.compactMap { row in readable(row).map(\.summary) }
    }

    /// One page of a group's rows, in id order after the id `after`: the readable items among
    /// the first `limit` rows, and the id of the last row read, to pass as `after` for the
    /// next page (nil once no row is left). Ids never change (an update, a rename or a new
    /// class keeps its row's id) and are never reused, so a listing that pages on with it
    /// neither skips nor repeats a row that existed throughout, whatever is added or removed
    /// meanwhile. One range of the group index per class (`items_group_class`, whose entries
    /// end with the id), merged by id, in one statement so that an item changing class
    /// between two ranges is seen once. An unreadable or damaged row is skipped.
    /// `known` gets the page's row ids and gives the items already decoded of those (a
    /// mount's index): one at the row's version and class is taken as it is, not decrypted
    /// again, so that listing a directory again costs no decryption.
    package func groupPage(kind: ItemKind, name: String, after: Int64, limit: Int,
                           known: ([Int64]) -> [Int64: KeychainItem] = { _ in [:] }) throws -> (items: [KeychainItem], next: Int64?) {
        precondition(limit > 0)
        let g = Data(try blind(ItemKey.groupBytes(kind: kind, name: name)))
        // One statement, so one snapshot, with no probe of the group's classes first: a page
        // is one request of a listing, and a read transaction and the probes were a third of
        // a listing's time.
        let rows = try select { db in
            try SealedItem.fetchAll(db, sql: GroupQuery.page, arguments: [g, after, limit])
        }
        func id(_ r: Result<SealedItem, SealedItem.DamagedRow>) -> Int64 {
            switch r { case .success(let s): s.id; case .failure(let d): d.id }
        }
        let page = rows.sorted { id($0) < id($1) }.prefix(limit)
        let decoded = known(page.map(id))
        var items: [KeychainItem] = []
        items.reserveCapacity(page.count)
        for case .success(let sealed) in page {
            if let item = decoded[sealed.id], isCurrent(item, sealed.head) {
                if item.key.kind == kind { items.append(item) }
                continue
            }
            guard let c = AccessibilityClass(code: sealed.classCode),
                  keybag.withLock({ $0.metadataKey(c, generation: sealed.generation) }) != nil,
                  let item = try? decode(sealed), item.key.kind == kind else { continue }
            items.append(item.summary)
        }
        return (items, page.count < limit ? nil : page.last.map(id))
    }

    /// The heads of the rows `groupPage` reads (the same ranges in one statement, so the same
    /// ids), in id order, with the id to resume after: all a listing needs from the store
    /// when it already holds the items decoded (`isCurrent`). No blob is copied out of SQLite.
    package func groupPageHeads(kind: ItemKind, name: String, after: Int64, limit: Int) throws -> (heads: [SealedItem.Head], next: Int64?) {
        precondition(limit > 0)
        let g = Data(try blind(ItemKey.groupBytes(kind: kind, name: name)))
        let heads = try select { db in
            try SealedItem.fetchHeads(db, sql: GroupQuery.pageHeads, arguments: [g, after, limit])
        }.sorted { $0.id < $1.id }.prefix(limit)
        return (Array(heads), heads.count < limit ? nil : heads.last?.id)
    }

    /// Whether `item`, decoded earlier, is still the row `head` describes (same version,
    /// class and key generation) and readable now: then it stands for the row, not decrypted again.
    package func isCurrent(_ item: KeychainItem, _ head: SealedItem.Head) -> Bool {
        guard !item.isPending, item.sealed.version == head.version, item.sealed.classCode == head.classCode,
              item.sealed.generation == head.generation else { return false }
        let c = AccessibilityClass(code: item.sealed.classCode) ?? .default
        return keybag.withLock { $0.metadataKey(c, generation: item.sealed.generation) } != nil
    }

    /// The classes of the group's rows, from the plaintext class column: readable or not. A
    /// skip scan of the group index, a probe per class, so that it costs the same in a
    /// service of a million items as in one of ten. The group blind already tells the kinds
    /// apart (`ItemKey.groupBytes`).
    package func groupClasses(kind: ItemKind, name: String) throws -> Set<AccessibilityClass> {
        let g = try blind(ItemKey.groupBytes(kind: kind, name: name))
        return try select { db in try Self.groupClasses(db, groupBlind: g) }
    }

    /// `groupClasses` of the group with this blind, on `db`: a skip scan of the group index, one
    /// probe per class (`GroupQuery.nextClass`) read straight from SQLite. (Each create runs it
    /// twice: a probe per class through GRDB was a tenth of the daemon's time in a loop of
    /// creates, and the same walk as one recursive statement cost SQLite three times the probes.)
    /// A class that is not a number (a damaged row) sorts after every number and ends the walk.
    static func groupClasses(_ db: Database, groupBlind g: [UInt8]) throws -> Set<AccessibilityClass> {
        let raw = try db.cachedStatement(sql: GroupQuery.nextClass).sqliteStatement
        sqlite3_reset(raw)
        defer { sqlite3_reset(raw) }
        var rc = g.withUnsafeBytes {
            sqlite3_bind_blob(raw, 1, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32($0.count),
                              unsafeBitCast(-1, to: sqlite3_destructor_type.self))
        }
        if rc == SQLITE_OK { rc = sqlite3_bind_int64(raw, 2, Int64.min) }
        guard rc == SQLITE_OK else { throw DatabaseError(resultCode: ResultCode(rawValue: rc)) }
        var out: Set<AccessibilityClass> = []
        while true {
            let step = sqlite3_step(raw)
            if step == SQLITE_DONE { break }
            guard step == SQLITE_ROW else { throw DatabaseError(resultCode: ResultCode(rawValue: step)) }
            let type = sqlite3_column_type(raw, 0)
            guard type == SQLITE_INTEGER || type == SQLITE_FLOAT else { break }
            let integer = sqlite3_column_int64(raw, 0), real = sqlite3_column_double(raw, 0)
            if let c = AccessibilityClass(code: Int(integer)) { out.insert(c) }
            // A reset keeps the group's binding; the next probe starts above this class.
            sqlite3_reset(raw)
            let next = type == SQLITE_INTEGER ? sqlite3_bind_int64(raw, 2, integer) : sqlite3_bind_double(raw, 2, real)
            guard next == SQLITE_OK else { throw DatabaseError(resultCode: ResultCode(rawValue: next)) }
        }
        return out
    }

    /// Whether the group holds an item of the default access group whose name is readable now.
    package func groupIsShown(kind: ItemKind, name: String) throws -> Bool {
        let g = try blind(ItemKey.groupBytes(kind: kind, name: name))
        // Usually the first row answers; only a group whose first rows are unreadable or in
        // another access group is read further.
        let first = try select { db in try Row.fetchOne(db.cachedStatement(sql: GroupQuery.firstRow), arguments: [Data(g)]) }
        if let item = first.flatMap(readable), item.key.kind == kind, item.key.accessGroup.isEmpty { return true }
        return try groupSummaries(blind: g).contains { $0.key.kind == kind && $0.key.accessGroup.isEmpty }
    }

    /// The names of the groups that hold an item of the default access group readable now (as
    /// their bytes: two forms of one name are two groups in the store),
    /// by decrypting one row per group (the first); a group whose first row does not answer
    /// is read whole.
    package func groupNames() throws -> (services: Set<ExactName>, servers: Set<ExactName>) {
        // A skip scan of the group index: two probes per group, not a pass over every row
        // (a GROUP BY reads all 100,000 index entries of a store with one big service).
        let rows = try select { db in
            var out: [Row] = []
            var last = Data()
            while let next = try Data.fetchOne(db.cachedStatement(sql: GroupQuery.nextGroup), arguments: [last]) {
                if let row = try Row.fetchOne(db.cachedStatement(sql: GroupQuery.firstRow), arguments: [next]) {
                    out.append(row)
                }
                last = next
            }
            return out
        }
        var services = Set<ExactName>(), servers = Set<ExactName>()
        func add(_ key: ItemKey) {
            guard key.accessGroup.isEmpty else { return }
            switch key {
            case .generic(let k): services.insert(k.service.exact)
            case .internet(let k): servers.insert(k.server.exact)
            }
        }
        for row in rows {
            if let item = readable(row), item.key.accessGroup.isEmpty {
                add(item.key)
                continue
            }
            guard let sealed = try? SealedItem(row: row) else { continue }
            for item in try groupSummaries(blind: sealed.groupBlind) { add(item.key) }
        }
        return (services, servers)
    }

    /// The item's sealed blobs read again, for its secret, extras or an update. The row as
    /// stored now: a newer version than the summary's is decoded afresh. `itemNotFound` if
    /// it is gone.
    package func complete(_ item: KeychainItem) throws -> KeychainItem {
        guard item.isSummary else { return item }
        return try completed(item, from: select { db in
            try SealedItem.fetchOne(db, sql: "SELECT \(SealedItem.columns) FROM items WHERE id = ?", id: item.id)
        })
    }

    /// The summary `item` with its row as read now (`complete`'s rule): nil is `itemNotFound`,
    /// and a newer version or another class is decoded afresh.
    func completed(_ item: KeychainItem, from row: SealedItem?) throws -> KeychainItem {
        guard let sealed = row else { throw KeychainError.itemNotFound }
        guard sealed.version == item.sealed.version, sealed.classCode == item.sealed.classCode else { return try decode(sealed) }
        return KeychainItem(sealed: sealed, record: item.record)
    }

    /// How many items have names readable now, from the plaintext class and generation columns.
    package func readableItemCount() throws -> Int {
        let rows = try select { db in try Row.fetchAll(db, sql: "SELECT class, generation, COUNT(*) FROM items GROUP BY class, generation") }
        var n = 0
        for row in rows {
            guard let code = Int.fromDatabaseValue(row[0]), let c = AccessibilityClass(code: code),
                  let generation = Int64.fromDatabaseValue(row[1]), let count = Int.fromDatabaseValue(row[2]) else { continue }
            if keybag.withLock({ $0.metadataKey(c, generation: generation) }) != nil { n += count }
        }
        return n
    }

    /// The row's item when its name is readable now and it passes its check; nil otherwise.
    private func readable(_ row: Row) -> KeychainItem? {
        guard let sealed = try? SealedItem(row: row), let c = AccessibilityClass(code: sealed.classCode),
              keybag.withLock({ $0.metadataKey(c, generation: sealed.generation) }) != nil else { return nil }
        return try? decode(sealed)
    }
}

/// The statements that read a group through the group index (`items_group_class`). Each is
/// one index probe or one range of it; tests check their plans.
package enum GroupQuery {
    /// A group's rows.
    package static let rows = "SELECT \(SealedItem.columns) FROM items WHERE group_blind = ?"
    /// Any one row of a group: the first in the index's order, with no sort of the group.
    package static let firstRow = "SELECT \(SealedItem.columns) FROM items WHERE group_blind = ? LIMIT 1"
    /// The next group after a blind.
    package static let nextGroup = "SELECT group_blind FROM items WHERE group_blind > ? ORDER BY group_blind LIMIT 1"
    /// Up to a number (?3) of a group's (?1) rows of each class after an id (?2), in id order:
    /// a range of the group index (whose entries end with the row id) per class; a row of a
    /// class no version knows is no one's to list.
    package static let page = AccessibilityClass.allCases.map {
        "SELECT * FROM (SELECT \(SealedItem.columns) FROM items WHERE group_blind = ?1 AND class = \($0.code) AND id > ?2 ORDER BY id LIMIT ?3)"
    }.joined(separator: " UNION ALL ")
    /// The heads (`SealedItem.Head`) of the rows `page` reads.
    package static let pageHeads = AccessibilityClass.allCases.map {
        "SELECT * FROM (SELECT id, class, version, generation FROM items WHERE group_blind = ?1 AND class = \($0.code) AND id > ?2 ORDER BY id LIMIT ?3)"
    }.joined(separator: " UNION ALL ")
    /// The smallest class of a group (?1) above ?2: one probe of the group index, with which
    /// `groupClasses` walks a group's classes from the smallest.
    package static let nextClass = "SELECT class FROM items WHERE group_blind = ?1 AND class > ?2 ORDER BY class LIMIT 1"
}
