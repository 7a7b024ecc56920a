import Foundation
import KeychainBatch
import KeychainCrypto
import KeychainModel
@testable import KeychainStore
import XCTest

/// The blind index of Secret Service attribute pairs: written in the transaction of every row
/// write, answering an exact pair with the matching ids only, and never holding a value in clear.
final class AttributeIndexTests: XCTestCase {
    /// Blinds come from a small cache of the last ones computed (`RecentBlinds`): each is the
    /// HMAC of its own bytes, through evictions, and none is given once the keys are forgotten.
    func testBlindsFromTheCacheAreEachKeysOwn() throws {
        let k = try store.create()
        let keys = try (0..<6).map { try genericKey("svc\($0)", "a").canonicalBytes }
        let first = try keys.map { try k.blind($0) }
        let again = try keys.reversed().map { try k.blind($0) }
        XCTAssertEqual(first, Array(again.reversed()))
        XCTAssertEqual(Set(first).count, keys.count)
        let other = try store.openUnlocked()
        XCTAssertEqual(try keys.map { try other.blind($0) }, first, "the same as computed afresh")
        k.forgetKeys()
        assertKeychainError(.unavailable(.whenUnlocked), try k.blind(keys[5]))
    }

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

    /// Every row is indexed under its attributes, name fields included, whoever made it: a
    /// search by name fields alone is an index search, and follows a rename.
    func testNameFieldsAndNaturalAttributesAreIndexed() throws {
        let k = try store.create()
        let tree = try add(k, genericKey("mail", "alice"), "1")
        let web = try add(k, internetKey("example.org", port: 8443, account: "alice"), "2")
        let dbus = try k.add(ItemRecord(key: try genericKey("app", "ann"), attributes: ItemAttributes()), secret: secure("s"),
                             extras: extras(["service": "app", "username": "ann", "kind": "token"]))
        XCTAssertEqual(try k.itemIDs(matching: ["username": "alice"], collection: nil), [tree.id])
        XCTAssertEqual(try k.itemIDs(matching: ["user": "alice"], collection: nil), [web.id])
        XCTAssertEqual(try k.itemIDs(matching: ["account": "alice"], collection: nil), [tree.id, web.id])
        XCTAssertEqual(try k.itemIDs(matching: ["server": "example.org", "port": "8443", "xdg:schema": "org.git.Password"],
                                     collection: nil), [web.id])
        XCTAssertEqual(try k.itemIDs(matching: ["xdg:schema": "org.gnome.keyring.NetworkPassword"], collection: nil), [web.id])
        XCTAssertEqual(try k.itemIDs(matching: ["service": "app", "username": "ann"], collection: nil), [dbus.id])
        // The D-Bus item has exactly its map: no natural `account` it was not given.
        XCTAssertEqual(try k.itemIDs(matching: ["account": "ann"], collection: nil), [])
        XCTAssertEqual(try k.itemIDs(matching: [:], collection: nil), [tree.id, web.id, dbus.id])

        // A rename moves the name fields' pairs.
        let moved = try k.update(dbus, to: ItemRecord(key: try genericKey("app", "bea"), attributes: dbus.record.attributes))
        XCTAssertEqual(try k.itemIDs(matching: ["username": "ann"], collection: nil), [])
        XCTAssertEqual(try k.itemIDs(matching: ["username": "bea", "kind": "token"], collection: nil), [moved.id])
    }

    /// An update that keeps the key and the extras (a new secret, as a save through the mount)
    /// leaves the row's index entries as they were, byte for byte, and they still answer; a
    /// rename afterwards still moves the name fields' pairs.
    func testAnUpdateOfTheSecretAloneKeepsTheEntries() throws {
        let k = try store.create()
        let tree = try add(k, genericKey("mail", "alice"), "1")
        let dbus = try k.add(ItemRecord(key: try genericKey("app", "ann"), attributes: ItemAttributes()), secret: secure("s"),
                             extras: extras(["service": "app", "username": "ann", "kind": "token"]))
        let entries = "SELECT hex(tag), item_id FROM attribute_index UNION ALL SELECT hex(tag), item_id FROM attribute_pending ORDER BY 1, 2;"
        let before = try store.sql(entries)
        let tree2 = try k.update(tree, to: tree.record, secret: secure("2"))
        let dbus2 = try k.update(dbus, to: dbus.record, secret: secure("t"))
        XCTAssertEqual(try store.sql(entries), before)
        XCTAssertEqual(try k.itemIDs(matching: ["account": "alice"], collection: nil), [tree2.id])
        XCTAssertEqual(try k.itemIDs(matching: ["username": "ann", "kind": "token"], collection: nil), [dbus2.id])
        XCTAssertEqual(try k.extras(of: dbus2).map { $0.unprotectedArray }, extras(["service": "app", "username": "ann", "kind": "token"]).unprotectedArray)

        let moved = try k.update(tree2, to: ItemRecord(key: try genericKey("mail", "bob"), attributes: tree2.record.attributes))
        XCTAssertEqual(try k.itemIDs(matching: ["account": "alice"], collection: nil), [])
        XCTAssertEqual(try k.itemIDs(matching: ["account": "bob"], collection: nil), [moved.id])
    }

    /// Locked, and before first unlock, a search still finds every match (from the index alone).
    func testSearchAnswersInEveryLockState() throws {
        let k = try store.create()
        let a = try add(k, genericKey("mail", "alice"), "1")
        let b = try add(k, genericKey("mail", "bob"), "2", class: .always)
        k.lock()
        XCTAssertEqual(try k.itemIDs(matching: ["service": "mail"], collection: nil), [a.id, b.id])
        let boot = try store.open()
        XCTAssertEqual(boot.state, .beforeFirstUnlock)
        XCTAssertEqual(try boot.itemIDs(matching: ["service": "mail"], collection: nil), [a.id, b.id])
        XCTAssertEqual(try boot.itemClass(id: a.id), .whenUnlocked)
        XCTAssertNil(try boot.item(id: a.id), "its name stays sealed")
    }

    /// Collections: an item is in the one its extras name (none: the default), found by tag.
    func testCollections() throws {
        let k = try store.create()
        let login = try add(k, genericKey("mail", "alice"), "1")
        let work = try k.add(ItemRecord(key: try genericKey("mail", "work"), attributes: ItemAttributes()), secret: secure("s"),
                             extras: SecureBytes(copying: SecretAttributeLines.encode(["service": "mail", "username": "work"],
                                                                                     contentType: "text/plain", collection: "work")))
        let all = ["login", "work"]
        XCTAssertEqual(try k.itemIDs(matching: ["service": "mail"], collection: "work", others: all), [work.id])
        XCTAssertEqual(try k.itemIDs(matching: ["service": "mail"], collection: "login", others: all), [login.id])
        XCTAssertEqual(try k.itemIDs(matching: [:], collection: "work", others: all), [work.id])
        XCTAssertTrue(try k.item(work.id, isIn: "work", others: all))
        XCTAssertFalse(try k.item(work.id, isIn: "login", others: all))
        XCTAssertTrue(try k.item(login.id, isIn: "login", others: all))
    }

    /// Every statement of a search is a search of the index's primary key: no pass over a
    /// table, no sort, so a search costs the same in a store of any size.
    /// The waiting entries (`indexPendingTags`) are read in one pass over their table, in its
    /// order, with no sort.
    func testSearchStatementsSearchTheIndex() throws {
        _ = try store.create()
        func plan(_ sql: String) throws -> String {
            let bound = sql.replacingOccurrences(of: "\\?[0-9]*", with: "x'00'", options: .regularExpression)
            return try store.sql("EXPLAIN QUERY PLAN " + bound)
        }
        for sql in [AttributeQuery.seek, AttributeQuery.probe, AttributeQuery.range] {
            let plan = try plan(sql)
            XCTAssertTrue(plan.contains("SEARCH attribute_index USING PRIMARY KEY (tag=?"), "\(sql): \(plan)")
            XCTAssertFalse(plan.contains("SCAN") || plan.contains("TEMP B-TREE"), "\(sql): \(plan)")
        }
        XCTAssertTrue(try plan(AttributeQuery.probe).contains("SEARCH attribute_pending USING PRIMARY KEY (item_id=? AND tag=?)"))
        let waiting = try plan(AttributeQuery.pending(3))
        XCTAssertTrue(waiting.contains("SCAN attribute_pending"), waiting)
        XCTAssertFalse(waiting.contains("TEMP B-TREE"), waiting)
    }

    /// A create's entries wait in `attribute_pending` until commits pause, found by every
    /// search meanwhile, in every lock state and after a crash; an update or delete of such a
    /// row changes them where they are; `settle` moves them into the index, where they answer
    /// alike.
    func testEntriesOfNewRowsWaitUntilCommitsPauseAndAreFoundMeanwhile() throws {
        let k = try store.create()
        func count(_ table: String) throws -> Int {
            Int(try store.sql("SELECT COUNT(*) FROM \(table);").trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
        }
        let indexedBefore = try count("attribute_index")
        let alice = try add(k, genericKey("mail", "alice"), "1")
        let bob = try add(k, genericKey("mail", "bob"), "2", class: .always)
        let work = try k.add(ItemRecord(key: try genericKey("mail", "work"), attributes: ItemAttributes()), secret: secure("s"),
                             extras: SecureBytes(copying: SecretAttributeLines.encode(["service": "mail", "username": "work"],
                                                                                     contentType: "text/plain", collection: "work")))
        XCTAssertEqual(try count("attribute_index"), indexedBefore, "a create writes no index page")
        XCTAssertEqual(try count("attribute_pending"), 3 + 3 + 3)
        let all = ["login", "work"]
        func assertFound(_ when: String) throws {
            XCTAssertEqual(try k.itemIDs(matching: ["service": "mail"], collection: nil), [alice.id, bob.id, work.id], when)
            XCTAssertEqual(try k.itemIDs(matching: ["service": "mail", "account": "bob"], collection: nil), [bob.id], when)
            XCTAssertEqual(try k.itemIDs(matching: ["service": "mail", "account": "carol"], collection: nil), [], when)
            XCTAssertEqual(try k.itemIDs(matching: ["service": "mail"], collection: "work", others: all), [work.id], when)
            XCTAssertEqual(try k.itemIDs(matching: ["service": "mail"], collection: "login", others: all), [alice.id, bob.id], when)
            XCTAssertEqual(try k.itemIDs(matching: [:], collection: "login", others: all), [alice.id, bob.id], when)
            XCTAssertTrue(try k.item(work.id, isIn: "work", others: all), when)
            XCTAssertFalse(try k.item(work.id, isIn: "login", others: all), when)
        }
        try assertFound("waiting")
        // As after a crash before they moved: the next open, before first unlock, finds them.
        let boot = try store.open()
        XCTAssertEqual(try boot.itemIDs(matching: ["service": "mail", "account": "alice"], collection: nil), [alice.id])
        k.settle()
        XCTAssertEqual(try count("attribute_pending"), 0)
        XCTAssertEqual(try count("attribute_index"), indexedBefore + 9)
        try assertFound("moved into the index")

        // A rename and a delete of rows whose entries wait, and of rows whose entries moved.
        let carol = try add(k, genericKey("mail", "carol"), "3")
        let dave = try add(k, genericKey("mail", "dave"), "4")
        let erin = try k.update(carol, to: ItemRecord(key: try genericKey("mail", "erin"), attributes: carol.record.attributes))
        let frank = try k.update(alice, to: ItemRecord(key: try genericKey("mail", "frank"), attributes: alice.record.attributes))
        try k.delete([dave, bob])
        for when in ["waiting", "moved"] {
            XCTAssertEqual(try k.itemIDs(matching: ["service": "mail"], collection: nil), [frank.id, work.id, erin.id], when)
            for gone in ["alice", "bob", "carol", "dave"] {
                XCTAssertEqual(try k.itemIDs(matching: ["account": gone], collection: nil), [], "\(gone), \(when)")
            }
            XCTAssertEqual(try k.itemIDs(matching: ["account": "erin"], collection: nil), [erin.id], when)
            XCTAssertEqual(try k.itemIDs(matching: ["username": "frank"], collection: nil), [frank.id], when)
            k.settle()
        }
        XCTAssertEqual(try count("attribute_pending"), 0)
        XCTAssertEqual(try count("attribute_index"), indexedBefore + 9, "frank's, work's and erin's three entries")

        // An instance that created moves its entries at close (one that only looked moves
        // nothing: test_probes.sh).
        do { _ = try add(try store.openUnlocked(), genericKey("mail", "gina"), "5") }
        XCTAssertEqual(try count("attribute_pending"), 0, "moved at close")
    }

    /// Among many items a search finds exactly its matches (its cost is that of the seeks
    /// `testSearchStatementsSearchTheIndex` checks).
    func testSearchesAmongManyItems() throws {
        let k = try store.create()
        var batch = ItemBatch()
        for i in 0..<3000 {
            batch.append(ItemRecord(key: try genericKey("svc\(i % 300)", "user\(i)"), attributes: ItemAttributes()), secret: secure("s"))
        }
        _ = try k.save(batch: batch, updateExisting: false)
        XCTAssertEqual(try k.itemIDs(matching: ["username": "user1234"], collection: nil).count, 1)
        XCTAssertEqual(try k.itemIDs(matching: ["service": "svc7", "username": "user1207"], collection: nil).count, 1)
        XCTAssertEqual(try k.itemIDs(matching: ["service": "svc7"], collection: nil).count, 10)
    }

    /// A batch writes its new rows' entries after the rows, sorted by tag; an entry later in
    /// the batch that replaces one added earlier in it still leaves exactly its own pairs.
    func testBatchThatReplacesItsOwnNewItemIndexesTheLastOne() throws {
        let k = try store.create()
        let key = try genericKey("app", "carol")
        var batch = ItemBatch()
        for i in 0..<50 {
            batch.append(ItemRecord(key: try genericKey("svc", "user\(i)"), attributes: ItemAttributes()), secret: secure("s"))
        }
        batch.append(ItemRecord(key: key, attributes: ItemAttributes()), secret: secure("1"), extras: extras(["kind": "first"]))
        batch.append(ItemRecord(key: key, attributes: ItemAttributes()), secret: secure("2"), extras: extras(["kind": "second"]))
        let result = try k.save(batch: batch, updateExisting: true)
        XCTAssertEqual(result.added, 51)
        XCTAssertEqual(result.replaced, 1)
        let id = try XCTUnwrap(k.item(for: key)).id
        XCTAssertEqual(try k.itemIDs(withAttribute: "kind", value: "first"), [])
        XCTAssertEqual(try k.itemIDs(withAttribute: "kind", value: "second"), [id])
        XCTAssertEqual(try k.itemIDs(matching: ["service": "svc"], collection: nil).count, 50)
        XCTAssertEqual(try k.itemIDs(withAttribute: "username", value: "user49").count, 1)
    }

    /// Rows written before every row was indexed (old tags, no mark) are indexed at the next
    /// unlock; a row not readable then waits for a later one.
    func testOldRowsAreIndexedOnceReadable() throws {
        let k = try store.create()
        let a = try add(k, genericKey("mail", "alice"), "1")
        let forget = "DELETE FROM attribute_index; DELETE FROM attribute_pending; DELETE FROM meta WHERE name = 'attribute_index';"
            + "UPDATE meta SET value = CAST('\(a.id + 1)' AS BLOB) WHERE name = 'attribute_index_from';"
        try store.sql(forget)
        XCTAssertEqual(try k.itemIDs(matching: ["service": "mail"], collection: nil), [])
        XCTAssertEqual(try k.completeAttributeIndex(), 0)
        XCTAssertEqual(try k.itemIDs(matching: ["service": "mail"], collection: nil), [a.id])
        XCTAssertEqual(try store.sql("SELECT COUNT(*) FROM meta WHERE name = 'attribute_index';")
            .trimmingCharacters(in: .whitespacesAndNewlines), "1")
        try store.sql(forget)
        let boot = try store.open()
        XCTAssertEqual(try boot.completeAttributeIndex(), 1, "its name cannot be read before first unlock")
        let later = try store.openUnlocked()
        XCTAssertEqual(try later.completeAttributeIndex(), 0)
        XCTAssertEqual(try later.itemIDs(matching: ["service": "mail"], collection: nil), [a.id])
        // A new store indexes every row as it is written: nothing is left for later.
        XCTAssertEqual(try store.sql("SELECT CAST(value AS TEXT) FROM meta WHERE name = 'attribute_index_from';")
            .trimmingCharacters(in: .whitespacesAndNewlines), "\(a.id + 1)")
    }

    /// The store's own records are sealed, and a changed byte fails.
    func testSealedRecords() throws {
        let k = try store.create()
        XCTAssertNil(try k.sealedRecord(named: "x"))
        try k.setSealedRecord(named: "x", to: secure("collection-label-4711"))
        XCTAssertEqual(try k.sealedRecord(named: "x").map(text), "collection-label-4711")
        XCTAssertEqual(try store.open().sealedRecord(named: "x").map(text), "collection-label-4711", "readable before first unlock")
        let bytes = try XCTUnwrap(FileManager.default.contents(atPath: store.path))
        XCTAssertNil(bytes.range(of: Data("collection-label-4711".utf8)))
        try store.sql("UPDATE meta SET value = CAST(value || x'00' AS BLOB) WHERE name = 'sealed.x';")
        assertKeychainError({ if case .integrityFailure = $0 { true } else { false } }, "tampered", try k.sealedRecord(named: "x"))
    }
}
