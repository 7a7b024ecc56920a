import Foundation
import KeychainBatch
import KeychainCrypto
import KeychainModel
@testable import KeychainStore
import XCTest

/// `Keychain.importIntoEmptyStore`: a whole import in one transaction, its indexes built in order.
final class EmptyStoreImportTests: StoreTestCase {
    private var schema: String {
        get throws { try store.sql("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name") }
    }

    func testEveryItemArrivesWithItsIndexesAndTheSameSchema() throws {
        let before = try schema
        var items = try (0..<1_000).map { (record(try genericKey("svc\($0 % 7)", "acct\($0)"), label: "L\($0)"), "secret-\($0)") }
        items.append((record(try internetKey("example.org", port: 8443, path: "a/b", account: "carol"), class: .afterFirstUnlock), "web"))
        var progress: [Int] = []
        let report = try XCTUnwrap(try k.importIntoEmptyStore(batch(items), updateExisting: false) { progress.append($0) })
        XCTAssertEqual(report, ImportReport(added: 1_001))
        XCTAssertEqual(progress.last, 1_001)
        XCTAssertEqual(try schema, before, "every index dropped for the rows is made again as it was")
        XCTAssertEqual(try store.sql("PRAGMA integrity_check"), "ok")
        XCTAssertEqual(try secret(genericKey("svc3", "acct3")), "secret-3")
        XCTAssertEqual(try secret(internetKey("example.org", port: 8443, path: "a/b", account: "carol")), "web")
        XCTAssertEqual(try XCTUnwrap(try k.item(for: genericKey("svc5", "acct999"))).record.attributes.label, "L999")
        // Each index answers: the blind index (above), the group index (a directory) and the attribute index.
        XCTAssertEqual(try k.items(matching: ItemQuery(kind: .generic, service: "svc6")).count, 142)
        let id = try XCTUnwrap(try k.item(for: genericKey("svc3", "acct500"))).id
        XCTAssertEqual(try k.itemIDs(withAttribute: "account", value: "acct500"), [id])
        XCTAssertEqual(try k.itemIDs(withAttribute: "service", value: "svc0").count, 143)
        // Ids follow the blind index, from the store's next id, and are never reused after.
        XCTAssertEqual(try store.sql("SELECT min(id) || ' ' || max(id) || ' ' || count(*) FROM items"), "1 1001 1001")
        XCTAssertEqual(try store.sql("SELECT count(*) FROM (SELECT blind, id, lag(blind) OVER (ORDER BY id) AS prev FROM items) WHERE prev > blind"), "0")
        XCTAssertEqual(try add(k, genericKey("after", "x"), "y").id, 1002)
        XCTAssertEqual(try k.verify().problems, [])
        let reopened = try store.openUnlocked()
        XCTAssertEqual(try reopened.countsByClass().values.reduce(0, +), 1_002, "the ledger counts every row: no rollback at the next open")
    }

    func testAStoreWithAnItemIsLeftToTheBatches() throws {
        try add(k, genericKey("keep", "me"), "kept")
        let commits = k.commitCount
        XCTAssertNil(try k.importIntoEmptyStore(batch([(record(try genericKey("new", "one")), "1")]), updateExisting: false))
        XCTAssertEqual(k.commitCount, commits, "nothing committed")
        XCTAssertNil(try k.item(for: genericKey("new", "one")))
        // A store whose items were all deleted is empty again: its ids still go on.
        let only = try XCTUnwrap(try k.item(for: genericKey("keep", "me")))
        try k.delete([only])
        let report = try XCTUnwrap(try k.importIntoEmptyStore(batch([(record(try genericKey("new", "one")), "1")]), updateExisting: false))
        XCTAssertEqual(report.added, 1)
        XCTAssertGreaterThan(try XCTUnwrap(try k.item(for: genericKey("new", "one"))).id, only.id)
    }

    func testItemsOfTheSameKeyAsSaveWouldHaveThem() throws {
        let a = try genericKey("dup", "a"), b = try genericKey("dup", "b")
        let entries = [(record(b), "b1"), (record(a), "a1"), (record(a), "a2"), (record(b), "b2"), (record(a), "a3")]
        let skip = try XCTUnwrap(try k.importIntoEmptyStore(batch(entries), updateExisting: false))
        XCTAssertEqual(skip.added, 2)
        XCTAssertEqual(skip.skipped, [a, b, a], "the later ones, in the backup's order")
        XCTAssertEqual(try secret(a), "a1")
        XCTAssertEqual(try secret(b), "b1")

        let other = try TempStore()
        let k2 = try other.create()
        let replace = try XCTUnwrap(try k2.importIntoEmptyStore(batch(entries), updateExisting: true))
        XCTAssertEqual(replace, ImportReport(added: 2, replaced: 3))
        XCTAssertEqual(text(try k2.secret(of: XCTUnwrap(try k2.item(for: a)))), "a3")
        XCTAssertEqual(text(try k2.secret(of: XCTUnwrap(try k2.item(for: b)))), "b2")
        XCTAssertEqual(try k2.verify().problems, [])
    }

    func testAFailurePartWayLeavesTheStoreEmptyWithItsIndexes() throws {
        let before = try schema
        var b = ItemBatch()
        // More than one slice, so that rows of the first are written before the failure.
        for i in 0..<(Keychain.emptyImportSlice + 10) {
            b.append(record(try genericKey("many", "\(i)")), secret: secure("s\(i)"))
        }
        b.append(record(try genericKey("many", "big")), secret: SecureBytes(count: maxSecretBytes + 1))
        assertKeychainError(.secretTooLarge(maxSecretBytes + 1), try k.importIntoEmptyStore(b, updateExisting: false))
        XCTAssertEqual(try store.sql("SELECT count(*) FROM items"), "0")
        XCTAssertEqual(try store.sql("SELECT count(*) FROM attribute_index"), "0")
        XCTAssertEqual(try schema, before, "the dropped indexes are back")
        XCTAssertEqual(try XCTUnwrap(try k.importIntoEmptyStore(batch([(record(try genericKey("after", "x")), "y")]),
                                                               updateExisting: false)).added, 1)
    }

    func testLockedClassesAreRefusedAndNothingIsWritten() throws {
        k.lock()
        assertKeychainError(.unavailable(.whenUnlocked),
                            try k.importIntoEmptyStore(batch([(record(try genericKey("a", "b")), "s")]), updateExisting: false))
        XCTAssertEqual(try store.sql("SELECT count(*) FROM items"), "0")
    }
}
