import Foundation
import KeychainBatch
import KeychainCrypto
import KeychainModel
@testable import KeychainStore
import XCTest

/// The blind index of Secret Service attribute pairs: written in the transaction of every row
/// write, answering an exact pair with the matching ids only, and never holding a value in clear.
final class AttributeIndexTests: XCTestCase {
    var store: TempStore!
    override func setUpWithError() throws { store = try TempStore() }
    override func tearDown() { store = nil }

    private func extras(_ map: [String: String], git: String = "") -> SecureBytes {
        SecureBytes(copying: Array(git.utf8) + SecretAttributeLines.encode(map, contentType: "text/plain"))
    }

    func testEveryWriteKeepsTheIndex() throws {
        let k = try store.create()
        let key = try ItemKey.generic(GenericPasswordKey(service: "app", account: "ann"))
        let item = try k.add(ItemRecord(key: key, attributes: ItemAttributes()), secret: secure("s"),
                             extras: extras(["application": "unique-marker-value", "kind": "token"], git: "password_expiry_utc=1\n"))
        XCTAssertEqual(try k.itemIDs(withAttribute: "application", value: "unique-marker-value"), [item.id])
        XCTAssertEqual(try k.itemIDs(withAttribute: "kind", value: "token"), [item.id])
        XCTAssertEqual(try k.itemIDs(withAttribute: "kind", value: "other"), [])
        XCTAssertEqual(try k.itemIDs(withAttribute: "application", value: "unique-marker"), [], "exact match only")

        // An update with another map replaces its pairs; one that keeps the extras keeps them.
        let updated = try k.update(item, to: item.record, secret: secure("t"), extras: extras(["kind": "password"]))
        XCTAssertEqual(try k.itemIDs(withAttribute: "kind", value: "token"), [])
        XCTAssertEqual(try k.itemIDs(withAttribute: "kind", value: "password"), [item.id])
        let kept = try k.update(updated, to: updated.record, secret: secure("u"))
        XCTAssertEqual(try k.itemIDs(withAttribute: "kind", value: "password"), [kept.id])

        // A batch indexes what it inserts.
        var batch = ItemBatch()
        let other = try ItemKey.generic(GenericPasswordKey(service: "app", account: "bob"))
        batch.append(ItemRecord(key: other, attributes: ItemAttributes()), secret: secure("b"), extras: extras(["kind": "password"]))
        let saved = try k.save(batch: batch, updateExisting: true).saved
        XCTAssertEqual(Set(try k.itemIDs(withAttribute: "kind", value: "password")), [kept.id, saved[0].id])

        try k.delete([kept])
        XCTAssertEqual(try k.itemIDs(withAttribute: "kind", value: "password"), [saved[0].id])
        XCTAssertEqual(try store.sql("SELECT COUNT(*) FROM attribute_index WHERE item_id = \(kept.id);")
            .trimmingCharacters(in: .whitespacesAndNewlines), "0")
    }

    func testNoValueInClear() throws {
        let k = try store.create()
        let key = try ItemKey.generic(GenericPasswordKey(service: "svc", account: "a"))
        try k.add(ItemRecord(key: key, attributes: ItemAttributes()), secret: secure("s"),
                  extras: extras(["needle-name": "needle-value-4711"]))
        try store.sql("PRAGMA wal_checkpoint(TRUNCATE);")
        for suffix in ["", "-wal"] {
            guard let bytes = FileManager.default.contents(atPath: store.path + suffix) else { continue }
            XCTAssertNil(bytes.range(of: Data("needle-value-4711".utf8)), "value in clear in \(suffix)")
            XCTAssertNil(bytes.range(of: Data("needle-name".utf8)), "name in clear in \(suffix)")
        }
    }

    func testLinesRoundTrip() {
        let map = ["we=ird": "new\nline%", "ключ": "значение"]
        let bytes = Array("oauth_refresh_token=x\n".utf8) + SecretAttributeLines.encode(map, contentType: "a/b")
        let parsed = bytes.withUnsafeBytes { SecretAttributeLines.parse($0) }
        XCTAssertEqual(parsed.attributes, map)
        XCTAssertEqual(parsed.contentType, "a/b")
    }
}
