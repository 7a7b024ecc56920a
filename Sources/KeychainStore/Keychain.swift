import Foundation
import GRDB
import KeychainCrypto
import KeychainModel
import Synchronization

/// An open keychain store: the keybag and its lock state, and the items.
///
/// Thread-safe: the keybag sits behind a mutex and GRDB serialises database access, so the
/// FUSE worker threads and the control socket may share one instance.
/// @unchecked Sendable because the keybag is behind its Mutex and GRDB's queue serialises the
/// database; the other stored properties are constants.
public final class Keychain: @unchecked Sendable {
    /// The database file.
    public let path: String
    /// True when the store was created with a passphrase, so unlocking needs one.
    public let hasPassphrase: Bool
    let storeID: [UInt8]
    let database: StoreDatabase
    let keybag: Mutex<Keybag>
    let counter: StoreCounter
    /// The commits this machine has seen of the store (its rollback counter: one per write
    /// transaction), so tests can count the commits an operation makes.
    package var commitCount: UInt64 { counter.read() ?? 0 }
    /// Set by `--accept-rollback`: rows or a whole store older than this machine last saw are
    /// taken as they are, once, instead of refused.
    let acceptsRollback: Bool
    /// Seconds since 1970, for the wrong-passphrase backoff; a test gives its own clock.
    package let clock: @Sendable () -> Int
    /// The rows were checked against the ledger (needs the index key, so at open or at unlock).
    let rowsChecked = Mutex(false)
    /// Whether that check read every row (false: the files were as this machine left them).
    let checkReadRows = Mutex<Bool?>(nil)
    /// The ledger's bytes as this instance's last commit saved them (`RowLedger.load`): the
    /// next commit finds them unchanged unless another process committed meanwhile. Not secret.
    let ledgerWritten = Mutex<[UInt8]?>(nil)
    /// Commits whose files state is not recorded yet (`Keychain+FilesRecord.swift`); a leaf lock.
    let filesRecordDue = Mutex(FilesRecordDue())
    /// `RecentBlinds`; a leaf lock, taken inside `keybag`'s when a blind is remembered.
    let recentBlinds = Mutex(RecentBlinds())

    // MARK: opening

    /// Creates a new store, unlocked. `passphrase` nil makes a store protected by the device key only.
    public static func create(at path: String, passphrase: SecureBytes?, scrypt: ScryptParameters = .default,
                              deviceKeyPath: String = KeychainLocations.deviceKey) throws -> Keychain {
        ProcessProtection.makeNotDumpable()
        guard scrypt.isAcceptable else { throw KeychainError.invalidInput("scrypt parameters out of range") }
        if FileManager.default.fileExists(atPath: path) { throw KeychainError.storeExists(path) }
        try KeychainLocations.makeDirectory(PathText.parent(path), onlyIfNew: true)
        let deviceKey = try DeviceKey.loadOrCreate(path: deviceKeyPath)
        let salt = SecureRandom.array(KDFRecord.saltBytes)
        let passphraseKey = try passphrase.map { try Scrypt.deriveKey(passphrase: $0, salt: salt, parameters: scrypt) }
        let db = try StoreDatabase(path: path, create: true)
        let storeID = try db.queue.read { db in try Data.fetchOne(db, sql: "SELECT value FROM meta WHERE name = 'store_id'") }
        let id = [UInt8](storeID ?? Data())
        let (wrapped, indexKey) = try Keybag.create(passphraseKey: passphraseKey, deviceKey: deviceKey, storeID: id)
        let ledger = RowLedger(counter: 1, count: 0, digest: RowSetDigest())
        try db.queue.write { db in
            let meta: [(String, Data)] = [
                ("format", Data(StoreDatabase.format.utf8)),
                ("has_passphrase", Data([passphrase == nil ? 0 : 1])),
                ("next_id", Data("1".utf8)),
                ("key_generation", Data("1".utf8)),
            ]
            for (k, v) in meta { try db.execute(sql: "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", arguments: [k, v]) }
            try Self.insert(wrapped, db)
            if passphrase != nil { try KDFRecord.save(db, parameters: scrypt, salt: salt, generation: 1) }
            try ledger.save(db, keys: try RowLedger.Keys(indexKey: indexKey), storeID: id)
        }
        let keychain = try Keychain(openingAt: path, deviceKeyPath: deviceKeyPath)
        try keychain.keybag.withLock { bag in try bag.unlock(passphraseKey: passphraseKey, wrapped: try keychain.wrappedKeys()) }
        return keychain
    }

    /// Opens a store in the state "before first unlock": only what the device key opens. The
    /// rows are checked against the store's ledger and this machine's counter here if the
    /// device key opens the index key, else at unlock: a replayed, restored or removed row, or
    /// a whole store older than this machine last saw, is an integrity failure unless
    /// `acceptRollback`.
    public convenience init(openingAt path: String, deviceKeyPath: String = KeychainLocations.deviceKey,
                            acceptRollback: Bool = false) throws {
        try self.init(openingAt: path, deviceKeyPath: deviceKeyPath, acceptRollback: acceptRollback, clock: Self.wallClock)
    }

    /// As the public `init(openingAt:)`, with the clock the backoff reads.
    package init(openingAt path: String, deviceKeyPath: String = KeychainLocations.deviceKey,
                 acceptRollback: Bool = false, clock: @escaping @Sendable () -> Int) throws {
        ProcessProtection.makeNotDumpable()
        self.path = path
        self.clock = clock
        acceptsRollback = acceptRollback
        database = try StoreDatabase(path: path, create: false)
        let (flag, id, generationText) = try Self.mappingDatabaseErrors { [database] in try database.queue.read { db in
            (try Data.fetchOne(db, sql: "SELECT value FROM meta WHERE name = 'has_passphrase'"),
             try Data.fetchOne(db, sql: "SELECT value FROM meta WHERE name = 'store_id'"),
             try Data.fetchOne(db, sql: "SELECT value FROM meta WHERE name = 'key_generation'"))
        } }
        hasPassphrase = flag != Data([0])
        guard let id, id.count == 16, let generationText,
              let generation = Int64(String(decoding: generationText, as: UTF8.self)), generation >= 0 else {
            throw KeychainError.notAKeychain("\(path): the store's identity or key generation is damaged")
        }
        storeID = [UInt8](id)
        // First: it checks the state directory, where the counter is, too.
        let deviceKey = try DeviceKey.load(path: deviceKeyPath)
        counter = StoreCounter(stateDirectory: PathText.parent(deviceKeyPath), storeID: storeID,
                               storePath: path)
        // The files were as this machine's last commit or check left them until this open: what
        // its checkpoint made of them (the WAL folded in) is then such a state too.
        if let before = database.stateAtOpen, counter.readFiles() == before { counter.recordFiles(database.stateAfterOpen) }
        let wrapped = try Self.mappingDatabaseErrors { [database] in try database.queue.read { db in try Self.fetchWrapped(db) } }
        keybag = Mutex(try Keybag(wrapped: wrapped, hasPassphrase: hasPassphrase, storeID: storeID, generation: generation,
                                  deviceKey: deviceKey))
        try checkRows()
    }

    /// Closing folds what the WAL holds into the database file. If the files were as this
    /// machine's last commit or check left them, they still are after the close, so the next
    /// open need not read every row (`checkRows`).
    deinit {
        // Commits since the last `settle` leave it to do; an instance that only looked changes
        // nothing (not even entries a crash left waiting).
        if filesRecordDue.withLock({ $0.scheduled }) { settle() } else { recordFilesState() }
        let intact = rowsChecked.withLock { $0 } && StoreFileState(storePath: database.path) == counter.readFiles()
        try? database.close()
        if intact { counter.recordFiles(StoreFileState(storePath: database.path)) }
    }

    static func fetchWrapped(_ db: Database) throws -> [WrappedKey] {
        try Row.fetchAll(db, sql: "SELECT name, wrapping, generation, blob FROM wrapped_keys").map { row in
            guard let w = Wrapping(rawValue: row[1]) else {
                throw KeychainError.integrityFailure("the keybag has an entry of an unknown kind ('\(row[1] as String? ?? "")')")
            }
            return WrappedKey(name: row[0], wrapping: w, generation: row[2], blob: [UInt8](row[3] as Data))
        }
    }

    func wrappedKeys() throws -> [WrappedKey] { try read { try Self.fetchWrapped($0) } }

    static func insert(_ wrapped: [WrappedKey], _ db: Database) throws {
        for w in wrapped {
            try db.execute(sql: "INSERT OR REPLACE INTO wrapped_keys (name, wrapping, generation, blob) VALUES (?, ?, ?, ?)",
                           arguments: [w.name, w.wrapping.rawValue, w.generation, Data(w.blob)])
        }
    }

    // MARK: lock state

    /// Before first unlock, unlocked or locked: which class keys are held now.
    public var state: LockState { keybag.withLock { $0.state } }
    /// False when the device key file is missing: this-device-only items cannot be opened.
    public var deviceKeyPresent: Bool { keybag.withLock { $0.deviceKeyPresent } }
    /// The newest generation of class keys: new items are sealed under it.
    public var keyGeneration: Int64 { keybag.withLock { $0.generation } }

    /// The class's keys of the newest generation are held: items of it can be read and written.
    public func isAvailable(_ c: AccessibilityClass) -> Bool { keybag.withLock { $0.classKey(c) != nil } }

    /// Unlocks with the passphrase (nil for a store without one). A wrong passphrase changes
    /// nothing but the failure counter, which makes later attempts wait (`backoffDelay`).
    public func unlock(passphrase: SecureBytes?) throws {
        ProcessProtection.makeNotDumpable()
        let wrapped = try wrappedKeys()
        var passphraseKey: SecureBytes?
        if hasPassphrase {
            guard let passphrase else { throw KeychainError.wrongPassphrase }
            passphraseKey = try attempt(passphrase, wrapped: wrapped) { key in
                try keybag.withLock { try $0.unlock(passphraseKey: key, wrapped: wrapped) }
            }
        } else {
            try keybag.withLock { try $0.unlock(passphraseKey: nil, wrapped: wrapped) }
        }
        do {
            try checkRows()
            try migrateToGenerations(passphraseKey: passphraseKey)
        } catch {
            forgetKeys()
            throw error
        }
    }

    /// Proves that whoever asks knows the passphrase, as `unlock` checks it (a backoff in force
    /// refuses at once; a wrong one counts towards it), and changes nothing else: no key is
    /// installed or forgotten. For a change that a program's access list does not allow
    /// (`ServedKeychain.setAccessList`): a program of the user cannot type the passphrase.
    public func checkPassphrase(_ passphrase: SecureBytes) throws {
        guard hasPassphrase else {
            throw KeychainError.invalidInput("\(path) has no passphrase (it is protected by the device key only), so none can vouch for this change")
        }
        let wrapped = try wrappedKeys()
        _ = try attempt(passphrase, wrapped: wrapped) { key in
            try keybag.withLock { try $0.checkPassphrase(key, wrapped: wrapped) }
        }
    }

    /// One passphrase attempt: waits out no backoff (refuses while one is in force), derives
    /// the key and runs `opening` with it; `wrongPassphrase` from it is recorded. Returns the key.
    private func attempt(_ passphrase: SecureBytes, wrapped: [WrappedKey],
                         _ opening: (SecureBytes) throws -> Void) throws -> SecureBytes {
        let (failures, last) = try failureRecord()
        let wait = waitLeft(failures: failures, last: last)
        if wait > 0 { throw KeychainError.tooManyAttempts(retryAfter: wait) }
        // Damaged parameters, salt or verifier are reported as such and count no attempt.
        let record = try read { db in try KDFRecord.load(db, generation: self.keyGeneration, path: self.path) }
        let key = try Scrypt.deriveKey(passphrase: passphrase, salt: record.salt, parameters: record.parameters)
        do {
            try opening(key)
        } catch KeychainError.wrongPassphrase {
            try setFailureRecord(failures + 1, clock())
            throw KeychainError.wrongPassphrase
        }
        if failures != 0 { try setFailureRecord(0, 0) }
        return key
    }

    package static let wallClock: @Sendable () -> Int = { Int(Date().timeIntervalSince1970) }

    /// Seconds before a passphrase attempt would be judged (`attempt`), 0 when one would be
    /// now: a command asks for the passphrase only once it would be heard.
    package func passphraseWait() throws -> Int {
        let (failures, last) = try failureRecord()
        return max(0, waitLeft(failures: failures, last: last))
    }

    private func waitLeft(failures: Int, last: Int) -> Int { last + Self.backoffDelay(failures: failures) - clock() }

    /// Seconds to wait after `failures` wrong passphrases in a row: none for the first two,
    /// then 5 s, doubling up to an hour.
    package static func backoffDelay(failures: Int) -> Int {
        failures < 3 ? 0 : min(5 << min(failures - 3, 20), 3600)
    }

    /// Wrong passphrases in a row and the time of the last one, kept in the store. A time in
    /// the future (a clock that was wrong) counts as now, so the wait is never over an hour.
    package func failureRecord() throws -> (failures: Int, lastFailure: Int) {
        try read { db in
            func int(_ name: String) throws -> Int {
                try Data.fetchOne(db, sql: "SELECT value FROM meta WHERE name = ?", arguments: [name])
                    .flatMap { Int(String(decoding: $0, as: UTF8.self)) } ?? 0
            }
            return (max(0, try int("failed_unlocks")), min(try int("last_failed_unlock"), self.clock()))
        }
    }

    private func setFailureRecord(_ failures: Int, _ time: Int) throws {
        try database.durable { db in
            for (k, v) in [("failed_unlocks", failures), ("last_failed_unlock", time)] {
                try db.execute(sql: "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
                               arguments: [k, Data(String(v).utf8)])
            }
        }
    }

    /// Forgets the keys of `when-unlocked*` items at once.
    public func lock() { keybag.withLock { $0.lock() } }

    /// Forgets every key, as at unmount.
    public func forgetKeys() {
        keybag.withLock { $0.forget() }
        recentBlinds.withLock { $0.forget() }
    }

    // MARK: generations

    /// Changes the passphrase and starts a new generation of class keys: new items are sealed
    /// under it, and the old passphrase (with an old copy of the store) opens none of them.
    /// Older generations stay reachable from the new one, so older items still read. The cost
    /// does not depend on the number of items; `rekey` re-seals them too.
    public func changePassphrase(old: SecureBytes, new: SecureBytes, scrypt: ScryptParameters? = nil) throws {
        guard hasPassphrase else {
            throw KeychainError.invalidInput("this store has no passphrase (it was made with --no-passphrase)")
        }
        // Always check the old passphrase, even when already unlocked.
        try unlock(passphrase: old)
        let current = try read { db in try KDFRecord.load(db, generation: self.keyGeneration, path: self.path) }
        let params = scrypt ?? current.parameters
        guard params.isAcceptable else { throw KeychainError.invalidInput("scrypt parameters out of range") }
        let salt = SecureRandom.array(KDFRecord.saltBytes)
        let newKey = try Scrypt.deriveKey(passphrase: new, salt: salt, parameters: params)
        try startGeneration(passphraseKey: newKey) { db, generation in
            try KDFRecord.save(db, parameters: params, salt: salt, generation: generation)
        }
    }

    /// Removes the passphrase: as iOS does when the passcode goes, the
    /// `when-passcode-set-this-device-only` items are deleted, and a new generation of keys is
    /// wrapped by the device key only. One transaction: on failure nothing changed. Returns how
    /// many items were deleted. This instance forgets its keys; open the store again.
    @discardableResult
    public func removePassphrase(_ passphrase: SecureBytes) throws -> Int {
        guard hasPassphrase else {
            throw KeychainError.invalidInput("\(path) has no passphrase (it is protected by the device key only)")
        }
        try unlock(passphrase: passphrase)
        defer { forgetKeys() }
        let rows = try keybag.withLock { try $0.nextGeneration(passphraseKey: nil, withPassphrase: false) }
        let passcode = AccessibilityClass.whenPasscodeSetThisDeviceOnly
        return try replaceGeneration(rows, hasPassphrase: false) { db, changes in
            let ids = try Int64.fetchAll(db, sql: "SELECT id FROM items WHERE class = ?", arguments: [passcode.code])
            for id in ids { try Self.deleteRow(id, db, &changes) }
            try db.execute(sql: "DELETE FROM wrapped_keys WHERE name = ?", arguments: [Keybag.classKeyName(passcode)])
            return ids.count
        }
    }

    /// Gives a device-key-only store a passphrase: a new generation of keys wrapped as in a store
    /// made with one, and `when-passcode-set-this-device-only` items become possible. Items are
    /// untouched. This instance forgets its keys; open the store again.
    public func addPassphrase(_ passphrase: SecureBytes, scrypt: ScryptParameters = .default) throws {
        guard !hasPassphrase else {
            throw KeychainError.invalidInput("\(path) already has a passphrase ('keychainfs passwd' changes it)")
        }
        guard scrypt.isAcceptable else { throw KeychainError.invalidInput("scrypt parameters out of range") }
        guard passphrase.count > 0 else { throw KeychainError.invalidInput("the passphrase is empty") }
        try unlock(passphrase: nil)
        defer { forgetKeys() }
        let salt = SecureRandom.array(KDFRecord.saltBytes)
        let key = try Self.mappingDatabaseErrors { try Scrypt.deriveKey(passphrase: passphrase, salt: salt, parameters: scrypt) }
        let rows = try keybag.withLock { try $0.nextGeneration(passphraseKey: key, withPassphrase: true) }
        let next = keyGeneration + 1
        try replaceGeneration(rows, hasPassphrase: true) { db, _ in
            try KDFRecord.save(db, parameters: scrypt, salt: salt, generation: next)
        }
    }

    /// Writes a generation made for the other kind of store (with or without a passphrase).
    private func replaceGeneration<T>(_ rows: [WrappedKey], hasPassphrase: Bool,
                                      _ body: (Database, inout RowChanges) throws -> T) throws -> T {
        let generation = keyGeneration
        return try write(.removes) { db, changes in
            try db.execute(sql: "DELETE FROM wrapped_keys WHERE generation = ?", arguments: [generation])
            try Self.insert(rows, db)
            try db.execute(sql: "UPDATE meta SET value = ? WHERE name = 'key_generation'", arguments: [Data(String(generation + 1).utf8)])
            try db.execute(sql: "INSERT OR REPLACE INTO meta (name, value) VALUES ('has_passphrase', ?)",
                           arguments: [Data([hasPassphrase ? 1 : 0])])
            try db.execute(sql: "DELETE FROM meta WHERE name IN ('failed_unlocks', 'last_failed_unlock')")
            return try body(db, &changes)
        }
    }

    /// Replaces the newest generation's rows with the next generation's, in one transaction,
    /// then holds the new keys.
    private func startGeneration(passphraseKey: SecureBytes?, alsoWrite: (Database, Int64) throws -> Void) throws {
        let rows = try keybag.withLock { try $0.nextGeneration(passphraseKey: passphraseKey) }
        let generation = keyGeneration
        let next = generation + 1
        try write(.removes) { db, _ in
            try db.execute(sql: "DELETE FROM wrapped_keys WHERE generation = ?", arguments: [generation])
            try Self.insert(rows, db)
            try db.execute(sql: "UPDATE meta SET value = ? WHERE name = 'key_generation'", arguments: [Data(String(next).utf8)])
            try alsoWrite(db, next)
        }
        let wrapped = try wrappedKeys()
        var bag = try Keybag(wrapped: wrapped, hasPassphrase: hasPassphrase, storeID: storeID, generation: next,
                             deviceKey: keybag.withLock { $0.deviceKey })
        try bag.unlock(passphraseKey: passphraseKey, wrapped: wrapped)
        keybag.withLock { $0 = bag }
    }

    /// A store made before generations gets its first at its first full unlock: from then on
    /// its keybag's rows name the store, and passphrase changes revoke.
    private func migrateToGenerations(passphraseKey: SecureBytes?) throws {
        guard keyGeneration == 0, keybag.withLock({ $0.holdsEveryClassKey }) else { return }
        let salt = try read { db in try Data.fetchOne(db, sql: "SELECT value FROM meta WHERE name = 'salt'") }
        let params = hasPassphrase
            ? try read { db in try KDFRecord.load(db, generation: 0, path: self.path).parameters } : nil
        try startGeneration(passphraseKey: passphraseKey) { db, generation in
            if let params, let salt { try KDFRecord.save(db, parameters: params, salt: [UInt8](salt), generation: generation) }
        }
    }
}
