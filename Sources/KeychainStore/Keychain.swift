import Foundation
import GRDB
import KeychainCrypto
import KeychainModel
import Synchronization

/// An open keychain store: the keybag and its lock state, and the items.
///
/// Thread-safe: the keybag sits behind a mutex and GRDB serialises database access, so the
/// FUSE worker threads and the control socket may share one instance.
public final class Keychain: @unchecked Sendable {
    public let path: String
    public let hasPassphrase: Bool
    private let database: StoreDatabase
    private let keybag: Mutex<Keybag>

    // MARK: opening

    /// Creates a new store, unlocked. `passphrase` nil makes a store protected by the device key only.
    public static func create(at path: String, passphrase: SecureBytes?, scrypt: ScryptParameters = .default,
                              deviceKeyPath: String = KeychainLocations.deviceKey) throws -> Keychain {
        guard scrypt.isAcceptable else { throw KeychainError.invalidInput("scrypt parameters out of range") }
        if FileManager.default.fileExists(atPath: path) { throw KeychainError.storeExists(path) }
        try KeychainLocations.makeDirectory((path as NSString).deletingLastPathComponent)
        let deviceKey = try DeviceKey.loadOrCreate(path: deviceKeyPath)
        let salt = SecureRandom.array(16)
        let passphraseKey = try passphrase.map { try Scrypt.deriveKey(passphrase: $0, salt: salt, parameters: scrypt) }
        let wrapped = try Keybag.create(passphraseKey: passphraseKey, deviceKey: deviceKey)
        let db = try StoreDatabase(path: path, create: true)
        try db.queue.write { db in
            let meta: [(String, Data)] = [
                ("format", Data(StoreDatabase.format.utf8)),
                ("has_passphrase", Data([passphrase == nil ? 0 : 1])),
                ("scrypt", try JSONEncoder().encode(scrypt)),
                ("salt", Data(salt)),
                ("next_id", Data("1".utf8)),
            ]
            for (k, v) in meta { try db.execute(sql: "INSERT INTO meta (name, value) VALUES (?, ?)", arguments: [k, v]) }
            try Self.insert(wrapped, db)
        }
        let keychain = try Keychain(openingAt: path, deviceKeyPath: deviceKeyPath)
        try keychain.keybag.withLock { bag in try bag.unlock(passphraseKey: passphraseKey, wrapped: try keychain.wrappedKeys()) }
        return keychain
    }

    /// Opens a store in the state "before first unlock": only what the device key opens.
    public init(openingAt path: String, deviceKeyPath: String = KeychainLocations.deviceKey) throws {
        self.path = path
        database = try StoreDatabase(path: path, create: false)
        let flag = try Self.mappingErrors { [database] in
            try database.queue.read { db in try Data.fetchOne(db, sql: "SELECT value FROM meta WHERE name = 'has_passphrase'") }
        }
        hasPassphrase = flag != Data([0])
        let wrapped = try Self.mappingErrors { [database] in try database.queue.read { db in try Self.fetchWrapped(db) } }
        keybag = Mutex(Keybag(wrapped: wrapped, hasPassphrase: hasPassphrase, deviceKey: DeviceKey.load(path: deviceKeyPath)))
    }

    private static func fetchWrapped(_ db: Database) throws -> [WrappedKey] {
        try Row.fetchAll(db, sql: "SELECT name, wrapping, blob FROM wrapped_keys").compactMap { row in
            guard let w = Wrapping(rawValue: row[1]) else { return nil }
            return WrappedKey(name: row[0], wrapping: w, blob: [UInt8](row[2] as Data))
        }
    }

    private func wrappedKeys() throws -> [WrappedKey] { try read { try Self.fetchWrapped($0) } }

    private static func insert(_ wrapped: [WrappedKey], _ db: Database) throws {
        for w in wrapped {
            try db.execute(sql: "INSERT OR REPLACE INTO wrapped_keys (name, wrapping, blob) VALUES (?, ?, ?)",
                           arguments: [w.name, w.wrapping.rawValue, Data(w.blob)])
        }
    }

    // MARK: lock state

    public var state: LockState { keybag.withLock { $0.state } }
    public var deviceKeyPresent: Bool { keybag.withLock { $0.deviceKeyPresent } }

    public func isAvailable(_ c: AccessibilityClass) -> Bool { keybag.withLock { $0.classKey(c) != nil } }

    /// Unlocks with the passphrase (nil for a store without one). A wrong passphrase changes
    /// nothing but the failure counter, which makes later attempts wait (`backoffDelay`).
    public func unlock(passphrase: SecureBytes?) throws {
        let wrapped = try wrappedKeys()
        guard hasPassphrase else {
            try keybag.withLock { try $0.unlock(passphraseKey: nil, wrapped: wrapped) }
            return
        }
        guard let passphrase else { throw KeychainError.wrongPassphrase }
        let (failures, last) = try failureRecord()
        let wait = last + Self.backoffDelay(failures: failures) - Int(Date().timeIntervalSince1970)
        if wait > 0 { throw KeychainError.tooManyAttempts(retryAfter: wait) }
        let key = try passphraseKey(passphrase)
        do {
            try keybag.withLock { try $0.unlock(passphraseKey: key, wrapped: wrapped) }
        } catch KeychainError.wrongPassphrase {
            try setFailureRecord(failures + 1, Int(Date().timeIntervalSince1970))
            throw KeychainError.wrongPassphrase
        }
        if failures != 0 { try setFailureRecord(0, 0) }
    }

    /// Seconds to wait after `failures` wrong passphrases in a row: none for the first two,
    /// then 5 s, doubling up to an hour.
    package static func backoffDelay(failures: Int) -> Int {
        failures < 3 ? 0 : min(5 << min(failures - 3, 20), 3600)
    }

    /// Wrong passphrases in a row and the time of the last one, kept in the store.
    package func failureRecord() throws -> (failures: Int, lastFailure: Int) {
        try read { db in
            func int(_ name: String) throws -> Int {
                try Data.fetchOne(db, sql: "SELECT value FROM meta WHERE name = ?", arguments: [name])
                    .flatMap { Int(String(decoding: $0, as: UTF8.self)) } ?? 0
            }
            return (try int("failed_unlocks"), try int("last_failed_unlock"))
        }
    }

    private func setFailureRecord(_ failures: Int, _ time: Int) throws {
        try write { db in
            for (k, v) in [("failed_unlocks", failures), ("last_failed_unlock", time)] {
                try db.execute(sql: "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
                               arguments: [k, Data(String(v).utf8)])
            }
        }
    }

    private func passphraseKey(_ passphrase: SecureBytes) throws -> SecureBytes {
        let (params, salt) = try read { db -> (ScryptParameters, [UInt8]) in
            guard let p = try Data.fetchOne(db, sql: "SELECT value FROM meta WHERE name = 'scrypt'"),
                  let params = try? JSONDecoder().decode(ScryptParameters.self, from: p), params.isAcceptable,
                  let salt = try Data.fetchOne(db, sql: "SELECT value FROM meta WHERE name = 'salt'")
            else { throw KeychainError.notAKeychain("\(path): the store's key-derivation parameters are damaged") }
            return (params, [UInt8](salt))
        }
        return try Self.mappingErrors { try Scrypt.deriveKey(passphrase: passphrase, salt: salt, parameters: params) }
    }

    /// Forgets the keys of `when-unlocked*` items at once.
    public func lock() { keybag.withLock { $0.lock() } }

    /// Forgets every key, as at unmount.
    public func forgetKeys() { keybag.withLock { $0.forget() } }

    /// Changes the passphrase by re-wrapping the class keys: the cost does not depend on the
    /// number of items.
    public func changePassphrase(old: SecureBytes, new: SecureBytes, scrypt: ScryptParameters? = nil) throws {
        guard hasPassphrase else {
            throw KeychainError.invalidInput("this store has no passphrase (it was made with --no-passphrase)")
        }
        // Always check the old passphrase, even when already unlocked.
        try unlock(passphrase: old)
        let oldParams = try read { db in
            try Data.fetchOne(db, sql: "SELECT value FROM meta WHERE name = 'scrypt'").flatMap { try? JSONDecoder().decode(ScryptParameters.self, from: $0) }
        }
        let params = scrypt ?? oldParams ?? .default
        let salt = SecureRandom.array(16)
        let newKey = try Scrypt.deriveKey(passphrase: new, salt: salt, parameters: params)
        let wrapped = try keybag.withLock { try $0.rewrap(under: newKey) }
        try write { db in
            try db.execute(sql: "DELETE FROM wrapped_keys WHERE wrapping IN ('p', 'pd')")
            try Self.insert(wrapped, db)
            try db.execute(sql: "INSERT OR REPLACE INTO meta (name, value) VALUES ('salt', ?), ('scrypt', ?)",
                           arguments: [Data(salt), try JSONEncoder().encode(params)])
        }
    }

    // MARK: reading items

    private func blind(_ bytes: [UInt8]) throws -> [UInt8] {
        guard let key = keybag.withLock({ $0.indexKey }) else {
            throw KeychainError.unavailable(.whenUnlocked)
        }
        return HMACSHA256.authenticate(bytes, key: key)
    }

    /// The item with exactly this primary key: one probe of the blind index.
    public func item(for key: ItemKey) throws -> KeychainItem? {
        let b = try blind(key.canonicalBytes)
        let row = try read { db in
            try Row.fetchOne(db, sql: "SELECT \(SealedItem.columns) FROM items WHERE blind = ?", arguments: [Data(b)])
        }
        guard let row else { return nil }
        return try decode(try SealedItem(row: row))
    }

    /// Items that match, in the documented order (`ItemOrder`). Items whose names cannot be
    /// read in this lock state are left out; items that fail their integrity check throw.
    public func items(matching query: ItemQuery) throws -> [KeychainItem] {
        if let key = query.exactKey { return try item(for: key).map { [$0] } ?? [] }
        let rows: [Row]
        if let group = query.groupName {
            let g = try blind(ItemKey.groupBytes(kind: query.kind, name: group))
            rows = try read { db in
                try Row.fetchAll(db, sql: "SELECT \(SealedItem.columns) FROM items WHERE group_blind = ?", arguments: [Data(g)])
            }
        } else {
            rows = try read { db in
                try Row.fetchAll(db, sql: "SELECT \(SealedItem.columns) FROM items WHERE kind = ?", arguments: [query.kind.rawValue])
            }
        }
        var out: [KeychainItem] = []
        for row in rows {
            guard let sealed = try? SealedItem(row: row), metadataKey(sealed) != nil else { continue }
            // A tampered row fails alone (verify reports it); the others still match.
            guard let item = try? decode(sealed) else { continue }
            if query.matches(item.key) { out.append(item) }
        }
        return out.sorted(by: ItemOrder.precedes)
    }

    /// Every item whose name is readable now, and the ones that fail their integrity check.
    public func allItems() throws -> (items: [KeychainItem], problems: [IntegrityProblem]) {
        let rows = try read { db in try Row.fetchAll(db, sql: "SELECT \(SealedItem.columns) FROM items ORDER BY id") }
        var items: [KeychainItem] = [], problems: [IntegrityProblem] = []
        for row in rows {
            let sealed: SealedItem
            do { sealed = try SealedItem(row: row) } catch {
                problems.append(IntegrityProblem(itemID: Int64.fromDatabaseValue(row[0]) ?? -1, reason: error.description))
                continue
            }
            // A class number we do not know is damage, not a lock state: `decode` reports it.
            guard metadataKey(sealed) != nil || AccessibilityClass(code: sealed.classCode) == nil else { continue }
            do { items.append(try decode(sealed)) } catch let e as KeychainError {
                problems.append(IntegrityProblem(itemID: sealed.id, reason: e.description))
            }
        }
        return (items.sorted(by: ItemOrder.precedes), problems)
    }

    /// Item counts per class, from the plaintext class column; no key needed.
    public func countsByClass() throws -> [AccessibilityClass: Int] {
        try read { db in
            var out: [AccessibilityClass: Int] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT class, COUNT(*) FROM items GROUP BY class") {
                if let c = AccessibilityClass(code: row[0]) { out[c] = row[1] }
            }
            return out
        }
    }

    /// Opens every item it can and reports those that fail, secrets included.
    public func verify() throws -> (checked: Int, problems: [IntegrityProblem]) {
        let (items, problems) = try allItems()
        var all = problems, checked = problems.count
        for item in items where isAvailable(item.accessible) {
            checked += 1
            do { _ = try secret(of: item) } catch let e as KeychainError {
                all.append(IntegrityProblem(itemID: item.id, reason: e.description))
            }
        }
        return (checked, all.sorted { $0.itemID < $1.itemID })
    }

    private func metadataKey(_ sealed: SealedItem) -> SecureBytes? {
        guard let c = AccessibilityClass(code: sealed.classCode) else { return nil }
        return keybag.withLock { $0.metadataKey(c) }
    }

    private func decode(_ sealed: SealedItem) throws -> KeychainItem {
        guard let c = AccessibilityClass(code: sealed.classCode) else {
            throw KeychainError.integrityFailure("item #\(sealed.id) has an unknown class")
        }
        guard let mk = keybag.withLock({ $0.metadataKey(c) }) else { throw KeychainError.unavailable(c) }
        guard let plain = try? AESGCM.open(sealed.attributes, key: mk, aad: sealed.aad("attrs")),
              let record = try? plain.withUnsafeBytes({ try JSONDecoder().decode(ItemRecord.self, from: Data($0)) }),
              record.attributes.accessible == c, record.key.kind.rawValue == sealed.kind
        else { throw KeychainError.integrityFailure("item #\(sealed.id): its attributes fail authentication") }
        return KeychainItem(sealed: sealed, record: record)
    }

    /// Decrypts the item's secret. Throws `unavailable` when its class key is not held.
    public func secret(of item: KeychainItem) throws -> SecureBytes {
        let sealed = item.sealed
        guard let classKey = keybag.withLock({ $0.classKey(item.accessible) }) else {
            throw KeychainError.unavailable(item.accessible)
        }
        do {
            let itemKey = try AESGCM.open(sealed.wrappedKey, key: classKey, aad: sealed.aad("key"))
            return try AESGCM.open(sealed.secret, key: itemKey, aad: sealed.aad("secret"))
        } catch {
            throw KeychainError.integrityFailure("item #\(sealed.id): its secret fails authentication")
        }
    }

    // MARK: writing items

    /// Seals a record and secret into a row under a fresh item key.
    private func seal(_ record: ItemRecord, secret: SecureBytes, id: Int64, version: Int64) throws -> SealedItem {
        guard secret.count <= maxSecretBytes else { throw KeychainError.secretTooLarge(secret.count) }
        let c = record.attributes.accessible
        if c == .whenPasscodeSetThisDeviceOnly && !hasPassphrase {
            throw KeychainError.invalidInput("'\(c.rawValue)' items need a store with a passphrase")
        }
        let (classKey, metadataKey) = keybag.withLock { ($0.classKey(c), $0.metadataKey(c)) }
        guard let classKey, let metadataKey else { throw KeychainError.unavailable(c) }
        var sealed = SealedItem(id: id, kind: record.key.kind.rawValue, classCode: c.code, version: version,
                                blind: try blind(record.key.canonicalBytes),
                                groupBlind: try blind(record.key.groupBytes),
                                wrappedKey: [], attributes: [], secret: [])
        let itemKey = SecureRandom.bytes(AESGCM.keyBytes)
        sealed.wrappedKey = try AESGCM.seal(itemKey, key: classKey, aad: sealed.aad("key"))
        let json = try JSONEncoder().encode(record)
        sealed.attributes = try json.withUnsafeBytes { try AESGCM.seal($0, key: metadataKey, aad: sealed.aad("attrs")) }
        sealed.secret = try AESGCM.seal(secret, key: itemKey, aad: sealed.aad("secret"))
        return sealed
    }

    /// Adds many new items in one transaction, so one durable commit: all or none.
    @discardableResult
    package func add(_ batch: [(record: ItemRecord, secret: SecureBytes)]) throws -> [KeychainItem] {
        try write { db in
            try batch.map { entry in
                let id = try Self.nextID(db)
                let sealed = try seal(entry.record, secret: entry.secret, id: id, version: 1)
                try Self.insertRow(sealed, db)
                return KeychainItem(sealed: sealed, record: entry.record)
            }
        }
    }

    /// Adds a new item; `duplicateItem` if one with the same primary key exists.
    @discardableResult
    public func add(_ record: ItemRecord, secret: SecureBytes) throws -> KeychainItem {
        try write { db in
            let id = try Self.nextID(db)
            let sealed = try seal(record, secret: secret, id: id, version: 1)
            try Self.insertRow(sealed, db)
            return KeychainItem(sealed: sealed, record: record)
        }
    }

    /// Re-seals `item` as `record` (which may change its key, class or attributes) with `secret`,
    /// or with its current secret when nil. `replacing`, if given, is deleted in the same
    /// transaction: that is how a rename onto an existing item is atomic.
    @discardableResult
    public func update(_ item: KeychainItem, to record: ItemRecord, secret: SecureBytes? = nil,
                       replacing other: KeychainItem? = nil) throws -> KeychainItem {
        let value = try secret ?? self.secret(of: item)
        var record = record
        record.attributes.modified = Date()
        return try write { db in
            let sealed = try seal(record, secret: value, id: item.id, version: item.sealed.version + 1)
            if let other, other.id != item.id {
                try db.execute(sql: "DELETE FROM items WHERE id = ?", arguments: [other.id])
            }
            guard try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM items WHERE id = ? AND version = ?",
                                   arguments: [item.id, item.sealed.version]) == 1 else {
                throw KeychainError.itemNotFound
            }
            try db.execute(sql: "DELETE FROM items WHERE id = ?", arguments: [item.id])
            try Self.insertRow(sealed, db)
            return KeychainItem(sealed: sealed, record: record)
        }
    }

    /// Adds the item, or with `updateExisting` updates the one with the same key: the secret
    /// and the given attributes change, the rest (and the creation date) stay.
    @discardableResult
    public func save(_ key: ItemKey, secret: SecureBytes, changes: AttributeChanges = AttributeChanges(),
                     defaultClass: AccessibilityClass = .default, updateExisting: Bool) throws -> KeychainItem {
        if let existing = try item(for: key) {
            guard updateExisting else { throw KeychainError.duplicateItem }
            var record = existing.record
            record.attributes = changes.applied(to: record.attributes)
            return try update(existing, to: record, secret: secret)
        }
        var attributes = changes.applied(to: ItemAttributes(accessible: defaultClass))
        attributes.modified = attributes.created
        return try add(ItemRecord(key: key, attributes: attributes), secret: secret)
    }

    /// Deletes these items, all or none.
    public func delete(_ items: [KeychainItem]) throws {
        try write { db in
            for item in items { try db.execute(sql: "DELETE FROM items WHERE id = ?", arguments: [item.id]) }
        }
    }

    private func write<T>(_ body: (Database) throws -> T) throws -> T {
        try Self.mappingErrors { try database.queue.write(body) }
    }

    private func read<T>(_ body: (Database) throws -> T) throws -> T {
        try Self.mappingErrors { try database.queue.read(body) }
    }

    /// Every failure leaves the store as a `KeychainError`: SQLite's and OpenSSL's included.
    static func mappingErrors<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let e as KeychainError {
            throw e
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

    private static func nextID(_ db: Database) throws -> Int64 {
        let v = try Data.fetchOne(db, sql: "SELECT value FROM meta WHERE name = 'next_id'")
            .flatMap { Int64(String(decoding: $0, as: UTF8.self)) } ?? 1
        // Ids are never reused, so an old row cannot pose as a later item with the same id.
        try db.execute(sql: "INSERT OR REPLACE INTO meta (name, value) VALUES ('next_id', ?)", arguments: [Data(String(v + 1).utf8)])
        return v
    }

    private static func insertRow(_ sealed: SealedItem, _ db: Database) throws {
        try db.execute(sql: "INSERT INTO items (\(SealedItem.columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       arguments: sealed.arguments)
    }
}

/// The order of find results and listings: generic before internet; then service (server,
/// port, path), account, protocol, authentication type, security domain, access group.
public enum ItemOrder {
    public static func precedes(_ a: KeychainItem, _ b: KeychainItem) -> Bool { sortKey(a.key).lexicographicallyPrecedes(sortKey(b.key)) }

    static func sortKey(_ k: ItemKey) -> [String] {
        switch k {
        case .generic(let g): ["1", g.service, g.account, g.accessGroup]
        case .internet(let i):
            ["2", i.server, String(format: "%05d", i.port), i.path, i.account, i.protocol.code.text,
             i.authenticationType.code.text, i.securityDomain, i.accessGroup]
        }
    }
}
