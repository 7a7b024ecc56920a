import Foundation
import GRDB
import GRDBSQLite
import KeychainCrypto
import KeychainModel
import Synchronization

extension Keychain {
    /// Imports `batch` into a store that holds no item (a restore, a new store), in one
    /// transaction, with every index built in order rather than kept up per row; nil, with
    /// nothing written, when the store holds an item (then `save(batch:updateExisting:)` in
    /// batches is the way).
    ///
    /// Why: kept up per row, the blind index and the attribute index take each new item at a
    /// random page, so at a million items every commit of a batch rewrote most of their pages
    /// (3 GB written for a store of 530 MB). Here the rows go in the blind index's order, and
    /// take their ids in that order (a new store's ids are the import's to give), so the table
    /// and the blind index only ever grow at their end, and the group index at the end of each
    /// group; the attribute index's entries are sorted and written after the rows, its index
    /// by item dropped before and made again after them (`CREATE INDEX` sorts). Each page is
    /// written about once. (Making the group index again after the rows as well took the
    /// same CPU in one run of each: it reads the whole table back.)
    ///
    /// One transaction, so the guarantees are those of any commit: killed part way, the store
    /// is as empty as before; when this returns, every item is durable; the ledger counts
    /// every row. Other writers wait meanwhile (and give up after SQLite's busy timeout).
    /// Items of the same key: without `updateExisting` the first is kept and the others
    /// reported skipped; with it the last is kept and the others count as replaced, as
    /// `save(batch:)` would have it. `progress` gets the number of items written so far.
    public func importIntoEmptyStore(_ batch: ItemBatch, updateExisting: Bool,
                                     progress: (Int) -> Void = { _ in }) throws -> ImportReport? {
        guard !batch.isEmpty else { return nil }
        guard let indexKey = keybag.withLock({ $0.indexKey }) else { throw KeychainError.unavailable(.whenUnlocked) }
        // Asked again in the transaction; this spares a store with items a commit.
        guard try !read({ try Bool.fetchOne($0, sql: "SELECT EXISTS (SELECT 1 FROM items)")! }) else { return nil }
        let order = try Self.blindOrder(batch, indexKey: indexKey)
        // Of a run of equal blinds (one key), the entry kept; the others are reported.
        var kept: [BlindEntry] = []
        kept.reserveCapacity(order.count)
        var report = ImportReport()
        var skipped: [Int32] = []
        var run = 0
        while run < order.count {
            var end = run + 1
            while end < order.count && order[end].sameBlind(order[run]) { end += 1 }
            // Sorted by blind, then entry: the first of the run is the backup's first.
            let keep = updateExisting ? end - 1 : run
            var entry = order[keep]
            entry.rank = Int32(kept.count)
            kept.append(entry)
            for i in run..<end where i != keep {
                if updateExisting { report.replaced += 1 } else { skipped.append(order[i].entry) }
            }
            run = end
        }
        report.skipped = skipped.sorted().map { batch.entries[Int($0)].record.key }
        try? database.queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA cache_size = -\(Self.emptyImportCacheKiB)") }
        defer { try? database.queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA cache_size = -2000") } }
        let added: Int? = try write(.addsOnly) { db, changes in
            guard try !Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM items)")! else { return nil }
            let firstID = try Self.peekNextID(db)
            // Dropped here and made again after the entries, each from its own statement as
            // the schema holds it: whatever a migration made of them.
            let indexes = try Row.fetchAll(db, sql: """
                SELECT name, sql FROM sqlite_master
                WHERE type = 'index' AND tbl_name = 'attribute_index' AND sql IS NOT NULL
                """).map { (name: $0[0] as String, sql: $0[1] as String) }
            for index in indexes { try db.execute(sql: "DROP INDEX \(index.name.quotedDatabaseIdentifier)") }
            let insert = try db.cachedStatement(sql: "INSERT INTO items (\(SealedItem.columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
            var tags = AttributeTagList()
            var written = 0
            // Sealed a slice at a time, so that sealed rows waiting to be written stay few.
            for start in stride(from: 0, to: kept.count, by: Self.emptyImportSlice) {
                let slice = Array(kept[start..<min(start + Self.emptyImportSlice, kept.count)])
                try SealingPipeline.run(slice, indexKey: indexKey, seal: { row, scratch in
                    let entry = batch.entries[Int(row.entry)]
                    return try batch.withSecretAndExtras(entry) { secret, extras in
                        try self.seal(entry.record, secret: secret, extras: extras, id: row.id(firstID), version: 1,
                                      blinds: (row.blind, scratch.mac.authenticate(entry.record.key.groupBytes)), scratch: scratch)
                    }
                }, write: { _, s in
                    try s.insert(with: insert)
                    tags.add(s)
                    changes.added(s.id, s.version)
                })
                written += slice.count
                progress(written)
            }
            try tags.insertSorted(db)
            for index in indexes { try db.execute(sql: index.sql) }
            try StoreDatabase.setMeta(db, "next_id", Data(String(firstID + Int64(kept.count)).utf8))
            return kept.count
        }
        guard let added else { return nil }
        report.added = added
        return report
    }

    /// Items sealed and written between two reports of progress.
    static let emptyImportSlice = 50_000
    /// The cache while the rows go in: only the pages at the indexes' ends are written more
    /// than once, so a small cache is enough (the rest spills to the WAL as it fills).
    static let emptyImportCacheKiB = 32 * 1024

    /// One entry of the batch with its blind index, as four integers, so that the sort of a
    /// million compares integers rather than arrays byte by byte (the order is the same).
    struct BlindEntry: Sendable {
        var b0, b1, b2, b3: UInt64
        var entry: Int32
        /// The position in blind order, which gives the row its id.
        var rank: Int32 = 0

        init(_ blind: [UInt8], entry: Int) {
            func word(_ i: Int) -> UInt64 { blind[i * 8..<i * 8 + 8].reduce(0) { $0 << 8 | UInt64($1) } }
            b0 = word(0); b1 = word(1); b2 = word(2); b3 = word(3)
            self.entry = Int32(entry)
        }

        var blind: [UInt8] {
            var out: [UInt8] = []
            out.reserveCapacity(32)
            for w in [b0, b1, b2, b3] { for i in 0..<8 { out.append(UInt8(truncatingIfNeeded: w >> UInt64(56 - 8 * i))) } }
            return out
        }

        func id(_ first: Int64) -> Int64 { first + Int64(rank) }

        func sameBlind(_ o: BlindEntry) -> Bool { b0 == o.b0 && b1 == o.b1 && b2 == o.b2 && b3 == o.b3 }

        static func precedes(_ a: BlindEntry, _ b: BlindEntry) -> Bool {
            (a.b0, a.b1, a.b2, a.b3, a.entry) < (b.b0, b.b1, b.b2, b.b3, b.entry)
        }
    }

    /// The batch's entries in the order of their blind indexes (ties in batch order), the
    /// HMACs computed on every core.
    static func blindOrder(_ batch: ItemBatch, indexKey: SecureBytes) throws -> [BlindEntry] {
        let n = batch.count
        let parts = max(1, min(ProcessInfo.processInfo.activeProcessorCount, n / 10_000))
        let results = Mutex<[[BlindEntry]]>(Array(repeating: [], count: parts))
        let failure = Mutex<(any Error)?>(nil)
        DispatchQueue.concurrentPerform(iterations: parts) { p in
            do {
                let mac = try HMACSHA256.Keyed(key: indexKey)
                let range = (n * p / parts)..<(n * (p + 1) / parts)
                let part = range.map { BlindEntry(mac.authenticate(batch.entries[$0].record.key.canonicalBytes), entry: $0) }
                results.withLock { $0[p] = part }
            } catch {
                failure.withLock { $0 = error }
            }
        }
        if let e = failure.withLock({ $0 }) { throw e }
        var all = results.withLock { $0 }.flatMap { $0 }
        all.sort(by: BlindEntry.precedes)
        return all
    }
}

/// The attribute index entries of an import's rows (`Keychain.attributeTags`, 16 bytes each),
/// kept as integers until they are written sorted, after the rows: 24 bytes an entry.
struct AttributeTagList {
    private struct Entry: Comparable {
        var t0, t1: UInt64
        var id: Int64
        static func < (a: Entry, b: Entry) -> Bool { (a.t0, a.t1, a.id) < (b.t0, b.t1, b.id) }
    }
    private var entries: [Entry] = []

    /// The row's tags, each once.
    mutating func add(_ sealed: SealedItem) {
        for (tag, id) in Keychain.newAttributeTags(sealed) {
            precondition(tag.count == 16, "an attribute tag is 16 bytes")
            func word(_ i: Int) -> UInt64 { tag[i..<i + 8].reduce(0) { $0 << 8 | UInt64($1) } }
            entries.append(Entry(t0: word(0), t1: word(8), id: id))
        }
    }

    /// Writes them in the index's order, so that it only grows at its end.
    mutating func insertSorted(_ db: Database) throws {
        entries.sort()
        var tags: [(tag: [UInt8], id: Int64)] = []
        tags.reserveCapacity(min(entries.count, 100_000))
        func bytes(_ e: Entry) -> [UInt8] {
            var out = [UInt8](repeating: 0, count: 16)
            for i in 0..<8 {
                out[i] = UInt8(truncatingIfNeeded: e.t0 >> UInt64(56 - 8 * i))
                out[8 + i] = UInt8(truncatingIfNeeded: e.t1 >> UInt64(56 - 8 * i))
            }
            return out
        }
        for e in entries {
            tags.append((bytes(e), e.id))
            if tags.count == 100_000 {
                try Keychain.insertTags(tags, .index, db)
                tags.removeAll(keepingCapacity: true)
            }
        }
        try Keychain.insertTags(tags, .index, db)
        entries = []
    }
}
