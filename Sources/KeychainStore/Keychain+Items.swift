import Foundation
import GRDB
import KeychainCrypto
import KeychainModel

extension Keychain {
    // MARK: reading items

    func blind(_ bytes: [UInt8]) throws -> [UInt8] {
        guard let key = keybag.withLock({ $0.indexKey }) else {
            throw KeychainError.unavailable(.whenUnlocked)
        }
        if let known = recentBlinds.withLock({ $0.blind(of: bytes) }) { return known }
        let blind = HMACSHA256.authenticate(bytes, key: key)
        // Remembered only while the key is still held, under its lock: a `forgetKeys` between
        // the MAC and here would otherwise find the cache empty and leave this blind in it.
        keybag.withLock { bag in
            if bag.indexKey != nil { recentBlinds.withLock { $0.remember(bytes, blind) } }
        }
        return blind
    }

    /// The item with exactly this primary key: one probe of the blind index.
    public func item(for key: ItemKey) throws -> KeychainItem? {
        let b = try blind(key.canonicalBytes)
        let row = try select { db in
            try SealedItem.fetchAll(db, sql: "SELECT \(SealedItem.columns) FROM items WHERE blind = ?", arguments: [Data(b)]).first
        }
        guard let row else { return nil }
        return try decode(try row.mapError(\.error).get())
    }

    /// Items that match, in the documented order (`ItemOrder`). Items whose names cannot be
    /// read in this lock state are left out; items that fail their integrity check throw.
    public func items(matching query: ItemQuery) throws -> [KeychainItem] {
        if let key = query.exactKey { return try item(for: key).map { query.matches($0.record) ? [$0] : [] } ?? [] }
        let rows: [Result<SealedItem, SealedItem.DamagedRow>]
        if let group = query.groupName {
            let g = try blind(ItemKey.groupBytes(kind: query.kind, name: group))
            rows = try select { db in
                try SealedItem.fetchAll(db, sql: GroupQuery.rows, arguments: [Data(g)])
            }
        } else {
            rows = try read { db in
                try SealedItem.fetchAll(db, sql: "SELECT \(SealedItem.columns) FROM items WHERE kind = ?",
                                        arguments: [query.kind.rawValue])
            }
        }
        var out: [KeychainItem] = []
        for row in rows {
            guard case .success(let sealed) = row, metadataKey(sealed) != nil else { continue }
            // A tampered row fails alone (verify reports it); the others still match.
            guard let item = try? decode(sealed) else { continue }
            if query.matches(item.record) { out.append(item) }
        }
        return ItemOrder.sorted(out)
    }

    /// Every item whose name is readable now, and the ones that fail their integrity check.
    public func allItems() throws -> (items: [KeychainItem], problems: [IntegrityProblem]) {
        let rows = try read { db in try SealedItem.fetchAll(db, sql: "SELECT \(SealedItem.columns) FROM items ORDER BY id") }
        let (items, problems, _) = try decodeReadable(rows)
        return (ItemOrder.sorted(items), problems)
    }

    /// The rows whose names can be read now, decoded, and the ones that fail their integrity
    /// check; with the highest id read, damaged rows included.
    private func decodeReadable(_ rows: [Result<SealedItem, SealedItem.DamagedRow>]) throws
        -> (items: [KeychainItem], problems: [IntegrityProblem], lastID: Int64?) {
        var items: [KeychainItem] = [], problems: [IntegrityProblem] = [], last: Int64?
        items.reserveCapacity(rows.count)
        for row in rows {
            let sealed: SealedItem
            switch row {
            case .success(let s): sealed = s
            case .failure(let damaged):
                problems.append(IntegrityProblem(itemID: damaged.id, reason: damaged.error.description))
                last = max(last ?? damaged.id, damaged.id)
                continue
            }
            last = max(last ?? sealed.id, sealed.id)
            // A class number we do not know is damage, not a lock state: `decode` reports it.
            guard metadataKey(sealed) != nil || AccessibilityClass(code: sealed.classCode) == nil else { continue }
            do { items.append(try decode(sealed)) } catch let e as KeychainError {
                problems.append(IntegrityProblem(itemID: sealed.id, reason: e.description))
            }
        }
        return (items, problems, last)
    }

    /// `allItems` a page at a time: the rows after `afterID` in id order, at most `limit`, with
    /// the number of rows read and the id to continue after (nil at the end). Items are in id
    /// order, not `ItemOrder`.
    func itemPage(afterID: Int64, limit: Int) throws
        -> (items: [KeychainItem], problems: [IntegrityProblem], rows: Int, next: Int64?) {
        let rows = try read { db in
            try SealedItem.fetchAll(db, sql: "SELECT \(SealedItem.columns) FROM items WHERE id > ? ORDER BY id LIMIT ?",
                                    arguments: [afterID, max(limit, 1)])
        }
        let (items, problems, lastID) = try decodeReadable(rows)
        let last = max(lastID ?? afterID, afterID)
        // id is the table's integer primary key, so every row has one and the pages advance.
        return (items, problems, rows.count, rows.count >= max(limit, 1) && last > afterID ? last : nil)
    }

    /// Item counts per class, from the plaintext class column; no key needed.
    public func countsByClass() throws -> [AccessibilityClass: Int] {
        try read { db in
            var out: [AccessibilityClass: Int] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT class, COUNT(*) FROM items GROUP BY class") {
                if let code = Int.fromDatabaseValue(row[0]), let c = AccessibilityClass(code: code) { out[c] = row[1] }
            }
            return out
        }
    }

    private func metadataKey(_ sealed: SealedItem) -> SecureBytes? {
        guard let c = AccessibilityClass(code: sealed.classCode) else { return nil }
        return keybag.withLock { $0.metadataKey(c, generation: sealed.generation) }
    }

    func decode(_ sealed: SealedItem) throws -> KeychainItem {
        guard let c = AccessibilityClass(code: sealed.classCode) else {
            throw KeychainError.integrityFailure("item #\(sealed.id) has an unknown class")
        }
        guard let mk = keybag.withLock({ $0.metadataKey(c, generation: sealed.generation) }) else {
            if sealed.generation > keyGeneration || sealed.generation < 0 {
                throw KeychainError.integrityFailure("item #\(sealed.id) names a key generation the store does not have")
            }
            throw KeychainError.unavailable(c)
        }
        guard let record = try? AESGCM.openUnlocked(sealed.attributes, key: mk, aad: sealed.aad("attrs"), {
                  AttributeEncoding.decode($0)
              }),
              record.attributes.accessible == c, record.key.kind.rawValue == sealed.kind
        else { throw KeychainError.integrityFailure("item #\(sealed.id): its attributes fail authentication") }
        return KeychainItem(sealed: sealed, record: record)
    }

    private func itemKey(_ sealed: SealedItem, _ c: AccessibilityClass) throws -> SecureBytes {
        guard let classKey = keybag.withLock({ $0.classKey(c, generation: sealed.generation) }) else {
            throw KeychainError.unavailable(c)
        }
        do { return try AESGCM.open(sealed.wrappedKey, key: classKey, aad: sealed.aad("key")) }
        catch { throw KeychainError.integrityFailure("item #\(sealed.id): its secret fails authentication") }
    }

    /// Decrypts the item's secret. Throws `unavailable` when its class key is not held.
    public func secret(of item: KeychainItem) throws -> SecureBytes {
        let sealed = item.sealed
        let key = try itemKey(sealed, item.accessible)
        do { return try AESGCM.open(sealed.secret, key: key, aad: sealed.aad("secret")) }
        catch { throw KeychainError.integrityFailure("item #\(sealed.id): its secret fails authentication") }
    }

    /// Decrypts the item's sealed extras (git's expiry and refresh token): sealed like the
    /// secret, under the item key, so they follow the class's lock state. Nil when it has none.
    public func extras(of item: KeychainItem) throws -> SecureBytes? {
        guard let sealedExtras = item.sealed.extras else { return nil }
        let key = try itemKey(item.sealed, item.accessible)
        do { return try AESGCM.open(sealedExtras, key: key, aad: item.sealed.aad("extras")) }
        catch { throw KeychainError.integrityFailure("item #\(item.id): its extras fail authentication") }
    }

    // MARK: writing items

    /// Seals a record, secret and extras into a row under a fresh item key and the newest
    /// generation of its class key.
    private func seal(_ record: ItemRecord, secret: SecureBytes, extras: SecureBytes?, id: Int64, version: Int64,
                      indexTags: Bool = true) throws -> SealedItem {
        try secret.withUnsafeBytes { s in
            if let extras {
                try extras.withUnsafeBytes { try seal(record, secret: s, extras: $0, id: id, version: version, indexTags: indexTags) }
            } else {
                try seal(record, secret: s, extras: nil, id: id, version: version, indexTags: indexTags)
            }
        }
    }

    /// `blinds`, when the caller has computed them already, and `scratch` (a buffer filled
    /// with the fresh key, and a MAC under the index key) spare a batch HMAC look-ups and a
    /// locked mapping per item. `indexTags` false leaves `attributeTags` empty, for a write
    /// that keeps the row's entries.
    func seal(_ record: ItemRecord, secret: UnsafeRawBufferPointer, extras: UnsafeRawBufferPointer?, id: Int64, version: Int64,
              blinds: (blind: [UInt8], group: [UInt8])? = nil, scratch: SealScratch? = nil, indexTags: Bool = true) throws -> SealedItem {
        guard secret.count <= maxSecretBytes else { throw KeychainError.secretTooLarge(secret.count) }
        let c = record.attributes.accessible
        if c == .whenPasscodeSetThisDeviceOnly && !hasPassphrase {
            throw KeychainError.invalidInput("'\(c.rawValue)' items need a store with a passphrase")
        }
        // Every write seals here, so this one check covers add, update, class changes, batches and merges.
        try record.attributes.checkSynchronizable()
        let (classKey, metadataKey, generation) = keybag.withLock { ($0.classKey(c), $0.metadataKey(c), $0.generation) }
        guard let classKey, let metadataKey else { throw KeychainError.unavailable(c) }
        var sealed = SealedItem(id: id, kind: record.key.kind.rawValue, classCode: c.code, version: version,
                                blind: try blinds?.blind ?? blind(record.key.canonicalBytes),
                                groupBlind: try blinds?.group ?? blind(record.key.groupBytes),
                                wrappedKey: [], attributes: [], secret: [], generation: generation, extras: nil)
        let itemKey = scratch?.itemKey ?? SecureBytes(count: AESGCM.keyBytes)
        SecureRandom.fill(itemKey)
        // The nonces of the row's seals in one draw: each RAND_bytes call cost more than an AES-GCM seal of a short secret.
        let sealsExtras = (extras?.count ?? 0) > 0
        let nonces = SecureRandom.array((sealsExtras ? 4 : 3) * AESGCM.nonceBytes)
        func nonce(_ i: Int) -> ArraySlice<UInt8> { nonces[(i * AESGCM.nonceBytes)..<((i + 1) * AESGCM.nonceBytes)] }
        sealed.wrappedKey = try AESGCM.seal(itemKey, key: classKey, aad: sealed.aad("key"), nonce: nonce(0))
        sealed.attributes = try AttributeEncoding.encode(record).withUnsafeBytes {
            try AESGCM.seal($0, key: metadataKey, aad: sealed.aad("attrs"), nonce: nonce(1))
        }
        sealed.secret = try AESGCM.seal(secret, key: itemKey, aad: sealed.aad("secret"), nonce: nonce(2))
        if let extras, sealsExtras { sealed.extras = try AESGCM.seal(extras, key: itemKey, aad: sealed.aad("extras"), nonce: nonce(3)) }
        if indexTags { sealed.attributeTags = try attributeTags(record.key, extras, mac: scratch?.mac) }
        return sealed
    }

    /// Adds a new item; `duplicateItem` if one with the same primary key exists. `extras`
    /// are sealed beside the secret (`extras(of:)`).
    @discardableResult
    public func add(_ record: ItemRecord, secret: SecureBytes, extras: SecureBytes? = nil) throws -> KeychainItem {
        try write(.addsOnly) { db, changes in
            let id = try Self.nextID(db)
            let sealed = try seal(record, secret: secret, extras: extras, id: id, version: 1)
            try Self.insertRow(sealed, db)
            changes.added(id, 1)
            return KeychainItem(sealed: sealed, record: record)
        }
    }

    /// `add`, the class chosen in the same transaction: `classRule` is given the classes of
    /// the rows of the record's group (`groupClasses`), so that no commit comes between the
    /// class rule and the insert, and no read transaction of its own is needed.
    @discardableResult
    package func add(_ record: ItemRecord, secret: SecureBytes,
                     classRule: (Set<AccessibilityClass>) -> AccessibilityClass) throws -> KeychainItem {
        let blinds = (blind: try blind(record.key.canonicalBytes), group: try blind(record.key.groupBytes))
        return try write(.addsOnly) { db, changes in
            var record = record
            record.attributes.accessible = classRule(try Self.groupClasses(db, groupBlind: blinds.group))
            let id = try Self.nextID(db)
            let sealed = try secret.withUnsafeBytes { try seal(record, secret: $0, extras: nil, id: id, version: 1, blinds: blinds) }
            try Self.insertRow(sealed, db)
            changes.added(id, 1)
            return KeychainItem(sealed: sealed, record: record)
        }
    }

    /// Re-seals `item` (a summary too: its row is read in the same transaction) as `record`
    /// (which may change its key, class or attributes) with `secret`,
    /// or with its current secret when nil; `extras` nil keeps its extras, empty removes them.
    /// `replacing`, if given, is deleted in the same transaction: that is how a rename onto
    /// an existing item is atomic. Returns once no earlier value of either is left in the store's files.
    /// `modified` is the new modification date: a file's is the time of its last write, not of its commit.
    @discardableResult
    public func update(_ item: KeychainItem, to record: ItemRecord, secret: SecureBytes? = nil,
                       extras: SecureBytes? = nil, replacing other: KeychainItem? = nil,
                       modified: Date = Date()) throws -> KeychainItem {
        var record = record
        record.attributes.modified = modified
        return try write(.removes) { db, changes in
            // A summary's row is read here, in the commit's own transaction (as `complete`
            // reads it): a read transaction of its own took two more locks of the store.
            let item = try item.isSummary
                ? completed(item, from: SealedItem.fetchOne(db, sql: "SELECT \(SealedItem.columns) FROM items WHERE id = ?", id: item.id))
                : item
            // The attribute index's entries follow from the key and the extras alone: with both as
            // they were (a new secret, new dates), the row's entries stay, and their MACs and the
            // read of the old ones are spared. (A row not yet indexed is `completeAttributeIndex`'s.)
            let tagsKept = extras == nil && other == nil && record.key == item.key
            let value = try secret ?? self.secret(of: item)
            // A save through a temporary file renamed over the item keeps the item's extras.
            let keptExtras = try extras ?? self.extras(of: item) ?? other.flatMap { try self.extras(of: $0) }
            let sealed = try seal(record, secret: value, extras: keptExtras, id: item.id, version: item.sealed.version + 1,
                                  indexTags: !tagsKept)
            if let other, other.id != item.id { try Self.deleteRow(other.id, db, &changes) }
            try Self.replaceRow(sealed, previousVersion: item.sealed.version,
                                keyChanged: sealed.blind != item.sealed.blind || sealed.groupBlind != item.sealed.groupBlind,
                                tagsKept: tagsKept, db, &changes)
            return KeychainItem(sealed: sealed, record: record)
        }
    }

    /// Adds the item, or with `updateExisting` updates the one with the same key: the secret
    /// and the given attributes change, the rest (and the creation date) stay. `extras` as in `update`.
    /// A new item that does not say whether it is synchronizable takes `defaultSynchronizable`
    /// (config.toml's `default-synchronizable`) if its class may leave the device.
    @discardableResult
    public func save(_ key: ItemKey, secret: SecureBytes, changes: AttributeChanges = AttributeChanges(),
                     extras: SecureBytes? = nil, defaultClass: AccessibilityClass = .default,
                     defaultSynchronizable: Bool = false, updateExisting: Bool) throws -> KeychainItem {
        if let existing = try item(for: key) {
            guard updateExisting else { throw KeychainError.duplicateItem }
            var record = existing.record
            record.attributes = changes.applied(to: record.attributes)
            return try update(existing, to: record, secret: secret, extras: extras)
        }
        var attributes = changes.applied(to: ItemAttributes(accessible: defaultClass))
        attributes.applyDefaultSynchronizable(defaultSynchronizable)
        attributes.modified = attributes.created
        return try add(ItemRecord(key: key, attributes: attributes), secret: secret, extras: extras)
    }

    /// Deletes these items, all or none. Works on a full disk (it may use the store's reserve)
    /// and returns once nothing of them is left in the store's files.
    public func delete(_ items: [KeychainItem]) throws {
        try write(.deletesOnly) { db, changes in
            for item in items { try Self.deleteRow(item.id, db, &changes) }
        }
    }

    /// Re-seals every item of an older key generation under the newest one, `batch` items per
    /// commit, then drops the generations no item needs. `progress(done, total)` after each commit.
    public func rekey(batch: Int = 256, progress: (Int, Int) -> Void = { _, _ in }) throws -> Int {
        guard state == .unlocked, keybag.withLock({ $0.holdsEveryClassKey }) else {
            throw KeychainError.invalidInput("re-sealing needs every class key: unlock the store on the machine of its device key")
        }
        let generation = keyGeneration
        let ids = try read { db in
            try Int64.fetchAll(db, sql: "SELECT id FROM items WHERE generation < ? ORDER BY id", arguments: [generation])
        }
        let batch = max(batch, 1)
        var done = 0
        progress(0, ids.count)
        for start in stride(from: 0, to: ids.count, by: batch) {
            let chunk = ids[start..<min(start + batch, ids.count)]
            let rows = try read { db in
                try Row.fetchAll(db, sql: "SELECT \(SealedItem.columns) FROM items WHERE id IN (\(chunk.map(String.init).joined(separator: ",")))")
            }
            var resealed: [(old: KeychainItem, new: SealedItem)] = []
            for row in rows {
                let item = try decode(try SealedItem(row: row))
                let sealed = try seal(item.record, secret: try secret(of: item), extras: try extras(of: item),
                                      id: item.id, version: item.sealed.version + 1)
                resealed.append((item, sealed))
            }
            try write(.removes) { db, changes in
                for (old, new) in resealed {
                    do {
                        try Self.replaceRow(new, previousVersion: old.sealed.version, keyChanged: false, db, &changes)
                    } catch KeychainError.itemNotFound {
                        continue
                    }
                }
            }
            done += chunk.count
            progress(done, ids.count)
        }
        // Older generations' keys go once no item needs them.
        try write(.removes) { db, _ in
            let oldest = try Int64.fetchOne(db, sql: "SELECT MIN(generation) FROM items") ?? generation
            try db.execute(sql: "DELETE FROM wrapped_keys WHERE generation < ?", arguments: [min(oldest, generation)])
        }
        return ids.count
    }

    /// One write transaction: `body` changes rows and reports them in `changes`; the ledger is
    /// brought up to date in the same transaction, the WAL erased as `effect` says, and this
    /// machine's counter raised after the commit.
    func write<T>(_ effect: WriteEffect, _ body: (Database, inout RowChanges) throws -> T) throws -> T {
        let (indexKey, ledgerKeys, generation) = keybag.withLock { ($0.indexKey, $0.ledgerKeys, $0.generation) }
        guard let indexKey else { throw KeychainError.unavailable(.whenUnlocked) }
        let keys = try ledgerKeys ?? RowLedger.Keys(indexKey: indexKey)
        var intact = false
        let (result, counterValue, savedLedger): (T, UInt64, [UInt8]) = try Self.mappingDatabaseErrors {
            // A commit on files that were as the last commit or check left them keeps the ledger
            // true to the rows: the files as it leaves them need no reading at the next open. Any
            // other change since breaks that chain, and the next open reads every row.
            try database.write(effect, committed: { filesCommitted(intact: intact) }) { db in
                // Under the write lock: no other commit can change the files before this one.
                intact = filesAsLeft()
                // A passphrase change by another process since this one unlocked: its keys are no longer the newest.
                let stored = try StoreDatabase.metaBytes(db, sql: "SELECT value FROM meta WHERE name = 'key_generation'")
                    .flatMap { Int64(String(decoding: $0, as: UTF8.self)) }
                guard stored == generation else {
                    throw KeychainError.io("the store's keys changed since it was opened (passwd?); run the command again")
                }
                var changes = RowChanges()
                let result = try body(db, &changes)
                var ledger: RowLedger
                if let stored = try RowLedger.load(db, keys: keys, storeID: storeID, written: ledgerWritten.withLock { $0 }) {
                    ledger = stored.ledger
                    try ledger.digest.toggle(changes.toggled, key: keys.digest)
                    ledger.count += changes.delta
                } else {
                    // A store from before the ledger: the rows after this commit are its start.
                    ledger = try RowLedger.scan(db, keys: keys, counter: 0)
                }
                ledger.counter += 1
                let saved = try ledger.save(db, keys: keys, storeID: storeID)
                return (result, ledger.counter, saved)
            }
        }
        ledgerWritten.withLock { $0 = savedLedger }
        counter.record(counterValue)
        return result
    }

    /// Every failure leaves the store as a `KeychainError`: SQLite's and OpenSSL's included.
    static func mappingDatabaseErrors<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let e as KeychainError {
            throw e
        } catch let e as DatabaseError where e.resultCode == .SQLITE_CONSTRAINT && (e.message ?? "").hasSuffix("items.id") {
            // A new row's id is taken: the next id is behind the rows, not a duplicate item.
            throw KeychainError.integrityFailure("the store's next item id is behind its rows (\(e.message ?? "items.id")): changed behind keychainfs's back")
        } catch let e as DatabaseError where e.resultCode == .SQLITE_CONSTRAINT {
            throw KeychainError.duplicateItem
        } catch let e as DatabaseError where e.resultCode == .SQLITE_FULL {
            throw KeychainError.diskFull
        } catch let e as DatabaseError where e.resultCode == .SQLITE_CORRUPT || e.resultCode == .SQLITE_NOTADB {
            throw KeychainError.notAKeychain("the store is corrupt: \(e.message ?? "\(e)")")
        } catch let e as DatabaseError {
            throw KeychainError.io("database error: \(e.message ?? "\(e)")")
        } catch let e as CryptoError {
            throw KeychainError.io("crypto failure: \(e)")
        } catch {
            throw KeychainError.io("\(error)")
        }
    }

    /// A read transaction, its failures as `KeychainError`s.
    func read<T>(_ body: (Database) throws -> T) throws -> T {
        try Self.mappingDatabaseErrors { try database.queue.read(body) }
    }

    /// A read outside a transaction, for the lookups a mount runs at every file operation:
    /// GRDB's `read` runs four more statements around each (query_only on and off, begin,
    /// commit). For one statement, or for probes that each stand alone (a skip scan, where a
    /// commit of another command between two probes only moves what the next one finds);
    /// the body only selects.
    func select<T>(_ body: (Database) throws -> T) throws -> T {
        try Self.mappingDatabaseErrors { try database.queue.unsafeRead(body) }
    }

    static func nextID(_ db: Database) throws -> Int64 {
        let v = try peekNextID(db)
        // Ids are never reused, so an old row cannot pose as a later item with the same id.
        try StoreDatabase.setMeta(db, "next_id", bytes: Array(String(v + 1).utf8))
        return v
    }

    /// The next item id, without taking it (`nextID` takes one). Not a number is damage: a
    /// fallback to 1 would hand out the ids of deleted items again.
    static func peekNextID(_ db: Database) throws -> Int64 {
        guard let bytes = try StoreDatabase.metaBytes(db, sql: "SELECT value FROM meta WHERE name = 'next_id'"),
              let v = Int64(String(decoding: bytes, as: UTF8.self)), v > 0 else {
            throw KeychainError.integrityFailure("the store's next item id is damaged (not a number)")
        }
        return v
    }

    static func insertRow(_ sealed: SealedItem, _ db: Database) throws {
        // Bound straight from the row's arrays (`SealedItem.insert`), as an import does.
        try sealed.insert(with: db.cachedStatement(sql: "INSERT INTO items (\(SealedItem.columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"))
        // Its entries wait at the end of their own table, not on the index's random pages
        // (`indexPendingTags`).
        try insertTags(newAttributeTags(sealed), .pending, db)
    }

    /// Overwrites the row of `sealed`'s id at `previousVersion` with `sealed`, in place: one
    /// UPDATE that leaves the blind indexes alone when the key did not change, so a durable
    /// update writes the row's page and the ledger's, not index pages as well (a delete and an
    /// insert wrote four). `itemNotFound` if the row is gone or at another version.
    static func replaceRow(_ sealed: SealedItem, previousVersion: Int64, keyChanged: Bool, tagsKept: Bool = false,
                           _ db: Database, _ changes: inout RowChanges) throws {
        let statement = try db.cachedStatement(sql: """
            UPDATE items SET kind = ?, version = ?, \(keyChanged ? "blind = ?, group_blind = ?, " : "")\
            wrapped_key = ?, attributes = ?, secret = ?, generation = ?, extras = ? WHERE id = ? AND version = ?
            """)
        try sealed.update(with: statement, keyChanged: keyChanged, previousVersion: previousVersion)
        guard db.changesCount == 1 else { throw KeychainError.itemNotFound }
        // The class is in the group index: set apart, and only when it changes, so that an
        // update of the secret alone rewrites no index page.
        try sealed.setClass(with: db.cachedStatement(sql: "UPDATE items SET class = ?1 WHERE id = ?2 AND class IS NOT ?1"))
        changes.removed(sealed.id, previousVersion)
        changes.added(sealed.id, sealed.version)
        if !tagsKept { try writeAttributeTags(sealed, replacing: true, db) }
    }

    static func deleteRow(_ id: Int64, _ db: Database, _ changes: inout RowChanges) throws {
        guard let version = try Int64.fetchOne(db.cachedStatement(sql: "SELECT version FROM items WHERE id = ?"), arguments: [id]) else { return }
        try db.cachedStatement(sql: "DELETE FROM items WHERE id = ?").execute(arguments: [id])
        try deleteAttributeTags(id, db)
        changes.removed(id, version)
    }
}
/// The order of find results and listings: generic before internet; then service (server,
/// port, path), account, protocol, authentication type, security domain, access group.
public enum ItemOrder {
    /// True when `a` sorts before `b` in this order.
    public static func precedes(_ a: KeychainItem, _ b: KeychainItem) -> Bool { sortKey(a.key).lexicographicallyPrecedes(sortKey(b.key)) }

    /// `items` in this order, each item's sort key made once rather than at every comparison.
    public static func sorted(_ items: [KeychainItem]) -> [KeychainItem] {
        items.map { (key: sortKey($0.key), item: $0) }.sorted { $0.key.lexicographicallyPrecedes($1.key) }.map(\.item)
    }

    /// Names in byte order (`ExactName`): two forms of one name never tie, so "the first
    /// match" is the same whatever order the items were stored in.
    static func sortKey(_ k: ItemKey) -> [ExactName] {
        switch k {
        case .generic(let g): ["1", g.service.exact, g.account.exact, g.accessGroup.exact]
        case .internet(let i):
            ["2", i.server.exact, String(format: "%05d", i.port).exact, i.path.exact, i.account.exact, i.protocol.code.text.exact,
             i.authenticationType.code.text.exact, i.securityDomain.exact, i.accessGroup.exact]
        }
    }
}

/// The last few blind indexes computed, by the bytes they blind. A create computes its name's
/// and its group's twice (the kernel's lookup of the new name and the class rule, then the
/// insert), and each update of a file seals the same two again: an HMAC each time. A blind
/// depends on the bytes and the index key alone, which never changes for a store; the blinds
/// are the store's own index columns, and the names are those the mount lists. Forgotten with
/// the keys (`forgetKeys`).
struct RecentBlinds {
    private static let capacity = 4
    private var entries: [(bytes: [UInt8], blind: [UInt8])] = []
    private var next = 0

    func blind(of bytes: [UInt8]) -> [UInt8]? { entries.first { $0.bytes == bytes }?.blind }

    mutating func remember(_ bytes: [UInt8], _ blind: [UInt8]) {
        if entries.count < Self.capacity {
            entries.append((bytes, blind))
        } else {
            entries[next] = (bytes, blind)
            next = (next + 1) % Self.capacity
        }
    }

    mutating func forget() { entries.removeAll(); next = 0 }
}
