import Foundation
import KeychainCrypto
import KeychainModel
@testable import KeychainStore
import XCTest

/// The check of the rows against the ledger at open reads every row only when the store's
/// files changed since this machine's keychainfs last wrote or checked them.
final class RowCheckTests: XCTestCase {
    var store: TempStore!
    override func setUpWithError() throws { store = try TempStore() }
    override func tearDown() { store = nil }

    func readRows(_ k: Keychain) -> Bool? { k.checkReadRows.withLock { $0 } }

    func testACleanReopenReadsNoRowsAndAnyWriteMakesTheNextOneReadThem() throws {
        let k = try store.create()
        for n in 0..<20 { try add(k, genericKey("svc", "a\(n)"), "pw\(n)") }
        k.recordFilesState()  // as when commits pause (testTheFilesAreRecordedOnceCommitsPause)
        let first = try store.openUnlocked()
        XCTAssertEqual(readRows(first), false, "the creating instance checked the rows and recorded its commits")
        let item = try XCTUnwrap(try first.item(for: genericKey("svc", "a3")))
        try first.update(item, to: item.record, secret: secure("changed"))
        try add(first, genericKey("svc", "new"), "fresh")
        first.recordFilesState()

        let clean = try store.openUnlocked()
        XCTAssertEqual(readRows(clean), false, "the files are as the last commit left them")
        XCTAssertEqual(try clean.allItems().items.count, 21)
        XCTAssertEqual(try clean.verify().problems, [])

        // Touching the file is a change too: the rows are read again, and found right.
        XCTAssertEqual(utime(store.path, nil), 0)
        let touched = try store.openUnlocked()
        XCTAssertEqual(readRows(touched), true)
        XCTAssertEqual(try store.openUnlocked().checkReadRows.withLock { $0 }, false, "and recorded again")
    }

    /// An instance keeps the descriptors of its two records beside the device key open across
    /// commits. A record removed, or renamed over, behind its back is written again at its
    /// path by the next commit, never into the file that lost its name.
    func testRecordsRemovedOrReplacedBehindAnOpenInstanceAreWrittenAgain() throws {
        let k = try store.create()
        try add(k, genericKey("svc", "a"), "pw")
        let counted = k.commitCount
        XCTAssertGreaterThan(counted, 0)
        XCTAssertEqual(unlink(k.counter.path), 0)
        XCTAssertEqual(unlink(k.counter.filesPath), 0)
        try add(k, genericKey("svc", "b"), "pw")
        XCTAssertEqual(k.commitCount, counted + 1, "the counter is made again at its path")
        k.recordFilesState()
        XCTAssertEqual(readRows(try store.openUnlocked()), false, "and so is the files record")

        // Renamed over with an older counter: the next commit raises the new file.
        let planted = k.counter.path + ".planted"
        XCTAssertTrue(FileManager.default.createFile(atPath: planted, contents: Data("00000000000000000001\n".utf8)))
        XCTAssertEqual(rename(planted, k.counter.path), 0)
        try add(k, genericKey("svc", "c"), "pw")
        XCTAssertEqual(k.commitCount, counted + 2)
    }

    /// The files' state is compared as numbers and recorded as text: the text read back is the
    /// same state, a WAL with frames is part of it, and text that is not a state matches none.
    func testTheFilesStateReadsBackFromItsTextAndDamagedTextMatchesNothing() throws {
        let k = try store.create()
        try add(k, genericKey("svc", "a"), "pw")
        k.recordFilesState()
        let state = try XCTUnwrap(StoreFileState(storePath: store.path))
        XCTAssertTrue(state.text.hasPrefix("db ") && state.text.contains(" wal "), state.text)
        XCTAssertEqual(StoreFileState(text: state.text), state)
        XCTAssertEqual(k.counter.readFiles(), state, "the record beside the device key is the files as the commit left them")
        for damaged in ["", "db", state.text.replacingOccurrences(of: "db ", with: "xx "), String(state.text.dropLast(3)),
                        state.text + " 1", state.text.replacingOccurrences(of: ".", with: ",")] {
            XCTAssertNotEqual(StoreFileState(text: damaged), state, damaged)
        }
    }

    /// A row removed behind keychainfs's back, the ledger left alone, is still caught at the
    /// next open after clean sessions, and so is an older copy of a row put back.
    func testRowsChangedBehindItsBackAreStillCaught() throws {
        let k = try store.create()
        for n in 0..<5 { try add(k, genericKey("svc", "a\(n)"), "pw\(n)") }
        k.recordFilesState()
        // Read before the clean session: the sqlite3 tool run as root gives the WAL its owner
        // again (`fchown`), a change that the session would hear.
        let item = try XCTUnwrap(try k.item(for: genericKey("svc", "a1")))
        let old = try store.sql("SELECT quote(wrapped_key), quote(attributes), quote(secret) FROM items WHERE id = \(item.id)")
            .split(separator: "|").map(String.init)
        let session = try store.openUnlocked()
        try session.update(item, to: item.record, secret: secure("v2"))
        session.recordFilesState()
        XCTAssertEqual(readRows(try store.openUnlocked()), false)

        try store.sql("UPDATE items SET version = \(item.sealed.version), wrapped_key = \(old[0]), attributes = \(old[1]), secret = \(old[2]) WHERE id = \(item.id)")
        assertKeychainError(isIntegrityFailure, "replayed row", try store.openUnlocked())

        let other = try TempStore()
        let k2 = try other.create()
        for n in 0..<5 { try add(k2, genericKey("svc", "a\(n)"), "pw\(n)") }
        k2.recordFilesState()
        let s2 = try other.openUnlocked()
        try add(s2, genericKey("svc", "late"), "x")
        s2.recordFilesState()
        XCTAssertEqual(readRows(try other.openUnlocked()), false)
        try other.sql("DELETE FROM items WHERE id = 2")
        assertKeychainError(isIntegrityFailure, "removed row", try other.openUnlocked())
    }

    /// A commit does not read the files' times (that made the next commit's sync write the WAL's
    /// inode too, `StoreFileWatch`): their state is recorded once commits pause, and at close.
    func testTheFilesAreRecordedOnceCommitsPause() throws {
        weak var closed: Keychain?
        try {
            let k = try store.create()
            closed = k
            XCTAssertNotNil(k.database.watch)
            try add(k, genericKey("svc", "a"), "pw")
            // At once: the timer records 0.1 s after the commit.
            XCTAssertNotEqual(k.counter.readFiles(), StoreFileState(storePath: store.path), "not recorded at each commit")
            let deadline = Date().addingTimeInterval(5)
            while k.counter.readFiles() != StoreFileState(storePath: store.path) && Date() < deadline { usleep(20_000) }
            XCTAssertEqual(k.counter.readFiles(), StoreFileState(storePath: store.path), "recorded once the commits paused")
            try add(k, genericKey("svc", "c"), "pw")
            XCTAssertNotEqual(k.counter.readFiles(), StoreFileState(storePath: store.path))
        }()
        XCTAssertNil(closed, "no timer keeps the instance")
        XCTAssertEqual(readRows(try store.openUnlocked()), false, "the close recorded the last commit")
    }

    /// The commits' chain without the files' times: a write by anything else, between two
    /// commits or between a commit and its record, is heard, and no state after it is recorded.
    func testAWriteByAnythingElseBetweenCommitsIsHeard() throws {
        func session(_ what: String, _ foreign: (Keychain) throws -> Void) throws -> Bool? {
            let store = try TempStore()
            let k = try store.create()
            try add(k, genericKey("svc", "a"), "pw")
            k.recordFilesState()
            XCTAssertEqual(k.counter.readFiles(), StoreFileState(storePath: store.path))
            try foreign(k)
            k.recordFilesState()
            XCTAssertNotEqual(k.counter.readFiles(), StoreFileState(storePath: store.path),
                              "\(what): no record vouches for files written by someone else")
            try add(k, genericKey("svc", "c"), "pw")
            k.recordFilesState()
            XCTAssertNil(k.counter.readFiles(), "\(what): nor for any commit after it")
            return readRows(try store.openUnlocked())
        }
        // Before a commit: a change of times, a write to the database file, a write to the WAL.
        XCTAssertEqual(try session("times") { k in
            XCTAssertEqual(utime(k.path, nil), 0)
            try add(k, genericKey("svc", "b"), "pw")
        }, true)
        XCTAssertEqual(try session("database") { k in
            let fd = open(k.path, O_WRONLY)
            XCTAssertEqual(pwrite(fd, [UInt8(1)], 1, 1_000_000), 1)
            close(fd)
            try add(k, genericKey("svc", "b"), "pw")
        }, true)
        // Before a commit that fails: the chain breaks all the same.
        XCTAssertEqual(try session("failed commit") { k in
            XCTAssertEqual(utime(k.path, nil), 0)
            XCTAssertThrowsError(try k.write(.addsOnly) { _, _ in throw KeychainError.itemNotFound })
        }, true)
        // After a commit, before its record.
        XCTAssertEqual(try session("WAL") { k in
            try add(k, genericKey("svc", "b"), "pw")
            let fd = open(k.path + "-wal", O_WRONLY)
            var st = stat()
            fstat(fd, &st)
            XCTAssertEqual(pwrite(fd, [UInt8(0)], 1, st.st_size + 8192), 1)
            close(fd)
        }, true)
        // A copy renamed over the database.
        XCTAssertEqual(try session("renamed") { k in
            XCTAssertTrue(FileManager.default.createFile(atPath: k.path + ".copy", contents: FileManager.default.contents(atPath: k.path),
                                                        attributes: [.posixPermissions: 0o600]))
            XCTAssertEqual(rename(k.path + ".copy", k.path), 0)
        }, true)
    }
}
