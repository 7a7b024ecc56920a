import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStore
import XCTest

final class ExportPageTests: StoreTestCase {

    private func all(limit: Int, maxSecretBytes: Int = 8 << 20) throws -> [ExportPage] {
        var pages: [ExportPage] = []
        var after: Int64? = 0
        while let a = after {
            let page = try k.exportPage(afterID: a, limit: limit, maxSecretBytes: maxSecretBytes)
            pages.append(page)
            after = page.next
        }
        return pages
    }

    func testPagesCoverEveryExportableItemOnceInIdOrder() throws {
        for i in 0..<25 { try add(k, genericKey("svc", "acct\(i)"), "secret\(i)", class: i % 2 == 0 ? .whenUnlocked : .always) }
        try add(k, genericKey("device", "a"), "x", class: .alwaysThisDeviceOnly)
        try add(k, genericKey("device", "b"), "y", class: .whenPasscodeSetThisDeviceOnly)
        let pages = try all(limit: 10)
        XCTAssertEqual(pages.map(\.batch.count), [10, 10, 5])
        let entries = pages.flatMap { p in p.batch.entries.map { e in (e.record, p.batch.withSecret(e) { String(decoding: $0, as: UTF8.self) }) } }
        XCTAssertEqual(entries.map(\.0.key), try (0..<25).map { try genericKey("svc", "acct\($0)") })
        XCTAssertEqual(entries.map(\.1), (0..<25).map { "secret\($0)" })
        XCTAssertEqual(entries[1].0.attributes.accessible, .always)
        XCTAssertTrue(pages.allSatisfy(\.damaged.isEmpty))
    }

    func testAPageStopsAtItsSecretBytes() throws {
        for i in 0..<7 { try add(k, genericKey("big", "\(i)"), String(repeating: "x", count: 100)) }
        XCTAssertEqual(try all(limit: 100, maxSecretBytes: 250).map(\.batch.count), [3, 3, 1])
        XCTAssertEqual(try all(limit: 100, maxSecretBytes: 50).map(\.batch.count), Array(repeating: 1, count: 7),
                       "an item larger than the bound still makes a page")
    }

    func testDamagedItemsAreReportedAndTheRestExported() throws {
        try add(k, genericKey("a", "1"), "one")
        let victim = try add(k, genericKey("a", "2"), "two")
        try add(k, genericKey("a", "3"), "three")
        try store.sql("UPDATE items SET attributes = X'00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff' WHERE id = \(victim.id)")
        let pages = try all(limit: 10)
        XCTAssertEqual(pages.flatMap { $0.batch.entries.map(\.record.key) }, [try genericKey("a", "1"), try genericKey("a", "3")])
        XCTAssertEqual(pages.flatMap(\.damaged).map(\.itemID), [victim.id])
    }

    func testALockedClassRefusesTheExport() throws {
        try add(k, genericKey("a", "open"), "x", class: .afterFirstUnlock)
        try add(k, genericKey("a", "locked"), "y")
        k.lock()
        assertKeychainError(.unavailable(.whenUnlocked), try k.exportPage(afterID: 0, limit: 10))
    }

    func testExportedItemsCarryTheirExtras() throws {
        try k.save(try genericKey("git", "u"), secret: secure("pw"), extras: secure("oauth_refresh_token=rt"), updateExisting: false)
        try add(k, genericKey("plain", "p"), "x")
        let page = try k.exportPage(afterID: 0, limit: 10)
        let found = page.batch.entries.map { e in
            page.batch.withSecretAndExtras(e) { s, x in [String(decoding: s, as: UTF8.self), x.map { String(decoding: $0, as: UTF8.self) } ?? "-"] }
        }
        XCTAssertEqual(found, [["pw", "oauth_refresh_token=rt"], ["x", "-"]])
    }

    func testAnEmptyStoreHasOneEmptyPage() throws {
        let pages = try all(limit: 10)
        XCTAssertEqual(pages.count, 1)
        XCTAssertTrue(pages[0].batch.isEmpty)
    }
}
