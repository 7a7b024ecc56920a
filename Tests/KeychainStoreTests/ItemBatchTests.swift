import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStore
import XCTest

final class ItemBatchTests: StoreTestCase {

    func testBatchAddsEveryItemWithItsSecretAndAttributes() throws {
        let keys = try (0..<300).map { try genericKey("svc\($0 % 7)", "acct\($0)") }
        let web = try internetKey("example.org", port: 8443, path: "a/b", account: "carol")
        var items = keys.enumerated().map { (record($1, label: "L\($0)"), "secret-\($0)") }
        items.append((record(web, class: .afterFirstUnlock), ""))
        let result = try k.save(batch: batch(items), updateExisting: false)
        XCTAssertEqual(result.added, 301)
        XCTAssertEqual(result.replaced, 0)
        XCTAssertEqual(result.skipped, [])
        XCTAssertEqual(result.saved.count, 301)
        XCTAssertEqual(try secret(keys[0]), "secret-0")
        XCTAssertEqual(try secret(keys[299]), "secret-299")
        XCTAssertEqual(try secret(web), "")
        let item = try XCTUnwrap(try k.item(for: keys[42]))
        XCTAssertEqual(item.record.attributes.label, "L42")
        XCTAssertEqual(item.record.attributes.created, Date(timeIntervalSince1970: 1_000_000))
        XCTAssertEqual(try XCTUnwrap(try k.item(for: web)).accessible, .afterFirstUnlock)
        XCTAssertEqual(try k.verify().problems, [])
        XCTAssertEqual(Set(result.saved.map(\.id)).count, 301, "every item has its own id")
    }

    func testBatchSkipsExistingKeysAndChangesNothingOfThem() throws {
        let existing = try add(k, genericKey("github", "alice"), "old")
        let result = try k.save(batch: batch([(record(try genericKey("github", "alice")), "new"),
                                              (record(try genericKey("github", "bob")), "bob")]),
                                updateExisting: false)
        XCTAssertEqual(result.added, 1)
        XCTAssertEqual(result.skipped, [try genericKey("github", "alice")])
        let now = try XCTUnwrap(try k.item(for: genericKey("github", "alice")))
        XCTAssertEqual(now.sealed, existing.sealed)
        XCTAssertEqual(try secret(genericKey("github", "alice")), "old")
        XCTAssertEqual(try secret(genericKey("github", "bob")), "bob")
    }

    func testOverwriteReplacesTheWholeItemUnderItsIdWithANewVersion() throws {
        let existing = try add(k, genericKey("github", "alice"), "old", class: .always)
        let result = try k.save(batch: batch([(record(try genericKey("github", "alice"), class: .afterFirstUnlock,
                                                      label: "from backup"), "new")]),
                                updateExisting: true)
        XCTAssertEqual(result.replaced, 1)
        XCTAssertEqual(result.added, 0)
        let now = try XCTUnwrap(try k.item(for: genericKey("github", "alice")))
        XCTAssertEqual(now.id, existing.id)
        XCTAssertEqual(now.sealed.version, existing.sealed.version + 1)
        XCTAssertEqual(now.accessible, .afterFirstUnlock)
        XCTAssertEqual(now.record.attributes.label, "from backup")
        XCTAssertEqual(now.record.attributes.created, Date(timeIntervalSince1970: 1_000_000))
        XCTAssertEqual(try secret(genericKey("github", "alice")), "new")
        XCTAssertEqual(result.saved.map(\.sealed), [now.sealed])
        XCTAssertEqual(try k.verify().problems, [])
    }

    func testALaterEntryMeetsAnEarlierOneWithTheSameKey() throws {
        let key = try genericKey("dup", "x")
        let skip = try k.save(batch: batch([(record(key), "first"), (record(key), "second")]), updateExisting: false)
        XCTAssertEqual(skip.added, 1)
        XCTAssertEqual(skip.skipped, [key])
        XCTAssertEqual(try secret(key), "first")
        let replace = try k.save(batch: batch([(record(key), "third"), (record(key), "fourth")]), updateExisting: true)
        XCTAssertEqual(replace.replaced, 2)
        XCTAssertEqual(try secret(key), "fourth")
    }

    func testAFailingItemLeavesTheStoreAsItWas() throws {
        try add(k, genericKey("keep", "me"), "kept")
        var b = batch([(record(try genericKey("new", "one")), "1")])
        let tooBig = SecureBytes(count: maxSecretBytes + 1)
        b.append(record(try genericKey("new", "two")), secret: tooBig)
        assertKeychainError(.secretTooLarge(maxSecretBytes + 1), try k.save(batch: b, updateExisting: false))
        XCTAssertNil(try k.item(for: genericKey("new", "one")), "the batch is one transaction")
        XCTAssertEqual(try k.allItems().items.map(\.key), [try genericKey("keep", "me")])
    }

    func testAFailureAmongManyItemsStopsTheSealingAndLeavesTheStoreAsItWas() throws {
        var b = ItemBatch()
        for i in 0..<400 {
            if i == 150 {
                b.append(record(try genericKey("many", "big")), secret: SecureBytes(count: maxSecretBytes + 1))
            } else {
                b.append(record(try genericKey("many", "\(i)")), secret: secure("s\(i)"))
            }
        }
        assertKeychainError(.secretTooLarge(maxSecretBytes + 1), try k.save(batch: b, updateExisting: false))
        XCTAssertEqual(try k.allItems().items.count, 0)
        // The same store still takes a batch afterwards.
        XCTAssertEqual(try k.save(batch: batch([(record(try genericKey("after", "x")), "y")]), updateExisting: false).added, 1)
    }

    func testLockedClassesAreRefused() throws {
        k.lock()
        assertKeychainError(.unavailable(.whenUnlocked),
                            try k.save(batch: batch([(record(try genericKey("a", "b")), "s")]), updateExisting: false))
        XCTAssertEqual(try k.save(batch: batch([(record(try genericKey("a", "b"), class: .afterFirstUnlock), "s")]),
                                  updateExisting: false).added, 1)
    }

    func testIdsAreNeverReusedAfterABatch() throws {
        let result = try k.save(batch: batch([(record(try genericKey("a", "1")), "x"), (record(try genericKey("a", "2")), "y")]),
                                updateExisting: false)
        let next = try add(k, genericKey("a", "3"), "z")
        XCTAssertGreaterThan(next.id, result.saved.map(\.id).max()!)
        try k.delete([next])
        XCTAssertGreaterThan(try add(k, genericKey("a", "4"), "w").id, next.id)
    }

    func testTheLedgerFollowsABatchSoTheNextOpenSeesNoRollback() throws {
        try add(k, genericKey("github", "alice"), "old")
        _ = try k.save(batch: batch((0..<100).map { (record(try genericKey("svc", "a\($0)")), "s\($0)") }), updateExisting: false)
        _ = try k.save(batch: batch([(record(try genericKey("github", "alice")), "new"),
                                     (record(try genericKey("svc", "a1")), "again")]), updateExisting: true)
        let reopened = try store.openUnlocked()
        XCTAssertEqual(try reopened.countsByClass().values.reduce(0, +), 101)
        XCTAssertEqual(text(try reopened.secret(of: XCTUnwrap(try reopened.item(for: genericKey("github", "alice"))))), "new")
        XCTAssertEqual(try reopened.verify().problems, [])
    }

    func testOverwritingErasesTheReplacedRowsFromTheWAL() throws {
        try add(k, genericKey("github", "alice"), "old")
        _ = try k.save(batch: batch([(record(try genericKey("github", "alice")), "new")]), updateExisting: true)
        let wal = (FileManager.default.contents(atPath: store.path + "-wal") ?? Data()).filter { $0 != 0 }.count
        XCTAssertEqual(wal, 0, "the WAL is emptied (zeroed) once an overwriting batch returns")
    }

    func testABatchSealsUnderTheNewestGenerationWithItsExtras() throws {
        try k.changePassphrase(old: secure(TempStore.passphrase), new: secure("second"), scrypt: TempStore.scrypt)
        let k = try store.openUnlocked(passphrase: "second")
        var b = ItemBatch()
        b.append(record(try genericKey("git", "u")), secret: secure("pw"), extras: secure("password_expiry_utc=1900000000"))
        b.append(record(try genericKey("git", "v")), secret: secure("pw2"))
        let result = try k.save(batch: b, updateExisting: false)
        XCTAssertEqual(result.saved.map(\.sealed.generation), [k.keyGeneration, k.keyGeneration])
        let u = try XCTUnwrap(try k.item(for: genericKey("git", "u")))
        XCTAssertEqual(try k.extras(of: u).map(text), "password_expiry_utc=1900000000")
        XCTAssertNil(try k.extras(of: XCTUnwrap(try k.item(for: genericKey("git", "v")))))
        // -U replaces the extras with the backup's, none included.
        _ = try k.save(batch: batch([(record(try genericKey("git", "u")), "pw3")]), updateExisting: true)
        XCTAssertNil(try k.extras(of: XCTUnwrap(try k.item(for: genericKey("git", "u")))))
        XCTAssertEqual(try store.openUnlocked(passphrase: "second").verify().problems, [])
    }

    func testAnEmptyBatchDoesNothing() throws {
        let result = try k.save(batch: ItemBatch(), updateExisting: false)
        XCTAssertEqual(result.added + result.replaced + result.skipped.count, 0)
    }

    func testSlicesShareTheBufferAndRespectTheirBounds() throws {
        var b = ItemBatch()
        for i in 0..<10 { b.append(record(try genericKey("s", "\(i)")), secret: secure(String(repeating: "x", count: 100))) }
        let byCount = b.slices(maxItems: 4, maxSecretBytes: 1 << 20)
        XCTAssertEqual(byCount.map(\.count), [4, 4, 2])
        let byBytes = b.slices(maxItems: 100, maxSecretBytes: 250)
        XCTAssertEqual(byBytes.map(\.count), [2, 2, 2, 2, 2])
        XCTAssertTrue(byBytes.allSatisfy { $0.secrets === b.secrets })
        // An entry larger than the byte bound still gets a slice of its own.
        XCTAssertEqual(b.slices(maxItems: 100, maxSecretBytes: 10).map(\.count), Array(repeating: 1, count: 10))
        for slice in byBytes { _ = try k.save(batch: slice, updateExisting: false) }
        XCTAssertEqual(try k.allItems().items.count, 10)
        XCTAssertEqual(try secret(genericKey("s", "9")), String(repeating: "x", count: 100))
    }

    func testABatchOverABufferRefusesRangesOutsideIt() throws {
        let buffer = secure("abc")
        let entry = ItemBatch.Entry(record: record(try genericKey("a", "b")), secret: 1..<4)
        assertKeychainError(isInvalidInput, "invalid input", try ItemBatch(secrets: buffer, entries: [entry]))
        let ok = try ItemBatch(secrets: buffer, entries: [ItemBatch.Entry(record: entry.record, secret: 1..<3)])
        ok.withSecret(ok.entries[0]) { XCTAssertEqual(Array($0), Array("bc".utf8)) }
    }
}
