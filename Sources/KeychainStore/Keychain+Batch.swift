import Foundation
import GRDB
import KeychainCrypto
import KeychainModel

/// What `Keychain.save(batch:updateExisting:)` did.
public struct BatchSaveResult: Sendable {
    /// Items added or replaced, as now stored.
    public var saved: [KeychainItem] = []
    /// New items stored.
    public var added = 0
    /// Existing items overwritten (`updateExisting`), keeping their ids.
    public var replaced = 0
    /// Keys that already existed and were left alone (without `updateExisting`).
    public var skipped: [ItemKey] = []

    /// The counts without the stored items, as an import reports them.
    public var report: ImportReport { ImportReport(added: added, replaced: replaced, skipped: skipped) }
}

extension Keychain {
    /// Saves every item of `batch` in one transaction, so a batch costs one durable commit,
    /// not one per item; any failure leaves the store as it was. Items are sealed under the
    /// newest key generation, extras beside their secret.
    ///
    /// An item whose key exists already is skipped and reported, or with `updateExisting`
    /// replaces the existing item whole (secret, extras, class and attributes, dates included)
    /// under the same id; the replaced values are then erased from the WAL before this returns.
    /// A later entry with the key of an earlier one in the batch meets it the same way.
    public func save(batch: ItemBatch, updateExisting: Bool) throws -> BatchSaveResult {
        guard !batch.isEmpty else { return BatchSaveResult() }
        guard let indexKey = keybag.withLock({ $0.indexKey }) else { throw KeychainError.unavailable(.whenUnlocked) }
        let mac = try HMACSHA256.Keyed(key: indexKey)
        let blinds = batch.entries.map { (blind: mac.authenticate($0.record.key.canonicalBytes),
                                          group: mac.authenticate($0.record.key.groupBytes)) }
        // New rows land at random places in the blind indexes: with SQLite's default 2 MiB of
        // cache a big store reads and spills index pages again and again. A big batch (a local
        // import's) dirties a page of each such index per item, and the cache must hold them
        // all until the commit, or they spill to the WAL mid-transaction. The cache holds
        // sealed pages only, and goes back to its default size after the batch.
        let cacheKiB = Self.batchCacheKiB(items: batch.count)
        try? database.queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA cache_size = -\(cacheKiB)") }
        defer { try? database.queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA cache_size = -2000") } }
        return try write(updateExisting ? .removes : .addsOnly) { db, changes in
            // Plan: which entries are new, which replace a row (and at which version), which are skipped.
            var result = BatchSaveResult()
            var plan: [PlannedRow] = []
            let stored = try Self.storedVersions(db, blinds: blinds.map(\.blind))
            var planned: [[UInt8]: (id: Int64, version: Int64)] = [:]
            var nextID = try Self.peekNextID(db)
            for (i, entry) in batch.entries.enumerated() {
                let current = planned[blinds[i].blind] ?? stored[blinds[i].blind]
                if current != nil && !updateExisting {
                    result.skipped.append(entry.record.key)
                    continue
                }
                let row = PlannedRow(entry: i, id: current?.id ?? nextID, version: (current?.version ?? 0) + 1,
                                     replacedVersion: current?.version)
                if current == nil { nextID += 1 }
                planned[blinds[i].blind] = (row.id, row.version)
                plan.append(row)
            }
            let insert = try db.cachedStatement(sql: "INSERT INTO items (\(SealedItem.columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
            // The new rows' attribute index entries, written sorted after the rows
            // (`insertTags`); before any replacement, which reads a row's entries.
            var newTags: [(tag: [UInt8], id: Int64)] = []
            func writeNewTags() throws {
                newTags.sort { $0.tag.lexicographicallyPrecedes($1.tag) || ($0.tag == $1.tag && $0.id < $1.id) }
                try Self.insertTags(newTags, .index, db)
                newTags.removeAll()
            }
            // Sealing (encoding and encryption) is most of the work, and ids and versions, which
            // the seals bind, are fixed by now: it runs on a second core beside the writes.
            try SealingPipeline.run(plan, indexKey: indexKey, seal: { row, scratch in
                let entry = batch.entries[row.entry]
                return try batch.withSecretAndExtras(entry) { secret, extras in
                    try self.seal(entry.record, secret: secret, extras: extras, id: row.id, version: row.version,
                                  blinds: blinds[row.entry], scratch: scratch)
                }
            }, write: { i, s in
                let row = plan[i]
                if let old = row.replacedVersion {
                    try writeNewTags()
                    // The same key, so the same blind indexes: they are left as they are.
                    do { try Self.replaceRow(s, previousVersion: old, keyChanged: false, db, &changes) } catch KeychainError.itemNotFound {
                        throw KeychainError.io("item #\(s.id) changed while it was replaced")
                    }
                    result.replaced += 1
                } else {
                    try s.insert(with: insert)
                    newTags += Self.newAttributeTags(s)
                    changes.added(s.id, s.version)
                    result.added += 1
                }
                result.saved.append(KeychainItem(sealed: s, record: batch.entries[row.entry].record))
            })
            try writeNewTags()
            try StoreDatabase.setMeta(db, "next_id", Data(String(nextID).utf8))
            return result
        }
    }

    /// 3 KiB per item, between 32 and 128 MiB: at a million items a batch of 50,000 ran at
    /// 18,000 items/s with 32 MiB, 20,000 with 64, 23,000 with 128 and no faster with 256.
    static func batchCacheKiB(items: Int) -> Int { min(128 * 1024, max(32 * 1024, items * 3)) }

    private struct PlannedRow: Sendable {
        var entry: Int
        var id: Int64
        var version: Int64
        /// The version of the row this one overwrites; nil for a new row.
        var replacedVersion: Int64?
    }

    /// Id and version of the rows that hold these blind indexes, in queries of a few hundred.
    private static func storedVersions(_ db: Database, blinds: [[UInt8]]) throws -> [[UInt8]: (id: Int64, version: Int64)] {
        var out: [[UInt8]: (id: Int64, version: Int64)] = [:]
        var start = 0
        while start < blinds.count {
            let part = blinds[start..<min(start + 500, blinds.count)]
            let marks = Array(repeating: "?", count: part.count).joined(separator: ", ")
            let rows = try Row.fetchCursor(db, sql: "SELECT blind, id, version FROM items WHERE blind IN (\(marks))",
                                           arguments: StatementArguments(part.map { Data($0) }))
            while let row = try rows.next() {
                guard let blind = Data.fromDatabaseValue(row[0]), let id = Int64.fromDatabaseValue(row[1]),
                      let version = Int64.fromDatabaseValue(row[2]) else {
                    throw KeychainError.integrityFailure("an item's id, version or blind index column holds a value of the wrong type")
                }
                out[[UInt8](blind)] = (id, version)
            }
            start += part.count
        }
        return out
    }

    /// The items a backup holds, a page at a time: every class but `*-this-device-only`, in id
    /// order after `afterID`, at most `limit` of them and, past the first, about `maxSecretBytes`
    /// of secrets, packed with their extras into one locked buffer. Secrets are opened one at a
    /// time, so a page costs one mapping however many items it holds. A class whose key is not
    /// held throws `unavailable`; an item that fails its integrity check is reported in `damaged`.
    public func exportPage(afterID: Int64, limit: Int, maxSecretBytes: Int = 8 << 20) throws -> ExportPage {
        let deviceOnly = AccessibilityClass.allCases.filter(\.isThisDeviceOnly).map { String($0.code) }.joined(separator: ", ")
        let limit = max(limit, 1)
        let rows = try read { db in
            try Row.fetchAll(db, sql: """
                SELECT \(SealedItem.columns) FROM items WHERE id > ? AND class NOT IN (\(deviceOnly))
                ORDER BY id LIMIT ?
                """, arguments: [afterID, limit])
        }
        var page = ExportPage(batch: ItemBatch(), damaged: [], next: nil)
        var bytes = 0
        for (i, row) in rows.enumerated() {
            let id = Int64.fromDatabaseValue(row[0]) ?? afterID
            do {
                let item = try decode(try SealedItem(row: row))
                let secret = try self.secret(of: item)
                let extras = try self.extras(of: item)
                bytes += secret.count + (extras?.count ?? 0)
                page.batch.append(item.record, secret: secret, extras: extras)
            } catch KeychainError.integrityFailure(let reason) {
                page.damaged.append(IntegrityProblem(itemID: id, reason: reason))
            }
            if bytes >= maxSecretBytes && i < rows.count - 1 {
                page.next = id
                return page
            }
        }
        if rows.count >= limit, let last = rows.last { page.next = Int64.fromDatabaseValue(last[0]) }
        return page
    }
}
