import Foundation
import GRDB
import GRDBSQLite
import KeychainCrypto
import CStoreVFS

/// The SQLite file: schema, migrations and the few statements the keychain runs.
/// Nothing here is plaintext but the item kind, class number and version.
struct StoreDatabase {
    static let format = "keychainfs-store"
    let queue: DatabaseQueue
    let log: WriteAheadLog
    /// The database's path with its links resolved (`StoreFiles.resolved`): its side files are beside it.
    let path: String
    /// The files before this open touched them, and after its checkpoint.
    let stateAtOpen: StoreFileState?
    let stateAfterOpen: StoreFileState?
    /// Hears writes to the files from the end of the open on (`StoreFileWatch`); nil if it cannot.
    let watch: StoreFileWatch?

    static func migrator() -> DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);
                CREATE TABLE wrapped_keys (
                    name TEXT NOT NULL, wrapping TEXT NOT NULL, blob BLOB NOT NULL,
                    PRIMARY KEY (name, wrapping));
                CREATE TABLE items (
                    id INTEGER PRIMARY KEY,
                    kind INTEGER NOT NULL,
                    class INTEGER NOT NULL,
                    version INTEGER NOT NULL,
                    blind BLOB NOT NULL UNIQUE,
                    group_blind BLOB NOT NULL,
                    wrapped_key BLOB NOT NULL,
                    attributes BLOB NOT NULL,
                    secret BLOB NOT NULL);
                CREATE INDEX items_group ON items (group_blind);
                """)
        }
        // Generations of class keys, a sealed part for extras, and the store's identity. Rows
        // written before this keep generation 0: the earlier associated data and key names.
        m.registerMigration("v2") { db in
            try db.execute(sql: """
                ALTER TABLE items ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE items ADD COLUMN extras BLOB;
                CREATE TABLE wrapped_keys_v2 (
                    name TEXT NOT NULL, wrapping TEXT NOT NULL, generation INTEGER NOT NULL, blob BLOB NOT NULL,
                    PRIMARY KEY (name, wrapping, generation));
                INSERT INTO wrapped_keys_v2 (name, wrapping, generation, blob) SELECT name, wrapping, 0, blob FROM wrapped_keys;
                DROP TABLE wrapped_keys;
                ALTER TABLE wrapped_keys_v2 RENAME TO wrapped_keys;
                """)
            try db.execute(sql: "INSERT OR IGNORE INTO meta (name, value) VALUES ('store_id', ?), ('key_generation', ?)",
                           arguments: [Data(SecureRandom.array(16)), Data("0".utf8)])
            try KDFRecord.sealLegacy(db)
        }
        // The group index carries the class, so that the classes of a service's items (the
        // class rule of every create) take a few probes, not a pass over the service's rows.
        m.registerMigration("v3") { db in
            try db.execute(sql: """
                CREATE INDEX items_group_class ON items (group_blind, class);
                DROP INDEX items_group;
                """)
        }
        // The blind index of each Secret Service attribute pair (SecretAttributeIndex.swift).
        m.registerMigration("secret-attributes") { db in try db.execute(sql: Keychain.attributeIndexSchema) }
        // The default access lists of directories (Keychain+DirectoryAccess.swift).
        m.registerMigration("directory-access") { db in try db.execute(sql: Keychain.directoryAccessSchema) }
        // Every row's attributes, name fields included, from here on; earlier rows later.
        m.registerMigration("secret-attributes-2") { db in try db.execute(sql: Keychain.attributeIndexFrom) }
        // New rows' index entries, until they are moved into the index (SecretAttributeIndex.swift).
        m.registerMigration("attribute-pending") { db in try db.execute(sql: Keychain.pendingTagsSchema) }
        return m
    }

    /// Sets a meta value in place. `INSERT OR REPLACE` would delete the row and insert it again,
    /// which rewrites the page of the name index too: a page more in every commit.
    static func setMeta(_ db: Database, _ name: String, _ value: Data) throws {
        try setMeta(db, name, bytes: [UInt8](value))
    }

    /// `setMeta`, bound straight to SQLite (every commit saves the ledger so: GRDB's
    /// `StatementArguments` and `Data` were a thirtieth of a durable update's instructions).
    static func setMeta(_ db: Database, _ name: String, bytes value: [UInt8]) throws {
        func run(_ sql: String, value at: Int32, name nameAt: Int32) throws {
            let raw = try db.cachedStatement(sql: sql).sqliteStatement
            sqlite3_reset(raw)
            // SQLITE_TRANSIENT: SQLite copies the bytes, so nothing bound must outlive the call.
            let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
            var rc = value.withUnsafeBytes {
                sqlite3_bind_blob(raw, at, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32($0.count), transient)
            }
            if rc == SQLITE_OK { rc = sqlite3_bind_text(raw, nameAt, name, -1, transient) }
            guard rc == SQLITE_OK else { throw DatabaseError(resultCode: ResultCode(rawValue: rc)) }
            let step = sqlite3_step(raw)
            sqlite3_reset(raw)
            guard step == SQLITE_DONE else {
                throw DatabaseError(resultCode: ResultCode(rawValue: step), message: String(cString: sqlite3_errmsg(db.sqliteConnection)))
            }
        }
        try run("UPDATE meta SET value = ? WHERE name = ?", value: 1, name: 2)
        if sqlite3_changes(db.sqliteConnection) == 0 { try run("INSERT INTO meta (name, value) VALUES (?, ?)", value: 2, name: 1) }
    }

    /// The value of the meta row `sql` selects (`SELECT value FROM meta WHERE name = '...'`,
    /// a fixed statement, kept compiled); nil if there is none. Straight from SQLite, for the
    /// reads every commit makes.
    static func metaBytes(_ db: Database, sql: String) throws -> [UInt8]? {
        let raw = try db.cachedStatement(sql: sql).sqliteStatement
        sqlite3_reset(raw)
        defer { sqlite3_reset(raw) }
        let rc = sqlite3_step(raw)
        if rc == SQLITE_DONE { return nil }
        guard rc == SQLITE_ROW else { throw DatabaseError(resultCode: ResultCode(rawValue: rc)) }
        // As GRDB's `Data` decoding: a blob or a text's bytes, NULL as no value, and a number
        // (a forged or damaged row) refused.
        let type = sqlite3_column_type(raw, 0)
        if type == SQLITE_NULL { return nil }
        guard type == SQLITE_BLOB || type == SQLITE_TEXT else {
            throw KeychainError.integrityFailure("a value in the store's meta table has the wrong type (\(sql))")
        }
        let count = Int(sqlite3_column_bytes(raw, 0))
        guard count > 0, let base = sqlite3_column_blob(raw, 0) else { return [] }
        return [UInt8](UnsafeRawBufferPointer(start: base, count: count))
    }

    /// Opens an existing store; `create` makes a new file instead.
    init(path given: String, create: Bool) throws {
        let path = StoreFiles.resolved(given)
        self.path = path
        // The directory of a link to the store too: whoever can write there can point it elsewhere.
        if path != KeychainLocations.absolute(given) { try StoreFiles.checkDirectory(of: given) }
        // Every connection of this process through the store's VFS (WriteAheadLog).
        guard kcfs_store_vfs_install() == SQLITE_OK else { throw KeychainError.io("cannot install the store's SQLite VFS") }
        var config = Configuration()
        config.prepareDatabase { db in
            try db.execute(sql: "PRAGMA secure_delete = ON")
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        config.busyMode = .timeout(10)
        stateAtOpen = create ? nil : StoreFileState(storePath: path)
        if !create {
            guard FileManager.default.fileExists(atPath: path) else { throw KeychainError.noSuchStore(path) }
        }
        // Before SQLite opens or creates anything (StoreFiles).
        var madeFiles = try StoreFiles.prepare(storePath: path, create: create)
        var opened = false
        defer { if !opened { StoreFiles.removeUnused(madeFiles) } }
        let wal = WriteAheadLog(storePath: path)
        var reserveReleased = false
        while true {
            do {
                if !create {
                    // Check the format through SQLite, read-only, before anything writes to the file: a foreign
                    // file must be left as it was. (Not with FileHandle: closing it would drop the POSIX locks
                    // that other connections in this process hold on the file, and another process could
                    // then delete the WAL under them.)
                    var probeConfig = Configuration()
                    probeConfig.readonly = true
                    probeConfig.busyMode = .timeout(10)
                    let probe = try DatabaseQueue(path: path, configuration: probeConfig)
                    let ok = try probe.read { db in
                        try db.tableExists("meta")
                            && (try Data.fetchOne(db, sql: "SELECT value FROM meta WHERE name = 'format'")) == Data(Self.format.utf8)
                    }
                    try probe.close()
                    guard ok else { throw KeychainError.notAKeychain("\(path) is not a keychainfs store") }
                    try StoreFiles.checkDatabase(path)
                    madeFiles += try StoreFiles.makeMissingWAL(storePath: path)
                }
                let queue = try DatabaseQueue(path: path, configuration: config)
                try queue.writeWithoutTransaction { db in _ = try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL") }
                try Self.migrator().migrate(queue)
                // A crash (or a full disk) may have left old frames in the WAL: fold them in and empty it.
                try queue.writeWithoutTransaction { db in wal.truncate(db) }
                wal.keepReserve()
                self.queue = queue
                log = wal
                // Before the state is taken: a write after it is heard.
                watch = StoreFileWatch(storePath: path)
                stateAfterOpen = StoreFileState(storePath: path)
                opened = true
                return
            } catch let e as KeychainError {
                throw e
            } catch let e as DatabaseError where !reserveReleased && Self.needsRoomToOpen(e) && wal.releaseReserve() {
                // SQLite makes the -shm anew at every open after the last close deleted it, and a
                // full disk has no 32 KiB for it: the reserve gives it room, so that a command can
                // still read the store and delete from it (made again once there is room).
                reserveReleased = true
                madeFiles += try StoreFiles.makeMissingWAL(storePath: path)
                continue
            } catch let e as DatabaseError where Self.needsRoomToOpen(e) {
                throw KeychainError.diskFull
            } catch let e as DatabaseError where e.resultCode == .SQLITE_NOTADB || e.resultCode == .SQLITE_CORRUPT {
                throw KeychainError.notAKeychain("\(path) is corrupt or not a keychainfs store: \(e.message ?? "\(e)")")
            } catch {
                throw KeychainError.io("cannot open \(path): \(error)")
            }
        }
    }

    /// An open that failed for want of disk space: the -shm could not be sized, or a write found no room.
    private static func needsRoomToOpen(_ e: DatabaseError) -> Bool {
        e.resultCode == .SQLITE_FULL || [ResultCode.SQLITE_IOERR_SHMSIZE, .SQLITE_IOERR_SHMOPEN, .SQLITE_IOERR_SHMMAP]
            .contains(e.extendedResultCode)
    }
}

extension StoreDatabase {
    /// Closes the store with its WAL emptied and the zeros on disk. The last connection to close
    /// deletes the WAL (every command run without a daemon), and the file system takes its
    /// blocks back as they are, dropping the pages not yet written: without this, the frames of
    /// the commits since the last emptying (a create's, whose value a later delete removes)
    /// would stay on the disk's free blocks.
    func close() throws {
        let emptied = Result {
            try queue.writeWithoutTransaction { db in
                // Without waiting for another connection (a reader would hold the close for the
                // whole busy timeout): while one is open, SQLite does not delete the WAL either.
                sqlite3_busy_timeout(db.sqliteConnection, 0)
                // Synced whatever this emptying found: an earlier one's zeros may not be written yet.
                if log.truncate(db) { try log.syncFrames() }
            }
        }
        try queue.close()
        try emptied.get()
    }
}

/// One `items` row as stored: everything sealed, plus what the seals are bound to.
package struct SealedItem: Sendable, Hashable {
    package var id: Int64
    package var kind: Int
    package var classCode: Int
    package var version: Int64
    package var blind: [UInt8]
    package var groupBlind: [UInt8]
    package var wrappedKey: [UInt8]
    package var attributes: [UInt8]
    package var secret: [UInt8]
    /// The generation of the class key that wraps the item key; 0 for rows sealed before generations.
    package var generation: Int64
    /// Git's extras, sealed under the item key like the secret; nil when none.
    package var extras: [UInt8]?
    /// The blind indexes of the Secret Service attribute pairs in the extras, written beside
    /// the row (`attribute_index`); only a freshly sealed row knows them.
    package var attributeTags: [[UInt8]] = []

    static let columns = "id, kind, class, version, blind, group_blind, wrapped_key, attributes, secret, generation, extras"

    /// A row whose columns hold the wrong SQLite types (forged or damaged) is that item's
    /// integrity failure, never a trap.
    init(row: Row) throws(KeychainError) {
        let id: Int64 = switch (row[0] as DatabaseValue).storage { case .int64(let v): v; default: -1 }
        func integer(_ i: Int, _ column: String) throws(KeychainError) -> Int64 {
            guard case .int64(let v) = (row[i] as DatabaseValue).storage else { throw Self.damaged(id, column) }
            return v
        }
        // Text is taken as its bytes, as SQLite's own `||` turns a blob into text: such a
        // value then fails authentication like any other altered byte.
        func blob(_ i: Int, _ column: String) throws(KeychainError) -> [UInt8] {
            switch (row[i] as DatabaseValue).storage {
            case .blob(let d): return [UInt8](d)
            case .string(let s): return Array(s.utf8)
            default: throw Self.damaged(id, column)
            }
        }
        self.id = id
        kind = Int(try integer(1, "kind")); classCode = Int(try integer(2, "class")); version = try integer(3, "version")
        blind = try blob(4, "blind"); groupBlind = try blob(5, "group_blind")
        wrappedKey = try blob(6, "wrapped_key"); attributes = try blob(7, "attributes"); secret = try blob(8, "secret")
        generation = try integer(9, "generation")
        extras = (row[10] as DatabaseValue).isNull ? nil : try blob(10, "extras")
    }

    /// The rows a `SELECT \(columns) ...` returns, each as a row or as that row's id and the
    /// reason it is damaged (the same checks as `init(row:)`). Read straight from the statement:
    /// at 100,000 rows GRDB's `Row` and `Data` copies were a third of the time of loading them.
    /// `sql` is one of a few fixed statements, so it is prepared once and kept (`cachedStatement`).
    static func fetchAll(_ db: Database, sql: String, arguments: StatementArguments = StatementArguments())
        throws -> [Result<SealedItem, DamagedRow>] {
        let statement = try db.cachedStatement(sql: sql)
        try statement.setArguments(arguments)
        let raw = statement.sqliteStatement
        var out: [Result<SealedItem, DamagedRow>] = []
        while true {
            let rc = sqlite3_step(raw)
            if rc == SQLITE_DONE { break }
            guard rc == SQLITE_ROW else { throw DatabaseError(resultCode: ResultCode(rawValue: rc)) }
            let id: Int64 = sqlite3_column_type(raw, 0) == SQLITE_INTEGER ? sqlite3_column_int64(raw, 0) : -1
            do {
                out.append(.success(try SealedItem(statement: raw, id: id)))
            } catch {
                out.append(.failure(DamagedRow(id: id, error: error)))
            }
        }
        return out
    }

    /// The row with this id from `sql` (a `SELECT \(columns) ... WHERE id = ?`), read straight
    /// from the statement as `fetchAll` does; nil if there is none. Every update through the
    /// mount reads its row so: GRDB's `Row` and the checks through it were an eighth of its instructions.
    static func fetchOne(_ db: Database, sql: String, id: Int64) throws -> SealedItem? {
        let raw = try db.cachedStatement(sql: sql).sqliteStatement
        sqlite3_reset(raw)
        guard sqlite3_bind_int64(raw, 1, id) == SQLITE_OK else { throw DatabaseError(resultCode: .SQLITE_MISUSE) }
        // Reset before returning, so that no read transaction is left open on the statement.
        defer { sqlite3_reset(raw) }
        let rc = sqlite3_step(raw)
        if rc == SQLITE_DONE { return nil }
        guard rc == SQLITE_ROW else { throw DatabaseError(resultCode: ResultCode(rawValue: rc)) }
        let rowID: Int64 = sqlite3_column_type(raw, 0) == SQLITE_INTEGER ? sqlite3_column_int64(raw, 0) : -1
        return try SealedItem(statement: raw, id: rowID)
    }

    struct DamagedRow: Error {
        var id: Int64
        var error: KeychainError
    }

    /// What tells whether a row's decoded item is still current (`Keychain.isCurrent`): its
    /// id, class, version and key generation, nil where a column is not an integer (a
    /// damaged row, which only a read of the whole row reports).
    package struct Head: Sendable {
        package var id: Int64
        package var classCode: Int?
        package var version: Int64?
        package var generation: Int64?
    }

    var head: Head { Head(id: id, classCode: classCode, version: version, generation: generation) }

    /// The heads a `SELECT id, class, version, generation ...` returns: no blob is copied.
    static func fetchHeads(_ db: Database, sql: String, arguments: StatementArguments) throws -> [Head] {
        let statement = try db.cachedStatement(sql: sql)
        try statement.setArguments(arguments)
        let raw = statement.sqliteStatement
        func integer(_ i: Int32) -> Int64? { sqlite3_column_type(raw, i) == SQLITE_INTEGER ? sqlite3_column_int64(raw, i) : nil }
        var out: [Head] = []
        while true {
            let rc = sqlite3_step(raw)
            if rc == SQLITE_DONE { break }
            guard rc == SQLITE_ROW else { throw DatabaseError(resultCode: ResultCode(rawValue: rc)) }
            out.append(Head(id: integer(0) ?? -1, classCode: integer(1).map(Int.init), version: integer(2), generation: integer(3)))
        }
        return out
    }

    private init(statement raw: OpaquePointer?, id: Int64) throws(KeychainError) {
        func integer(_ i: Int32, _ column: String) throws(KeychainError) -> Int64 {
            guard sqlite3_column_type(raw, i) == SQLITE_INTEGER else { throw Self.damaged(id, column) }
            return sqlite3_column_int64(raw, i)
        }
        // Text is taken as its bytes, as in `init(row:)`.
        func blob(_ i: Int32, _ column: String) throws(KeychainError) -> [UInt8] {
            let type = sqlite3_column_type(raw, i)
            guard type == SQLITE_BLOB || type == SQLITE_TEXT else { throw Self.damaged(id, column) }
            let count = Int(sqlite3_column_bytes(raw, i))
            guard count > 0, let base = sqlite3_column_blob(raw, i) else { return [] }
            return [UInt8](UnsafeRawBufferPointer(start: base, count: count))
        }
        self.id = id
        kind = Int(try integer(1, "kind")); classCode = Int(try integer(2, "class")); version = try integer(3, "version")
        blind = try blob(4, "blind"); groupBlind = try blob(5, "group_blind")
        wrappedKey = try blob(6, "wrapped_key"); attributes = try blob(7, "attributes"); secret = try blob(8, "secret")
        generation = try integer(9, "generation")
        extras = sqlite3_column_type(raw, 10) == SQLITE_NULL ? nil : try blob(10, "extras")
    }

    private static func damaged(_ id: Int64, _ column: String) -> KeychainError {
        .integrityFailure("item #\(id): its \(column) column holds a value of the wrong type")
    }

    init(id: Int64, kind: Int, classCode: Int, version: Int64, blind: [UInt8], groupBlind: [UInt8],
         wrappedKey: [UInt8], attributes: [UInt8], secret: [UInt8], generation: Int64, extras: [UInt8]?) {
        self.id = id; self.kind = kind; self.classCode = classCode; self.version = version
        self.blind = blind; self.groupBlind = groupBlind
        self.wrappedKey = wrappedKey; self.attributes = attributes; self.secret = secret
        self.generation = generation; self.extras = extras
    }

    /// Runs `statement`, an `INSERT INTO items (\(columns)) VALUES (?, ...)`, for this row, binding
    /// the columns straight from their arrays: an import spent a fifth of its writing thread in
    /// `StatementArguments` and their `Data` copies.
    func insert(with statement: Statement) throws {
        let raw = statement.sqliteStatement
        sqlite3_reset(raw)
        sqlite3_clear_bindings(raw)
        var rc = SQLITE_OK
        func check(_ r: Int32) { if rc == SQLITE_OK { rc = r } }
        func bind(_ i: Int32, _ bytes: [UInt8]) {
            // SQLITE_TRANSIENT: SQLite copies the bytes, so no array must outlive this call.
            check(bytes.withUnsafeBytes { sqlite3_bind_blob(raw, i, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32($0.count),
                                                               unsafeBitCast(-1, to: sqlite3_destructor_type.self)) })
        }
        check(sqlite3_bind_int64(raw, 1, id)); check(sqlite3_bind_int64(raw, 2, Int64(kind)))
        check(sqlite3_bind_int64(raw, 3, Int64(classCode))); check(sqlite3_bind_int64(raw, 4, version))
        bind(5, blind); bind(6, groupBlind); bind(7, wrappedKey); bind(8, attributes); bind(9, secret)
        check(sqlite3_bind_int64(raw, 10, generation))
        if let extras { bind(11, extras) } else { check(sqlite3_bind_null(raw, 11)) }
        guard rc == SQLITE_OK else { throw DatabaseError(resultCode: ResultCode(rawValue: rc)) }
        let step = sqlite3_step(raw)
        sqlite3_reset(raw)
        guard step == SQLITE_DONE else {
            throw DatabaseError(resultCode: ResultCode(rawValue: step), message: String(cString: sqlite3_errmsg(sqlite3_db_handle(raw))))
        }
    }

    /// Runs `statement`, `Keychain.replaceRow`'s UPDATE, for this row, bound as `insert` binds:
    /// an update's `StatementArguments` and `Data` copies were a tenth of its instructions.
    func update(with statement: Statement, keyChanged: Bool, previousVersion: Int64) throws {
        let raw = statement.sqliteStatement
        sqlite3_reset(raw)
        sqlite3_clear_bindings(raw)
        var rc = SQLITE_OK
        func check(_ r: Int32) { if rc == SQLITE_OK { rc = r } }
        var i: Int32 = 0
        func next() -> Int32 { i += 1; return i }
        func bind(_ bytes: [UInt8]) {
            let at = next()
            check(bytes.withUnsafeBytes { sqlite3_bind_blob(raw, at, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32($0.count),
                                                               unsafeBitCast(-1, to: sqlite3_destructor_type.self)) })
        }
        func bind(_ v: Int64) { check(sqlite3_bind_int64(raw, next(), v)) }
        bind(Int64(kind)); bind(version)
        if keyChanged { bind(blind); bind(groupBlind) }
        bind(wrappedKey); bind(attributes); bind(secret); bind(generation)
        if let extras { bind(extras) } else { check(sqlite3_bind_null(raw, next())) }
        bind(id); bind(previousVersion)
        guard rc == SQLITE_OK else { throw DatabaseError(resultCode: ResultCode(rawValue: rc)) }
        let step = sqlite3_step(raw)
        sqlite3_reset(raw)
        guard step == SQLITE_DONE else {
            throw DatabaseError(resultCode: ResultCode(rawValue: step), message: String(cString: sqlite3_errmsg(sqlite3_db_handle(raw))))
        }
    }

    /// Runs `statement`, `Keychain.replaceRow`'s change of class (`?1` the class, `?2` the id),
    /// bound straight to SQLite as `update` binds.
    func setClass(with statement: Statement) throws {
        let raw = statement.sqliteStatement
        sqlite3_reset(raw)
        var rc = sqlite3_bind_int64(raw, 1, Int64(classCode))
        if rc == SQLITE_OK { rc = sqlite3_bind_int64(raw, 2, id) }
        guard rc == SQLITE_OK else { throw DatabaseError(resultCode: ResultCode(rawValue: rc)) }
        let step = sqlite3_step(raw)
        sqlite3_reset(raw)
        guard step == SQLITE_DONE else {
            throw DatabaseError(resultCode: ResultCode(rawValue: step), message: String(cString: sqlite3_errmsg(sqlite3_db_handle(raw))))
        }
    }

    var arguments: StatementArguments {
        [id, kind, classCode, version, Data(blind), Data(groupBlind), Data(wrappedKey), Data(attributes), Data(secret),
         generation, extras.map { Data($0) }]
    }

    /// What every seal of this row is bound to, so a row moved, replayed under another id,
    /// reclassed, re-keyed or moved to another generation fails to open.
    func aad(_ part: String) -> [UInt8] {
        // Built in one buffer: sealing and opening a row call this three times each.
        var out: [UInt8] = []
        out.reserveCapacity(16 + part.utf8.count + 5 * 8 + blind.count + groupBlind.count)
        out.append(contentsOf: generation != 0 ? Self.aadV2 : Self.aadV1)
        out.append(contentsOf: part.utf8)
        out.append(UInt8(ascii: "|"))
        func field(_ v: UInt64) { withUnsafeBytes(of: v.bigEndian) { out.append(contentsOf: $0) } }
        field(UInt64(bitPattern: id)); field(UInt64(classCode)); field(UInt64(bitPattern: version)); field(UInt64(kind))
        if generation != 0 { field(UInt64(bitPattern: generation)) }
        out.append(contentsOf: blind)
        out.append(contentsOf: groupBlind)
        return out
    }

    private static let aadV1 = Array("kcfs-item-v1|".utf8)
    private static let aadV2 = Array("kcfs-item-v2|".utf8)
}
