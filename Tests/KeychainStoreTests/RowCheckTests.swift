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
        let first = try store.openUnlocked()
        XCTAssertEqual(readRows(first), false, "the creating instance checked the rows and recorded each commit")
        let item = try XCTUnwrap(try first.item(for: genericKey("svc", "a3")))
        try first.update(item, to: item.record, secret: secure("changed"))
        try add(first, genericKey("svc", "new"), "fresh")

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
        let session = try store.openUnlocked()
        let item = try XCTUnwrap(try session.item(for: genericKey("svc", "a1")))
        let old = try store.sql("SELECT quote(wrapped_key), quote(attributes), quote(secret) FROM items WHERE id = \(item.id)")
            .split(separator: "|").map(String.init)
        try session.update(item, to: item.record, secret: secure("v2"))
        XCTAssertEqual(readRows(try store.openUnlocked()), false)

        try store.sql("UPDATE items SET version = \(item.sealed.version), wrapped_key = \(old[0]), attributes = \(old[1]), secret = \(old[2]) WHERE id = \(item.id)")
        assertKeychainError(isIntegrityFailure, "replayed row", try store.openUnlocked())

        let other = try TempStore()
        let k2 = try other.create()
        for n in 0..<5 { try add(k2, genericKey("svc", "a\(n)"), "pw\(n)") }
        let s2 = try other.openUnlocked()
        try add(s2, genericKey("svc", "late"), "x")
        XCTAssertEqual(readRows(try other.openUnlocked()), false)
        try other.sql("DELETE FROM items WHERE id = 2")
        assertKeychainError(isIntegrityFailure, "removed row", try other.openUnlocked())
    }
}
