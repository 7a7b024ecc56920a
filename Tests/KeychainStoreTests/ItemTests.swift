import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStore
import XCTest

final class BlindIndexLookupTests: StoreTestCase {

    func testItemForKeyFindsExactGenericItem() throws {
        try add(k, genericKey("github", "alice"), "a-secret")
        try add(k, genericKey("github", "bob"), "b-secret")
        try add(k, genericKey("gitlab", "alice"), "c-secret")
        let item = try XCTUnwrap(try k.item(for: genericKey("github", "alice")))
        XCTAssertEqual(item.key, try genericKey("github", "alice"))
        XCTAssertEqual(text(try k.secret(of: item)), "a-secret")
        XCTAssertEqual(text(try k.secret(of: XCTUnwrap(try k.item(for: genericKey("gitlab", "alice"))))), "c-secret")
    }

    func testItemForKeyMissesNearKeys() throws {
        try add(k, genericKey("github", "alice"), "s")
        XCTAssertNil(try k.item(for: genericKey("github", "alicE")))
        XCTAssertNil(try k.item(for: genericKey("github", "alice", group: "team")))
        XCTAssertNil(try k.item(for: genericKey("githu", "balice")))
        XCTAssertNil(try k.item(for: internetKey("github", account: "alice")))
    }

    func testItemForKeyFindsExactInternetItem() throws {
        try add(k, internetKey("example.org", port: 443, path: "/a//b/", account: "alice"), "web")
        try add(k, internetKey("example.org", port: 22, protocol: .ssh, account: "alice"), "shell")
        // Port 0 and an unnormalised path name the same item.
        let web = try XCTUnwrap(try k.item(for: internetKey("example.org", port: 0, path: "a/b", account: "alice")))
        XCTAssertEqual(text(try k.secret(of: web)), "web")
        let ssh = try XCTUnwrap(try k.item(for: internetKey("example.org", protocol: .ssh, account: "alice")))
        XCTAssertEqual(text(try k.secret(of: ssh)), "shell")
        XCTAssertNil(try k.item(for: internetKey("example.org", port: 443, path: "a/b", protocol: .http, account: "alice")))
        XCTAssertNil(try k.item(for: internetKey("example.org", port: 443, path: "a/b", domain: "d", account: "alice")))
    }

    func testExactQueryUsesTheSameLookup() throws {
        try add(k, genericKey("github", "alice"), "s")
        let found = try k.items(matching: .exactly(genericKey("github", "alice")))
        XCTAssertEqual(found.map(\.key), [try genericKey("github", "alice")])
        XCTAssertEqual(try k.items(matching: .exactly(genericKey("github", "nobody"))), [])
    }
}

final class ItemMatchingTests: XCTestCase {
    var store: TempStore!
    var k: Keychain!

    override func setUpWithError() throws {
        store = try TempStore()
        k = try store.create()
        // Added out of order on purpose.
        try add(k, genericKey("svcB", "alice"), "1")
        try add(k, genericKey("svcA", "bob"), "2")
        try add(k, genericKey("svcA", "alice", group: "team"), "3")
        try add(k, genericKey("svcA", "alice"), "4")
        try add(k, internetKey("other.org", port: 443, account: "carol"), "5")
        try add(k, internetKey("example.org", port: 8443, path: "x", account: "bob"), "6")
        try add(k, internetKey("example.org", port: 443, account: "alice"), "7")
        try add(k, internetKey("example.org", port: 22, protocol: .ssh, account: "alice"), "8")
        try add(k, internetKey("example.org", port: 443, protocol: .https, auth: AuthenticationType(parsing: "html-form"), account: "alice"), "9")
    }
    override func tearDown() { k = nil; store = nil }

    func secrets(_ q: ItemQuery) throws -> [String] { try k.items(matching: q).map { text(try k.secret(of: $0)) } }

    func testServiceOnlyFindsEveryAccountAndGroupInOrder() throws {
        // Ordered by service, account, then access group ("" first).
        XCTAssertEqual(try secrets(ItemQuery(kind: .generic, service: "svcA")), ["4", "3", "2"])
    }

    func testAccountOnlyFindsEveryService() throws {
        XCTAssertEqual(try secrets(ItemQuery(kind: .generic, account: "alice")), ["4", "3", "1"])
        XCTAssertEqual(try secrets(ItemQuery(kind: .internet, account: "alice")), ["8", "7", "9"])
    }

    func testAccessGroupNarrows() throws {
        XCTAssertEqual(try secrets(ItemQuery(kind: .generic, accessGroup: "team")), ["3"])
        XCTAssertEqual(try secrets(ItemQuery(kind: .generic, accessGroup: "", service: "svcA")), ["4", "2"])
    }

    func testKindOnlyListsAllOfThatKindInOrder() throws {
        XCTAssertEqual(try secrets(ItemQuery(kind: .generic)), ["4", "3", "2", "1"])
        // Server, port, path, account, protocol, authentication type.
        XCTAssertEqual(try secrets(ItemQuery(kind: .internet)), ["8", "7", "9", "6", "5"])
    }

    func testServerOnlyOrdersByPortThenPathThenAccount() throws {
        XCTAssertEqual(try secrets(ItemQuery(kind: .internet, server: "example.org")), ["8", "7", "9", "6"])
        XCTAssertEqual(try secrets(ItemQuery(kind: .internet, server: "nowhere.org")), [])
    }

    func testPortOnly() throws {
        XCTAssertEqual(try secrets(ItemQuery(kind: .internet, port: 443)), ["7", "9", "5"])
        XCTAssertEqual(try secrets(ItemQuery(kind: .internet, port: 22)), ["8"])
    }

    func testPortZeroMeansTheProtocolsWellKnownPort() throws {
        XCTAssertEqual(try secrets(ItemQuery(kind: .internet, port: 0, protocol: .https)), ["7", "9", "5"])
        XCTAssertEqual(try secrets(ItemQuery(kind: .internet, port: 0, protocol: .ssh)), ["8"])
    }

    func testProtocolOnly() throws {
        XCTAssertEqual(try secrets(ItemQuery(kind: .internet, protocol: .ssh)), ["8"])
        XCTAssertEqual(try secrets(ItemQuery(kind: .internet, protocol: .https)), ["7", "9", "6", "5"])
        XCTAssertEqual(try secrets(ItemQuery(kind: .internet, protocol: .http)), [])
    }

    func testAuthenticationTypeAndPath() throws {
        XCTAssertEqual(try secrets(ItemQuery(kind: .internet, authenticationType: AuthenticationType(parsing: "html-form"))), ["9"])
        XCTAssertEqual(try secrets(ItemQuery(kind: .internet, path: "/x/")), ["6"])
        XCTAssertEqual(try secrets(ItemQuery(kind: .internet, path: "")), ["8", "7", "9", "5"])
    }

    func testServerAndAccountTogether() throws {
        XCTAssertEqual(try secrets(ItemQuery(kind: .internet, account: "alice", server: "example.org", port: 443)), ["7", "9"])
    }

    func testAttributeFiltersMatchOnlyItemsWithThatValue() throws {
        let alice = try XCTUnwrap(try k.item(for: genericKey("svcA", "alice")))
        var record = alice.record
        record.attributes = try AttributeChanges {
            $0.label = "L"; $0.comment = "C"; $0.description = "D"
            $0.generic = Data([0, 1]); $0.creator = try FourCharCode("crea"); $0.type = try FourCharCode("type")
        }.applied(to: record.attributes)
        _ = try k.update(alice, to: record)
        XCTAssertEqual(try secrets(ItemQuery(kind: .generic, attributes: AttributeValues { $0.label = "L" })), ["4"])
        XCTAssertEqual(try secrets(ItemQuery(kind: .generic, attributes: AttributeValues { $0.comment = "C" })), ["4"])
        XCTAssertEqual(try secrets(ItemQuery(kind: .generic, attributes: AttributeValues { $0.description = "D" })), ["4"])
        XCTAssertEqual(try secrets(ItemQuery(kind: .generic, attributes: AttributeValues { $0.generic = Data([0, 1]) })), ["4"])
        XCTAssertEqual(try secrets(ItemQuery(kind: .generic, attributes: AttributeValues { $0.creator = try FourCharCode("crea") })), ["4"])
        XCTAssertEqual(try secrets(ItemQuery(kind: .generic, attributes: AttributeValues { $0.type = try FourCharCode("type") })), ["4"])
        XCTAssertEqual(try secrets(ItemQuery(kind: .generic, service: "svcA", attributes: AttributeValues { $0.label = "L"; $0.comment = "C" })), ["4"])
        XCTAssertEqual(try secrets(ItemQuery(kind: .generic, attributes: AttributeValues { $0.label = "l" })), [])
        XCTAssertEqual(try secrets(ItemQuery(kind: .generic, service: "svcB", attributes: AttributeValues { $0.label = "L" })), [])
        XCTAssertEqual(try secrets(ItemQuery(kind: .internet, attributes: AttributeValues { $0.label = "L" })), [])
        // The exact-key lookup applies the filters too.
        XCTAssertEqual(try secrets(ItemQuery(kind: .generic, accessGroup: "", account: "alice", service: "svcA", attributes: AttributeValues { $0.label = "L" })), ["4"])
        XCTAssertEqual(try secrets(ItemQuery(kind: .generic, accessGroup: "", account: "alice", service: "svcA", attributes: AttributeValues { $0.label = "M" })), [])
        XCTAssertTrue(ItemQuery(kind: .generic).isUnfiltered)
        XCTAssertFalse(ItemQuery(kind: .generic, attributes: AttributeValues { $0.label = "L" }).isUnfiltered)
    }

    func testKindsDoNotMix() throws {
        XCTAssertEqual(try secrets(ItemQuery(kind: .generic, service: "example.org")), [])
        XCTAssertEqual(try secrets(ItemQuery(kind: .internet, server: "svcA")), [])
    }

    func testAllItemsPutsGenericBeforeInternet() throws {
        let (items, problems) = try k.allItems()
        XCTAssertEqual(problems, [])
        XCTAssertEqual(try items.map { text(try k.secret(of: $0)) }, ["4", "3", "2", "1", "8", "7", "9", "6", "5"])
    }

    func testCountsByClass() throws {
        try add(k, genericKey("svcC", "x"), "10", class: .always)
        let counts = try k.countsByClass()
        XCTAssertEqual(counts[.whenUnlocked], 9)
        XCTAssertEqual(counts[.always], 1)
        XCTAssertNil(counts[.afterFirstUnlock])
    }
}

final class SaveUpdateDeleteTests: StoreTestCase {

    func testSaveWithoutUpdateRefusesDuplicate() throws {
        let key = try genericKey("svc", "alice")
        try k.save(key, secret: secure("one"), updateExisting: false)
        assertKeychainError(.duplicateItem, try k.save(key, secret: secure("two"), updateExisting: false))
        XCTAssertEqual(text(try k.secret(of: XCTUnwrap(try k.item(for: key)))), "one")
    }

    func testAddRefusesDuplicate() throws {
        let key = try genericKey("svc", "alice")
        try add(k, key, "one")
        let record = ItemRecord(key: key, attributes: ItemAttributes())
        assertKeychainError(.duplicateItem, try k.add(record, secret: secure("two")))
        XCTAssertEqual(try k.allItems().items.count, 1)
    }

    func testSaveWithUpdateReplacesSecretAndKeepsCreationDate() throws {
        let key = try genericKey("svc", "alice")
        let first = try k.save(key, secret: secure("one"), changes: AttributeChanges { $0.label = "L1"; $0.comment = "C1" }, updateExisting: true)
        XCTAssertEqual(first.record.attributes.created, first.record.attributes.modified)
        Thread.sleep(forTimeInterval: 0.02)
        try k.save(key, secret: secure("two"), changes: AttributeChanges { $0.label = "L2" }, updateExisting: true)
        let item = try XCTUnwrap(try k.item(for: key))
        XCTAssertEqual(text(try k.secret(of: item)), "two")
        XCTAssertEqual(item.record.attributes.created, first.record.attributes.created)
        XCTAssertGreaterThan(item.record.attributes.modified, first.record.attributes.modified)
        XCTAssertEqual(item.record.attributes.label, "L2")
        XCTAssertEqual(item.record.attributes.comment, "C1", "attributes not given are kept")
        XCTAssertEqual(item.id, first.id)
        XCTAssertEqual(try k.allItems().items.count, 1)
    }

    func testSaveKeepsClassOnUpdateUnlessChanged() throws {
        let key = try genericKey("svc", "alice")
        try add(k, key, "one", class: .afterFirstUnlock)
        try k.save(key, secret: secure("two"), updateExisting: true)
        XCTAssertEqual(try k.item(for: key)?.accessible, .afterFirstUnlock)
        try k.save(key, secret: secure("three"), changes: AttributeChanges(accessible: .always), updateExisting: true)
        let item = try XCTUnwrap(try k.item(for: key))
        XCTAssertEqual(item.accessible, .always)
        XCTAssertEqual(text(try k.secret(of: item)), "three")
    }

    func testAttributesRoundTrip() throws {
        let key = try internetKey("example.org", port: 8080, path: "p/q", protocol: .http,
                                  auth: AuthenticationType(parsing: "http-basic"), domain: "realm", account: "alice", group: "g")
        let changes = try AttributeChanges(accessible: .afterFirstUnlockThisDeviceOnly) {
            $0.label = "label"; $0.comment = "comment"; $0.description = "desc"
            $0.generic = Data([0, 1, 2]); $0.creator = try FourCharCode("crea"); $0.type = try FourCharCode("type")
        }
        try k.save(key, secret: secure("s"), changes: changes, updateExisting: false)
        let reopened = try store.openUnlocked()
        let item = try XCTUnwrap(try reopened.item(for: key))
        XCTAssertEqual(item.key, key)
        let a = item.record.attributes
        XCTAssertEqual(a.label, "label")
        XCTAssertEqual(a.comment, "comment")
        XCTAssertEqual(a.description, "desc")
        XCTAssertEqual(a.generic, Data([0, 1, 2]))
        XCTAssertEqual(a.creator?.text, "crea")
        XCTAssertEqual(a.type?.text, "type")
        XCTAssertEqual(a.accessible, .afterFirstUnlockThisDeviceOnly)
    }

    func testUpdateKeepsCreatedAndChangesModified() throws {
        let key = try genericKey("svc", "alice")
        let item = try add(k, key, "one")
        Thread.sleep(forTimeInterval: 0.02)
        var record = item.record
        record.attributes.label = "new label"
        let updated = try k.update(item, to: record)
        XCTAssertEqual(updated.record.attributes.created, item.record.attributes.created)
        XCTAssertGreaterThan(updated.record.attributes.modified, item.record.attributes.modified)
        let read = try XCTUnwrap(try k.item(for: key))
        XCTAssertEqual(read.record.attributes.label, "new label")
        XCTAssertEqual(read.record.attributes.created, item.record.attributes.created)
        XCTAssertEqual(text(try k.secret(of: read)), "one", "the secret stays when none is given")
    }

    func testUpdateCanRenameAnItem() throws {
        let item = try add(k, genericKey("svc", "alice"), "one")
        var record = item.record
        record.key = try genericKey("svc", "alicia")
        try k.update(item, to: record)
        XCTAssertNil(try k.item(for: genericKey("svc", "alice")))
        XCTAssertEqual(text(try k.secret(of: XCTUnwrap(try k.item(for: genericKey("svc", "alicia"))))), "one")
    }

    func testUpdateOntoAnExistingKeyWithoutReplacingIsADuplicate() throws {
        let a = try add(k, genericKey("svc", "a"), "A")
        try add(k, genericKey("svc", "b"), "B")
        var record = a.record
        record.key = try genericKey("svc", "b")
        assertKeychainError(.duplicateItem, try k.update(a, to: record))
        XCTAssertEqual(text(try k.secret(of: XCTUnwrap(try k.item(for: genericKey("svc", "a"))))), "A")
        XCTAssertEqual(text(try k.secret(of: XCTUnwrap(try k.item(for: genericKey("svc", "b"))))), "B")
    }

    func testUpdateReplacingDeletesTheOtherItem() throws {
        let a = try add(k, genericKey("svc", "a"), "A")
        let b = try add(k, genericKey("svc", "b"), "B")
        var record = a.record
        record.key = try genericKey("svc", "b")
        try k.update(a, to: record, replacing: b)
        XCTAssertNil(try k.item(for: genericKey("svc", "a")))
        let now = try XCTUnwrap(try k.item(for: genericKey("svc", "b")))
        XCTAssertEqual(now.id, a.id)
        XCTAssertEqual(text(try k.secret(of: now)), "A")
        XCTAssertEqual(try k.allItems().items.count, 1)
    }

    func testFailedUpdateDoesNotDeleteTheReplacedItem() throws {
        let a = try add(k, genericKey("svc", "a"), "A")
        let b = try add(k, genericKey("svc", "b"), "B")
        // Someone else updates `a` first, so our copy is stale.
        try k.save(genericKey("svc", "a"), secret: secure("A2"), updateExisting: true)
        var record = a.record
        record.key = try genericKey("svc", "b")
        assertKeychainError(.itemNotFound, try k.update(a, to: record, secret: secure("A3"), replacing: b))
        XCTAssertEqual(text(try k.secret(of: XCTUnwrap(try k.item(for: genericKey("svc", "b"))))), "B")
        XCTAssertEqual(text(try k.secret(of: XCTUnwrap(try k.item(for: genericKey("svc", "a"))))), "A2")
    }

    func testUpdateOfDeletedItemIsNotFound() throws {
        let a = try add(k, genericKey("svc", "a"), "A")
        try k.delete([a])
        assertKeychainError(.itemNotFound, try k.update(a, to: a.record, secret: secure("x")))
        XCTAssertEqual(try k.allItems().items.count, 0)
    }

    func testDeleteRemovesOnlyTheGivenItems() throws {
        let a = try add(k, genericKey("svc", "a"), "A")
        let b = try add(k, genericKey("svc", "b"), "B")
        try add(k, genericKey("svc", "c"), "C")
        try k.delete([a, b])
        XCTAssertNil(try k.item(for: genericKey("svc", "a")))
        XCTAssertNil(try k.item(for: genericKey("svc", "b")))
        XCTAssertNotNil(try k.item(for: genericKey("svc", "c")))
        // The deleted key can be added again.
        XCTAssertNoThrow(try add(k, genericKey("svc", "a"), "A again"))
    }

    func testIdsAreNotReused() throws {
        let a = try add(k, genericKey("svc", "a"), "A")
        try k.delete([a])
        let b = try add(k, genericKey("svc", "a"), "A")
        XCTAssertGreaterThan(b.id, a.id)
    }

    func testSecretOver16MiBIsRefused() throws {
        let big = SecureBytes(count: maxSecretBytes + 1)
        assertKeychainError(.secretTooLarge(maxSecretBytes + 1),
                            try k.save(genericKey("svc", "big"), secret: big, updateExisting: false))
        XCTAssertEqual(try k.allItems().items.count, 0)
    }

    func testSecretOfExactly16MiBIsAccepted() throws {
        let big = SecureBytes(count: maxSecretBytes)
        big.withUnsafeMutableBytes { $0[0] = 1; $0[maxSecretBytes - 1] = 2 }
        try k.save(genericKey("svc", "big"), secret: big, updateExisting: false)
        let read = try k.secret(of: XCTUnwrap(try k.item(for: genericKey("svc", "big"))))
        XCTAssertTrue(read.isEqual(to: big))
    }

    func testSecretBytesAreKeptExactly() throws {
        let bytes: [UInt8] = [0, 10, 13, 255, 0, 10]
        try k.save(genericKey("svc", "bin"), secret: SecureBytes(copying: bytes), updateExisting: false)
        XCTAssertEqual(try k.secret(of: XCTUnwrap(try k.item(for: genericKey("svc", "bin")))).unprotectedArray, bytes)
        try k.save(genericKey("svc", "empty"), secret: SecureBytes(), updateExisting: false)
        XCTAssertEqual(try k.secret(of: XCTUnwrap(try k.item(for: genericKey("svc", "empty")))).count, 0)
    }
}
