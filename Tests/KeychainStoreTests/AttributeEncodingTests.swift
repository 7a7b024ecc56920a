import Foundation
import KeychainCrypto
import KeychainModel
@testable import KeychainStore
import XCTest

/// The binary attribute encoding (format 1) and the JSON that earlier versions wrote.
final class AttributeEncodingTests: XCTestCase {
    func full() throws -> ItemRecord {
        let key = ItemKey.internet(try InternetPasswordKey(
            server: "sërver.example", port: 8443, path: "a/b/ç", protocol: .http,
            authenticationType: AuthenticationType(parsing: "ntlm"), securityDomain: "realm", account: "dév",
            accessGroup: "group"))
        let attributes = ItemAttributes(try AttributeValues {
            $0.label = "label ✓"; $0.comment = ""; $0.description = "kind"
            $0.generic = Data([0, 1, 2, 255]); $0.creator = try FourCharCode("abcd"); $0.type = try FourCharCode("wx z")
        }, accessible: .afterFirstUnlockThisDeviceOnly,
           created: Date(timeIntervalSinceReferenceDate: 812_345_678.123_456), modified: Date(timeIntervalSinceReferenceDate: 812_345_999.5))
        return ItemRecord(key: key, attributes: attributes)
    }

    func decode(_ bytes: [UInt8]) -> ItemRecord? { bytes.withUnsafeBytes { AttributeEncoding.decode($0) } }

    func testEveryFieldRoundTrips() throws {
        let internet = try full()
        let generic = ItemRecord(key: try genericKey("svc/x", "", group: "g"), attributes: ItemAttributes(accessible: .always))
        for record in [internet, generic] {
            let bytes = AttributeEncoding.encode(record)
            XCTAssertEqual(bytes.first, 1, "the format byte leads")
            XCTAssertEqual(decode(bytes), record)
        }
    }

    func testBinaryIsSmallerThanJSON() throws {
        let record = try full()
        XCTAssertLessThan(AttributeEncoding.encode(record).count, try JSONEncoder().encode(record).count / 2)
    }

    func testJSONOfEarlierVersionsStillDecodes() throws {
        let record = try full()
        XCTAssertEqual(decode(Array(try JSONEncoder().encode(record))), record)
    }

    /// Every truncation, every extra byte, an unknown format byte, an unknown kind or class, a
    /// bad code, bad UTF-8 and unknown mask bits are refused, never trapped on.
    func testDamagedEncodingsAreRefused() throws {
        let bytes = AttributeEncoding.encode(try full())
        for n in 0..<bytes.count { XCTAssertNil(decode(Array(bytes.prefix(n))), "truncated to \(n)") }
        XCTAssertNil(decode(bytes + [0]))
        var format = bytes; format[0] = 2
        XCTAssertNil(decode(format))
        var kind = bytes; kind[1] = 3
        XCTAssertNil(decode(kind))
        let generic = AttributeEncoding.encode(ItemRecord(key: try genericKey("s", "a"), attributes: ItemAttributes()))
        // format, kind, three one-byte strings ("", "s", "a"), then the class byte.
        var badClass = generic; badClass[1 + 1 + 1 + 2 + 2] = 99
        XCTAssertNil(decode(badClass))
        var mask = generic; mask[mask.count - 1] = 0x80
        XCTAssertNil(decode(mask))
        var utf8 = generic; utf8[4] = 0xff
        XCTAssertNil(decode(utf8))
        let overlong: [UInt8] = [1, 1] + [0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        XCTAssertNil(decode(overlong))
        XCTAssertNil(decode([]))
        XCTAssertNil(decode(Array("[1]".utf8)))
    }

    func testNewAndUpdatedRowsAreWrittenInFormat1() throws {
        let store = try TempStore()
        let k = try store.create()
        let item = try add(k, genericKey("svc", "acct"), "pw")
        XCTAssertEqual(try firstAttributeByte(k, item), 1)
        var record = item.record
        record.attributes.label = "changed"
        let updated = try k.update(item, to: record)
        XCTAssertEqual(try firstAttributeByte(k, updated), 1)
        XCTAssertEqual(try k.item(for: item.key)?.record.attributes.label, "changed")
    }
}

/// The first byte of the item's attributes as sealed: 1 for format 1, `{` for JSON.
func firstAttributeByte(_ k: Keychain, _ item: KeychainItem) throws -> UInt8? {
    let c = item.accessible
    let key = try XCTUnwrap(k.keybag.withLock { $0.metadataKey(c, generation: item.sealed.generation) })
    return try AESGCM.open(item.sealed.attributes, key: key, aad: item.sealed.aad("attrs")).unprotectedArray.first
}

/// A store written by keychainfs 0.x at f190854 (attributes in JSON, generation 1, the ledger)
/// opens, reads, verifies and takes changes, which are written in format 1.
final class JSONAttributeStoreTests: XCTestCase {
    var store: TempStore!

    override func setUpWithError() throws {
        store = try TempStore.fixture(database: "json-store.db", deviceKey: "json-device.key")
    }
    override func tearDown() { store = nil }

    func testAStoreWithJSONAttributesReadsVerifiesAndTakesChanges() throws {
        let boot = try store.open()
        XCTAssertEqual(text(try boot.secret(of: XCTUnwrap(try boot.item(for: genericKey("json", "always"))))), "secret-always")
        let k = try store.openUnlocked(passphrase: "json pass")
        XCTAssertEqual(k.keyGeneration, 1)
        for c in AccessibilityClass.allCases {
            let item = try XCTUnwrap(try k.item(for: genericKey("json", c.rawValue)))
            XCTAssertEqual(item.accessible, c)
            XCTAssertEqual(text(try k.secret(of: item)), "secret-\(c.rawValue)")
        }
        let full = try XCTUnwrap(try k.item(for: genericKey("sërvice/x", "äccount")))
        let a = full.record.attributes
        XCTAssertEqual([a.label, a.comment, a.description], ["the label", "a comment", "a kind"])
        XCTAssertEqual(a.generic, Data("generic bytes".utf8))
        XCTAssertEqual([a.creator?.text, a.type?.text], ["abcd", "wxyz"])
        XCTAssertEqual(text(try k.secret(of: full)), "full")
        let net = try XCTUnwrap(try k.items(matching: ItemQuery(kind: .internet)).first)
        guard case .internet(let key) = net.key else { return XCTFail("not an internet password") }
        XCTAssertEqual([key.server, key.path, key.securityDomain, key.account], ["git.example", "a/b", "realm", "dev"])
        XCTAssertEqual(key.port, 8443)
        XCTAssertEqual(key.protocol, .http)
        XCTAssertEqual(text(try k.secret(of: net)), "netpw")
        XCTAssertEqual(try k.verify().problems, [])
        XCTAssertEqual(try k.allItems().items.count, 9)

        // Changed rows are written in format 1 and read back the same; the others stay in JSON.
        var record = full.record
        record.attributes.comment = "changed"
        try k.update(full, to: record, secret: secure("new"))
        try add(k, genericKey("new", "item"), "fresh")
        let again = try store.openUnlocked(passphrase: "json pass")
        let changed = try XCTUnwrap(try again.item(for: genericKey("sërvice/x", "äccount")))
        XCTAssertEqual(changed.record.attributes.comment, "changed")
        XCTAssertEqual(changed.record.attributes.generic, Data("generic bytes".utf8))
        XCTAssertEqual(changed.record.attributes.created, a.created)
        XCTAssertEqual(try firstAttributeByte(again, changed), 1)
        XCTAssertEqual(try firstAttributeByte(again, net), UInt8(ascii: "{"))
        XCTAssertEqual(text(try again.secret(of: changed)), "new")
        XCTAssertEqual(try again.verify().problems, [])
    }
}
