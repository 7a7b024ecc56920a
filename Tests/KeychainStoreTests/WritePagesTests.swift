import Foundation
import KeychainBatch
import KeychainCrypto
import KeychainModel
@testable import KeychainStore
import XCTest

/// What a durable write costs in pages: the WAL's frames, counted by the checkpoint that
/// erases them after the commit.
final class WritePagesTests: XCTestCase {
    func testAnUpdateWritesTheRowAndTheLedgerOnly() throws {
        let store = try TempStore()
        let k = try store.create()
        var batch = ItemBatch()
        for n in 0..<500 {
            batch.append(ItemRecord(key: try genericKey("svc\(n % 7)", "a\(n)"), attributes: ItemAttributes()),
                         secret: secure("secret-\(n)"))
        }
        _ = try k.save(batch: batch, updateExisting: false)
        // A first erasing commit empties the WAL of the batch's pages.
        let first = try XCTUnwrap(try k.item(for: genericKey("svc0", "a0")))
        try k.update(first, to: first.record, secret: secure("first"))
        let item = try XCTUnwrap(try k.item(for: genericKey("svc5", "a250")))
        try k.update(item, to: item.record, secret: secure("changed"))
        // The WAL's header, then one frame (a 24-byte header and the page) per page written.
        let pageSize = Int(try store.sql("PRAGMA page_size")) ?? 0
        XCTAssertEqual((k.database.log.bytesAtLastCheckpoint - 32) / (24 + pageSize), 2, "the item's page and the ledger's page")
        XCTAssertEqual(text(try k.secret(of: XCTUnwrap(try k.item(for: item.key)))), "changed")

        // A rename changes the blind indexes too, and still reads back under its new key only.
        let renamed = try XCTUnwrap(try k.item(for: genericKey("svc5", "a250")))
        var record = renamed.record
        record.key = try genericKey("moved", "a250")
        try k.update(renamed, to: record)
        XCTAssertNil(try k.item(for: item.key))
        XCTAssertEqual(text(try k.secret(of: XCTUnwrap(try k.item(for: record.key)))), "changed")

        // An update of a version that is no longer stored changes nothing.
        assertKeychainError(.itemNotFound, try k.update(renamed, to: renamed.record, secret: secure("stale")))
        XCTAssertEqual(try k.verify().problems, [])
    }
}
