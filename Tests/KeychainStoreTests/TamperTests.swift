import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStore
import XCTest

/// Alter one sealed row with the sqlite3 tool: that item, and only that one, must fail.
final class TamperTests: XCTestCase {
    var store: TempStore!
    var k: Keychain!
    var items: [String: KeychainItem] = [:]

    static let names = ["a", "b", "c"]
    static let victim = "b"

    override func setUpWithError() throws {
        store = try TempStore()
        let creator = try store.create()
        for name in Self.names { items[name] = try add(creator, genericKey("svc", name), "secret-\(name)") }
        items["web"] = try add(creator, internetKey("example.org", account: "w"), "secret-web")
        k = try store.openUnlocked()
    }
    override func tearDown() { k = nil; store = nil; items = [:] }

    var victimID: Int64 { items[Self.victim]!.id }

    func blobHex(_ column: String, id: Int64) throws -> String {
        try store.sql("SELECT hex(\(column)) FROM items WHERE id = \(id)")
    }

    func setBlob(_ column: String, id: Int64, hex: String) throws {
        try store.sql("UPDATE items SET \(column) = X'\(hex)' WHERE id = \(id)")
    }

    /// Flips the low bit of byte `index` (negative counts from the end) of a BLOB column.
    func flipByte(_ column: String, id: Int64, at index: Int) throws {
        var bytes = Array(try blobHex(column, id: id))
        let n = bytes.count / 2
        let i = index < 0 ? n + index : index
        let pair = String(bytes[2 * i...2 * i + 1])
        let flipped = String(format: "%02X", UInt8(pair, radix: 16)! ^ 0x01)
        bytes.replaceSubrange(2 * i...2 * i + 1, with: Array(flipped))
        try setBlob(column, id: id, hex: String(bytes))
    }

    /// Every item other than those excluded is listed with its attributes and its secret reads.
    func assertOthersRead(except excluded: Set<String>, file: StaticString = #filePath, line: UInt = #line) throws {
        for (name, item) in items where !excluded.contains(name) {
            let found = try XCTUnwrap(try k.item(for: item.key), name, file: file, line: line)
            XCTAssertEqual(text(try k.secret(of: found)), "secret-\(name)", file: file, line: line)
        }
        let listed = Set(try k.allItems().items.map(\.id))
        for (name, item) in items where !excluded.contains(name) {
            XCTAssertTrue(listed.contains(item.id), "\(name) is listed", file: file, line: line)
        }
    }

    /// The row's attributes no longer open: `allItems` reports it, and only it.
    func assertNamesFail(reportedAs id: Int64, alsoTheStore: Bool = false, file: StaticString = #filePath, line: UInt = #line) throws {
        let (listed, problems) = try k.allItems()
        XCTAssertEqual(problems.map(\.itemID), [id], file: file, line: line)
        XCTAssertEqual(Set(listed.map(\.id)), Set(items.values.map(\.id)).subtracting([victimID]), file: file, line: line)
        XCTAssertEqual(try k.verify().problems.map(\.itemID), (alsoTheStore ? [0] : []) + [id], file: file, line: line)
        try assertPagedVerifyAgrees(file: file, line: line)
        try assertOthersRead(except: [Self.victim], file: file, line: line)
    }

    /// The attributes still open but the secret does not.
    func assertSecretFails(file: StaticString = #filePath, line: UInt = #line) throws {
        let item = try XCTUnwrap(try k.item(for: items[Self.victim]!.key), file: file, line: line)
        assertKeychainError(isIntegrityFailure, "integrityFailure", try k.secret(of: item), file: file, line: line)
        XCTAssertEqual(try k.allItems().problems, [], file: file, line: line)
        let (checked, problems) = try k.verify()
        XCTAssertEqual(checked, items.count, file: file, line: line)
        XCTAssertEqual(problems.map(\.itemID), [victimID], file: file, line: line)
        try assertPagedVerifyAgrees(file: file, line: line)
        try assertOthersRead(except: [Self.victim], file: file, line: line)
    }

    /// `verify` reads the rows a page at a time: with pages of one and of two rows (the damaged
    /// row first, last and inside a page) it finds what one page finds, and reads every row.
    func assertPagedVerifyAgrees(file: StaticString = #filePath, line: UInt = #line) throws {
        let whole = try k.verify()
        for pageRows in [1, 2] {
            var reported: [Int] = []
            let paged = try k.verify(pageRows: pageRows) { reported.append($0) }
            XCTAssertEqual(paged.checked, whole.checked, "pages of \(pageRows)", file: file, line: line)
            XCTAssertEqual(paged.problems.map(\.itemID), whole.problems.map(\.itemID), "pages of \(pageRows)", file: file, line: line)
            XCTAssertEqual(reported.last, Int(try store.sql("SELECT count(*) FROM items")), "pages of \(pageRows)", file: file, line: line)
        }
    }

    func testUntouchedStoreVerifiesClean() throws {
        let (checked, problems) = try k.verify()
        XCTAssertEqual(checked, items.count)
        XCTAssertEqual(problems, [])
        try assertOthersRead(except: [])
    }

    func testFlippedWrappedKeyFailsOnlyThatItem() throws {
        for index in [0, 12, -1] {
            let original = try blobHex("wrapped_key", id: victimID)
            try flipByte("wrapped_key", id: victimID, at: index)
            try assertSecretFails()
            try setBlob("wrapped_key", id: victimID, hex: original)
        }
        try assertOthersRead(except: [])
    }

    func testFlippedSecretFailsOnlyThatItem() throws {
        for index in [0, 12, -1] {
            let original = try blobHex("secret", id: victimID)
            try flipByte("secret", id: victimID, at: index)
            try assertSecretFails()
            try setBlob("secret", id: victimID, hex: original)
        }
        try assertOthersRead(except: [])
    }

    func testFlippedAttributesFailOnlyThatItem() throws {
        for index in [0, 12, 40, -1] {
            let original = try blobHex("attributes", id: victimID)
            try flipByte("attributes", id: victimID, at: index)
            try assertNamesFail(reportedAs: victimID)
            assertKeychainError(isIntegrityFailure, "integrityFailure", try k.item(for: items[Self.victim]!.key))
            try setBlob("attributes", id: victimID, hex: original)
        }
        try assertOthersRead(except: [])
    }

    func testFlippedBlindIndexFailsOnlyThatItem() throws {
        try flipByte("blind", id: victimID, at: 5)
        try assertNamesFail(reportedAs: victimID)
        XCTAssertNil(try k.item(for: items[Self.victim]!.key))
    }

    func testChangedClassFailsOnlyThatItem() throws {
        try store.sql("UPDATE items SET class = \(AccessibilityClass.afterFirstUnlock.code) WHERE id = \(victimID)")
        try assertNamesFail(reportedAs: victimID)
        assertKeychainError(isIntegrityFailure, "integrityFailure", try k.item(for: items[Self.victim]!.key))
    }

    func testUnknownClassIsReportedNotHidden() throws {
        try store.sql("UPDATE items SET class = 99 WHERE id = \(victimID)")
        try assertNamesFail(reportedAs: victimID)
    }

    /// A changed id or version also no longer matches the store's ledger: verify names the
    /// store (item 0) too, and a new open refuses it (`RollbackTests`).
    func testChangedVersionFailsOnlyThatItem() throws {
        try store.sql("UPDATE items SET version = version + 1 WHERE id = \(victimID)")
        try assertNamesFail(reportedAs: victimID, alsoTheStore: true)
    }

    func testChangedIdFailsOnlyThatItem() throws {
        try store.sql("UPDATE items SET id = 1000 WHERE id = \(victimID)")
        try assertNamesFail(reportedAs: 1000, alsoTheStore: true)
        assertKeychainError(isIntegrityFailure, "integrityFailure", try k.item(for: items[Self.victim]!.key))
    }

    func testChangedKindFailsOnlyThatItem() throws {
        try store.sql("UPDATE items SET kind = \(ItemKind.internet.rawValue) WHERE id = \(victimID)")
        try assertNamesFail(reportedAs: victimID)
    }

    func testSwappedSecretsFailBothItems() throws {
        let a = items["a"]!.id, b = items["b"]!.id
        let sa = try blobHex("secret", id: a), sb = try blobHex("secret", id: b)
        try setBlob("secret", id: a, hex: sb)
        try setBlob("secret", id: b, hex: sa)
        for name in ["a", "b"] {
            let item = try XCTUnwrap(try k.item(for: items[name]!.key))
            assertKeychainError(isIntegrityFailure, "integrityFailure", try k.secret(of: item))
        }
        XCTAssertEqual(try k.verify().problems.map(\.itemID), [a, b].sorted())
        try assertOthersRead(except: ["a", "b"])
    }

    func testSwappedKeyAndSecretTogetherFailBothItems() throws {
        let a = items["a"]!.id, b = items["b"]!.id
        for column in ["wrapped_key", "secret"] {
            let va = try blobHex(column, id: a), vb = try blobHex(column, id: b)
            try setBlob(column, id: a, hex: vb)
            try setBlob(column, id: b, hex: va)
        }
        XCTAssertEqual(try k.verify().problems.map(\.itemID), [a, b].sorted())
        try assertOthersRead(except: ["a", "b"])
    }

    func testSwappedAttributesFailBothItems() throws {
        let a = items["a"]!.id, b = items["b"]!.id
        let va = try blobHex("attributes", id: a), vb = try blobHex("attributes", id: b)
        try setBlob("attributes", id: a, hex: vb)
        try setBlob("attributes", id: b, hex: va)
        XCTAssertEqual(try k.allItems().problems.map(\.itemID), [a, b].sorted())
        try assertOthersRead(except: ["a", "b"])
    }

    func testTamperingIsDetectedBeforeFirstUnlockToo() throws {
        let creator = try store.openUnlocked()
        let always = try add(creator, genericKey("svc", "always"), "secret-always", class: .always)
        try flipByte("secret", id: always.id, at: -1)
        let boot = try store.open()
        let item = try XCTUnwrap(try boot.item(for: always.key))
        assertKeychainError(isIntegrityFailure, "integrityFailure", try boot.secret(of: item))
        XCTAssertEqual(try boot.verify().problems.map(\.itemID), [always.id])
    }
}
