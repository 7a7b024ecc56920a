import Foundation
import GRDB
import KeychainCrypto
import KeychainModel
import KeychainStore
import XCTest

final class StoreFileTests: XCTestCase {
    var store: TempStore!

    override func setUpWithError() throws {
        store = try TempStore()
        try FileManager.default.createDirectory(atPath: store.directory + "/store", withIntermediateDirectories: true)
    }
    override func tearDown() { store = nil }

    func testMissingStoreIsNoSuchStore() {
        assertKeychainError(isNoSuchStore, "noSuchStore", try store.open())
        XCTAssertFalse(FileManager.default.fileExists(atPath: store.path), "opening must not create the store")
    }

    func testRandomFileIsNotAKeychain() throws {
        try Data(SecureRandom.array(4096)).write(to: URL(fileURLWithPath: store.path))
        assertKeychainError(isNotAKeychain, "notAKeychain", try store.open())
    }

    func testEmptyFileIsNotAKeychain() throws {
        XCTAssertTrue(FileManager.default.createFile(atPath: store.path, contents: Data()))
        assertKeychainError(isNotAKeychain, "notAKeychain", try store.open())
    }

    func testTextFileIsNotAKeychain() throws {
        try Data("just some notes\n".utf8).write(to: URL(fileURLWithPath: store.path))
        assertKeychainError(isNotAKeychain, "notAKeychain", try store.open())
    }

    func testSQLiteFileWithAnotherSchemaIsNotAKeychain() throws {
        try runSQLite(store.path, "CREATE TABLE notes (x TEXT); INSERT INTO notes VALUES ('hello');")
        assertKeychainError(isNotAKeychain, "notAKeychain", try store.open())
    }

    func testSQLiteFileWithAnotherFormatInMetaIsNotAKeychain() throws {
        try runSQLite(store.path, "CREATE TABLE meta (name TEXT PRIMARY KEY, value BLOB NOT NULL); INSERT INTO meta VALUES ('format', CAST('something-else' AS BLOB));")
        assertKeychainError(isNotAKeychain, "notAKeychain", try store.open())
    }

    func testForeignSQLiteFileIsLeftUnchanged() throws {
        try runSQLite(store.path, "CREATE TABLE notes (x TEXT); INSERT INTO notes VALUES ('hello');")
        let before = try Data(contentsOf: URL(fileURLWithPath: store.path))
        _ = try? store.open()
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: store.path)), before)
        XCTAssertEqual(try runSQLite(store.path, "PRAGMA journal_mode"), "delete")
    }

    func testCorruptStoreIsNotAKeychain() throws {
        _ = try store.create()
        // Keep the 100-byte header, overwrite the rest of the first page (the schema).
        let handle = try XCTUnwrap(FileHandle(forUpdatingAtPath: store.path))
        try handle.seek(toOffset: 100)
        try handle.write(contentsOf: Data(repeating: 0xA5, count: 3996))
        try handle.close()
        assertKeychainError(isNotAKeychain, "notAKeychain", try store.open())
    }

    /// A second connection opened in the same process must not drop the first one's locks, or
    /// another process (here the sqlite3 tool) checkpoints and deletes the WAL under it.
    func testSecondOpenInTheSameProcessKeepsTheWALShared() throws {
        _ = try store.create()
        let first = try store.openUnlocked()
        let second = try store.open()
        try store.sql("SELECT count(*) FROM items")
        XCTAssertTrue(FileManager.default.fileExists(atPath: store.path + "-wal"), "the WAL was deleted while in use")
        try store.sql("INSERT OR REPLACE INTO meta (name, value) VALUES ('failed_unlocks', CAST('7' AS BLOB))")
        XCTAssertEqual(try first.failureRecord().failures, 7, "the first connection no longer sees other processes' writes")
        XCTAssertEqual(try second.failureRecord().failures, 7)
    }

    /// The store's VFS gathers a transaction's WAL frames and writes them at its commit frame
    /// (store_vfs.c). With no sync to write them (`synchronous = OFF`), another process that
    /// reads the commit from the WAL index must still find its frames in the file, and a copy
    /// of the files taken then (as a crash would leave them) must recover the commit: for every
    /// size of transaction from 1 to 70 pages, so that a commit frame's header also ends a full
    /// gathering buffer (120 KiB, 29 frames and a header) and its page starts the next.
    func testCommittedFramesAreInTheWALBeforeAnotherProcessReadsThem() throws {
        let (queue, path) = try plainWALDatabase()
        var expected = 0
        for rows in 1...70 {
            // A row of 3,000 bytes fills a page of its own: `rows` pages and the tree's.
            try queue.write { db in
                for _ in 0..<rows { try db.execute(sql: "INSERT INTO t (v) VALUES (zeroblob(3000))") }
            }
            expected += rows
            XCTAssertEqual(try runSQLite(path, "SELECT count(*) FROM t"), String(expected), "a commit of \(rows) rows")
            XCTAssertEqual(try recovered(path, "SELECT count(*) FROM t"), String(expected), "a commit of \(rows) rows, recovered")
        }
        XCTAssertEqual(try runSQLite(path, "PRAGMA integrity_check"), "ok")
    }

    /// A transaction larger than SQLite's page cache spills frames before its commit; a page
    /// changed again after that is written over its frame in place, and the frames' checksums
    /// are rewritten up to the commit frame. Those writes are not appends: each must be in the
    /// file when the commit returns, or recovery drops the commit (its frame's old checksum).
    func testFramesWrittenAgainInPlaceAreInTheWALAtTheCommit() throws {
        let (queue, path) = try plainWALDatabase()
        try queue.write { db in
            for i in 0..<20 { try db.execute(sql: "INSERT INTO t (n, v) VALUES (?, zeroblob(3000))", arguments: [i]) }
        }
        try queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA cache_size = 5") }
        try queue.write { db in
            try db.execute(sql: "UPDATE t SET v = randomblob(3000)")
            try db.execute(sql: "UPDATE t SET v = zeroblob(2999) WHERE n % 3 = 0")
        }
        let expected = "20|7"
        let query = "SELECT count(*), sum(length(v) = 2999) FROM t"
        XCTAssertEqual(try runSQLite(path, query), expected)
        XCTAssertEqual(try recovered(path, query), expected, "the commit, recovered from a copy of the files")
    }

    /// A transaction rolled back after it spilled leaves frames the VFS gathered: written when
    /// it ends (its write lock's release), not later, over the commit another process has
    /// written at the same place since. That commit must survive this connection's next read.
    func testARolledBackSpilledTransactionDoesNotOverwriteAnotherProcessCommit() throws {
        let (queue, path) = try plainWALDatabase()
        try queue.writeWithoutTransaction { db in
            try db.execute(sql: "INSERT INTO t (v) VALUES ('first')")
            _ = try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(TRUNCATE)")
            try db.execute(sql: "PRAGMA cache_size = 5")
            try db.execute(sql: "BEGIN")
            for _ in 0..<40 { try db.execute(sql: "INSERT INTO t (v) VALUES (randomblob(1500))") }
            try db.execute(sql: "ROLLBACK")
        }
        try runSQLite(path, "INSERT INTO t (v) VALUES ('committed by another process')")
        XCTAssertEqual(try queue.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM t") }, 2, "this connection")
        XCTAssertEqual(try runSQLite(path, "SELECT group_concat(v, '|') FROM t"), "first|committed by another process",
                       "another process, after this connection read")
        XCTAssertEqual(try recovered(path, "SELECT count(*) FROM t"), "2", "recovered from a copy of the files")
    }

    /// Without SQLite's power-safe overwrite, a commit at `synchronous = FULL` is padded to a
    /// sector with copies of its last frame, and the write that crosses the boundary is split
    /// around a sync: all of it must be in the file when the commit returns.
    func testACommitPaddedToASectorIsInTheWALWhenItReturns() throws {
        _ = try store.create()
        let path = store.directory + "/padded.db"
        // psow=0 in the name: the WAL's handle takes it from there.
        let queue = try DatabaseQueue(path: "file:" + path + "?psow=0")
        try queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA page_size = 1024")
            _ = try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL")
            try db.execute(sql: "PRAGMA synchronous = FULL")
            try db.execute(sql: "CREATE TABLE t (n INTEGER PRIMARY KEY, v TEXT)")
        }
        XCTAssertTrue(FileManager.default.fileExists(atPath: path), "the URI named the file")
        for i in 1...12 {
            try queue.write { try $0.execute(sql: "INSERT INTO t (v) VALUES (?)", arguments: [String(repeating: "p", count: 100 * i)]) }
            XCTAssertEqual(try runSQLite(path, "SELECT count(*), max(length(v)) FROM t"), "\(i)|\(100 * i)", "commit \(i)")
        }
    }

    /// A database of its own in WAL mode through the store's VFS, at `synchronous = OFF`: no sync
    /// writes what the VFS gathered.
    private func plainWALDatabase() throws -> (DatabaseQueue, String) {
        _ = try store.create() // installs the store's VFS as the process's default
        let path = store.directory + "/plain.db"
        let queue = try DatabaseQueue(path: path)
        try queue.writeWithoutTransaction { db in
            _ = try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL")
            try db.execute(sql: "PRAGMA synchronous = OFF")
            try db.execute(sql: "CREATE TABLE t (n INTEGER PRIMARY KEY, v BLOB)")
        }
        return (queue, path)
    }

    /// `statement` on a copy of the database and its WAL, without the WAL index: SQLite
    /// recovers the WAL from its frames as after a crash. Copied by cp: a descriptor of the
    /// database opened and closed in this process would drop the connection's POSIX locks, and
    /// the sqlite3 tool would then checkpoint and delete the WAL under it.
    private func recovered(_ path: String, _ statement: String) throws -> String {
        let directory = store.directory + "/recovered"
        try? FileManager.default.removeItem(atPath: directory)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        let cp = Process()
        cp.executableURL = URL(fileURLWithPath: "/bin/cp")
        cp.arguments = [path, path + "-wal", directory]
        try cp.run()
        cp.waitUntilExit()
        XCTAssertEqual(cp.terminationStatus, 0, "cp of the database and its WAL")
        let copy = directory + "/" + (path as NSString).lastPathComponent
        return try runSQLite(copy, statement)
    }

    func testCreatedKeychainSeesWritesOfOtherProcesses() throws {
        let k = try store.create()
        try store.sql("SELECT count(*) FROM items")
        try store.sql("INSERT OR REPLACE INTO meta (name, value) VALUES ('failed_unlocks', CAST('2' AS BLOB))")
        XCTAssertEqual(try k.failureRecord().failures, 2)
    }

    func testCreateRefusesAnExistingStore() throws {
        _ = try store.create()
        assertKeychainError(.storeExists(store.path), try store.create())
        XCTAssertNoThrow(try store.openUnlocked())
    }

    func testCreateRefusesUnacceptableScryptParameters() {
        assertKeychainError(isInvalidInput, "invalidInput",
                            try Keychain.create(at: store.path, passphrase: secure("x"), scrypt: ScryptParameters(logN: 4, r: 1, p: 1),
                                                deviceKeyPath: store.deviceKeyPath))
        XCTAssertFalse(FileManager.default.fileExists(atPath: store.path))
    }

    func testCreateStoresTheChosenScryptParameters() throws {
        _ = try Keychain.create(at: store.path, passphrase: secure("x"), scrypt: ScryptParameters(logN: 11),
                                deviceKeyPath: store.deviceKeyPath)
        let json = try store.sql("SELECT CAST(value AS TEXT) FROM meta WHERE name = 'scrypt'")
        XCTAssertEqual(try JSONDecoder().decode(ScryptParameters.self, from: Data(json.utf8)), ScryptParameters(logN: 11))
        XCTAssertEqual(try store.sql("PRAGMA journal_mode"), "wal")
    }
}

/// No secret and no name appears in the database, its WAL or its shared-memory file.
final class PlaintextTests: XCTestCase {
    static let needles = [
        "SVC-q7Zx-plaintext-service", "ACCT-w3Lk-plaintext-account", "SRV-p9Hd.example.org",
        "PATH-k2Jm-plaintext-segment", "ACCT-m5Rt-internet-account", "DOMAIN-v8Qs-realm",
        "LABEL-c4Nf-plaintext-label", "COMMENT-t6Yb-plaintext-comment", "DESC-h1Gw-plaintext-description",
        "GROUP-e3Vu-access-group", "SECRET-z0Xa-generic-secret", "SECRET-b8Kp-internet-secret",
    ]

    func files(_ store: TempStore) -> [String] {
        [store.path, store.path + "-wal", store.path + "-shm", store.path + "-journal"]
    }

    func assertNoNeedles(_ store: TempStore, file: StaticString = #filePath, line: UInt = #line) throws {
        var read = 0
        for path in files(store) {
            guard let data = FileManager.default.contents(atPath: path) else { continue }
            read += 1
            for needle in Self.needles {
                XCTAssertNil(data.range(of: Data(needle.utf8)), "\(needle) in \((path as NSString).lastPathComponent)",
                             file: file, line: line)
                // Also its distinctive prefix alone, in case it was stored cut up.
                let prefix = needle.split(separator: "-").prefix(2).joined(separator: "-")
                XCTAssertNil(data.range(of: Data(prefix.utf8)), "\(prefix) in \((path as NSString).lastPathComponent)",
                             file: file, line: line)
            }
        }
        XCTAssertGreaterThan(read, 0, file: file, line: line)
    }

    func testNoPlaintextInDatabaseWALOrSHM() throws {
        let store = try TempStore()
        let n = Self.needles
        var k: Keychain? = try store.create()
        try k!.save(genericKey(n[0], n[1], group: n[9]), secret: secure(n[10]),
                    changes: AttributeChanges { $0.label = n[6]; $0.comment = n[7]; $0.description = n[8] }, updateExisting: false)
        try k!.save(internetKey(n[2], port: 8443, path: "/\(n[3])/x", domain: n[5], account: n[4], group: n[9]), secret: secure(n[11]),
                    changes: AttributeChanges(accessible: .always) { $0.label = n[6]; $0.comment = n[7]; $0.description = n[8] },
                    updateExisting: false)
        // Update and delete too, so that old versions of rows pass through the WAL.
        try k!.save(genericKey(n[0], n[1], group: n[9]), secret: secure(n[10] + "-v2"), updateExisting: true)
        try k!.save(genericKey(n[0], "tmp-" + n[1]), secret: secure(n[10]), updateExisting: false)
        try k!.delete([XCTUnwrap(try k!.item(for: genericKey(n[0], "tmp-" + n[1])))])
        XCTAssertTrue(FileManager.default.fileExists(atPath: store.path + "-wal"), "the test should see a WAL")
        try assertNoNeedles(store)

        // And after closing, when the WAL has been checkpointed into the database.
        k = nil
        try assertNoNeedles(store)
        // The values really are in there.
        let reopened = try store.openUnlocked()
        let item = try XCTUnwrap(try reopened.item(for: genericKey(n[0], n[1], group: n[9])))
        XCTAssertEqual(item.record.attributes.label, n[6])
        XCTAssertEqual(text(try reopened.secret(of: item)), n[10] + "-v2")
    }
}

/// Once a delete, replace or re-class returns, no earlier sealed value is in any of the store's
/// files (the integration test `test_store_files.sh` replays the WAL through a real mount).
final class ErasedValueTests: StoreTestCase {
    func filesBytes() -> Data {
        ["", "-wal", "-shm", "-journal", "-reserve"].reduce(into: Data()) { all, suffix in
            all.append(FileManager.default.contents(atPath: store.path + suffix) ?? Data())
        }
    }

    func assertGone(_ sealed: [[UInt8]], _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        let bytes = filesBytes()
        for blob in sealed { XCTAssertNil(bytes.range(of: Data(blob)), "\(what): an earlier sealed value", file: file, line: line) }
        XCTAssertEqual(walBytesLeft(), 0, "\(what): the WAL holds nothing", file: file, line: line)
    }

    /// The WAL's bytes that are not zero: an emptied WAL is overwritten with zeros (CStoreVFS).
    func walBytesLeft() -> Int {
        (FileManager.default.contents(atPath: store.path + "-wal") ?? Data()).reduce(0) { $0 + ($1 == 0 ? 0 : 1) }
    }

    func testACreatedValueReplacedAtOnceIsGoneThoughTheCreateLeftItsFrames() throws {
        // Creates only add, so they leave their frames in the WAL (no checkpoint); the update
        // after them must empty all of it, whatever the creates wrote before its own frames.
        for i in 0..<30 { try add(k, genericKey("svc", "filler\(i)"), "filler") }
        let a = try add(k, genericKey("svc", "a"), "created")
        XCTAssertGreaterThan(walBytesLeft(), 0, "the creates' frames are in the WAL")
        XCTAssertNotNil(filesBytes().range(of: Data(a.sealed.secret)), "the test sees the created value in the files")
        _ = try k.save(genericKey("svc", "a"), secret: secure("updated"), updateExisting: true)
        assertGone([a.sealed.secret], "create then update")
        // A shorter run of frames after it: the WAL is emptied again, its earlier, longer
        // generation having been zeroed already.
        let b = try add(k, genericKey("svc", "b"), "created")
        _ = try k.save(genericKey("svc", "b"), secret: secure("updated"), updateExisting: true)
        assertGone([b.sealed.secret], "a second create then update")
        XCTAssertGreaterThan((try? FileManager.default.attributesOfItem(atPath: store.path + "-wal"))?[.size] as? Int ?? 0, 0,
                             "the emptied WAL keeps its blocks")
        XCTAssertEqual(text(try k.secret(of: XCTUnwrap(try k.item(for: genericKey("svc", "a"))))), "updated")
    }

    /// The salts of the WAL's frames, in file order, up to the first frame header of zeros.
    func walFrameSalts() -> [UInt64] {
        let wal = [UInt8](FileManager.default.contents(atPath: store.path + "-wal") ?? Data())
        guard wal.count >= 32 else { return [] }
        func be32(_ at: Int) -> UInt64 { wal[at..<at + 4].reduce(0) { $0 << 8 | UInt64($1) } }
        let frame = 24 + Int(be32(8))
        var salts: [UInt64] = []
        var at = 32
        while at + 24 <= wal.count, wal[at..<at + 24].contains(where: { $0 != 0 }) {
            salts.append(be32(at + 8) << 32 | be32(at + 12))
            at += frame
        }
        return salts
    }

    func testAWALThatWrappedIsEmptiedWholeWithTheOlderFramesBeyondItsEnd() throws {
        // Past SQLite's automatic checkpoint (1,000 pages), the next commit starts the WAL
        // again from its start under new salts: the frames of the earlier pass stay after the
        // new ones, and hold the first items' rows.
        var first: [KeychainItem] = []
        for i in 0..<400 {
            let item = try add(k, genericKey("svc", "item\(i)"), "value-\(i)")
            if i < 20 { first.append(item) }
        }
        let salts = walFrameSalts()
        XCTAssertGreaterThan(Set(salts).count, 1, "the WAL wrapped: frames of an earlier pass follow the current ones")
        XCTAssertNotNil(filesBytes().range(of: Data(first[0].sealed.secret)), "the test sees a first item's row in the files")
        // The creates' index entries are moved now, not by a timer's commit after the delete,
        // whose frames (index pages only) the empty WAL checked below would then hold.
        k.settle()
        try k.delete(first)
        assertGone(first.map(\.sealed.secret), "delete after the WAL wrapped")
    }

    func testReplacedDeletedAndReclassedValuesAreGoneFromTheFiles() throws {
        let a = try add(k, genericKey("svc", "a"), "first")
        let b = try add(k, genericKey("svc", "b"), "doomed")
        XCTAssertNotNil(filesBytes().range(of: Data(a.sealed.secret)), "the test sees sealed values in the files")
        let a2 = try k.save(genericKey("svc", "a"), secret: secure("second"), updateExisting: true)
        assertGone([a.sealed.secret], "update")
        try k.delete([b])
        assertGone([b.sealed.secret], "delete")
        var record = a2.record
        record.attributes.accessible = .whenUnlockedThisDeviceOnly
        let a3 = try k.update(a2, to: record)
        assertGone([a2.sealed.secret], "re-class")
        let tmp = try add(k, genericKey("svc", "tmp"), "third")
        var target = a3.record
        target.key = a3.key
        _ = try k.update(tmp, to: target, replacing: a3)
        assertGone([a3.sealed.secret, tmp.sealed.secret], "rename over an item")
        XCTAssertEqual(text(try k.secret(of: XCTUnwrap(try k.item(for: genericKey("svc", "a"))))), "third")
    }

    func testAnOpenEmptiesAWALLeftByACrash() throws {
        let a = try add(k, genericKey("svc", "a"), "first")
        // A writer killed between its commit and its checkpoint leaves its pages in the WAL.
        let earlier = [UInt8](repeating: 0xA5, count: 40), later = [UInt8](repeating: 0x5A, count: 40)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["python3", "-c", """
            import os, sqlite3, sys
            c = sqlite3.connect(sys.argv[1])
            for b in (sys.argv[2], sys.argv[3]):
                c.execute("UPDATE items SET secret = ? WHERE id = ?", (bytes.fromhex(b), int(sys.argv[4])))
                c.commit()
            os._exit(0)
            """, store.path, earlier.map { String(format: "%02x", $0) }.joined(),
            later.map { String(format: "%02x", $0) }.joined(), String(a.id)]
        try p.run()
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0)
        XCTAssertNotNil(filesBytes().range(of: Data(earlier)), "the killed writer left its earlier value in the WAL")
        XCTAssertNoThrow(try store.open())
        assertGone([earlier, a.sealed.secret], "open after a crash")
    }
}
