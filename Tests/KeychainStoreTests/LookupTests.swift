import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStore
import XCTest

/// The lookups a filesystem uses instead of loading every item: one item by key, one
/// directory's items, and the directory names.
final class LookupTests: XCTestCase {
    var store: TempStore!
    override func setUpWithError() throws { store = try TempStore() }
    override func tearDown() { store = nil }

    func testGroupNamesAndGroupItems() throws {
        let k = try store.create()
        try add(k, genericKey("mail", "alice"), "1")
        try add(k, genericKey("mail", "bob"), "2", class: .always)
        try add(k, genericKey("mail", "carol", group: "team"), "3")
        try add(k, genericKey("ssh", "alice"), "4")
        try add(k, genericKey("internet", "x"), "5", class: .always)
        try add(k, internetKey("github.com", account: "dev"), "6")
        try add(k, internetKey("github.com", port: 8443, account: "dev"), "7")
        try add(k, internetKey("example.org", account: "me"), "8", class: .always)
        XCTAssertEqual(try k.groupNames().services, ["internet", "mail", "ssh"])
        XCTAssertEqual(try k.groupNames().servers, ["example.org", "github.com"])
        // Access groups included: a group's read is the whole group.
        XCTAssertEqual(try k.groupSummaries(kind: .generic, name: "mail").map(\.key.account).sorted(), ["alice", "bob", "carol"])
        XCTAssertEqual(try k.groupSummaries(kind: .internet, name: "github.com").count, 2)
        XCTAssertEqual(try k.groupSummaries(kind: .generic, name: "nothing"), [])
        XCTAssertEqual(try k.groupSummaries(kind: .internet, name: "mail"), [])

        // Before first unlock only `always*` items are named: their groups alone are listed.
        let boot = try store.open()
        XCTAssertEqual(try boot.groupNames().services, ["internet", "mail"])
        XCTAssertEqual(try boot.groupNames().servers, ["example.org"])
        XCTAssertEqual(try boot.groupSummaries(kind: .generic, name: "mail").map(\.key.account), ["bob"])
    }

    /// A damaged first row of a group hides neither the group nor the other rows.
    func testADamagedRowHidesNoGroup() throws {
        let k = try store.create()
        let first = try add(k, genericKey("mail", "alice"), "1")
        try add(k, genericKey("mail", "bob"), "2")
        let lone = try add(k, genericKey("lone", "x"), "3")
        try store.sql("UPDATE items SET attributes = zeroblob(40) WHERE id IN (\(first.id), \(lone.id))")
        let again = try store.openUnlocked()
        XCTAssertEqual(try again.groupNames().services, ["mail"])
        XCTAssertEqual(try again.groupSummaries(kind: .generic, name: "mail").map(\.key.account), ["bob"])
    }

    func testAnEmptyOrLockedStoreHasNoGroups() throws {
        let k = try store.create()
        XCTAssertTrue(try k.groupNames().services.isEmpty)
        try add(k, genericKey("mail", "alice"), "1")
        k.forgetKeys()
        XCTAssertTrue(try k.groupNames().services.isEmpty)
    }

    /// A service's classes are exactly those of its rows, readable or not, of its kind only.
    func testGroupClassesAreThoseOfTheGroupsRows() throws {
        let k = try store.create()
        for i in 0..<60 { try add(k, genericKey("mail", "a\(i)"), "s", class: i.isMultiple(of: 2) ? .always : .whenUnlocked) }
        try add(k, genericKey("mail", "last"), "s", class: .afterFirstUnlockThisDeviceOnly)
        try add(k, internetKey("mail", account: "x"), "s", class: .whenPasscodeSetThisDeviceOnly)
        XCTAssertEqual(try k.groupClasses(kind: .generic, name: "mail"), [.always, .whenUnlocked, .afterFirstUnlockThisDeviceOnly])
        XCTAssertEqual(try k.groupClasses(kind: .internet, name: "mail"), [.whenPasscodeSetThisDeviceOnly])
        XCTAssertEqual(try k.groupClasses(kind: .generic, name: "none"), [])
        // Before first unlock names are unreadable; the class column still answers.
        XCTAssertEqual(try store.open().groupClasses(kind: .generic, name: "mail").count, 3)
    }

    /// Every group read is an index search: no pass over the table, no sort of a group's rows,
    /// so that it costs the same in a service of any size (the class rule runs at every create).
    func testGroupQueriesSearchTheGroupIndex() throws {
        _ = try store.create()
        for sql in [GroupQuery.rows, GroupQuery.firstRow, GroupQuery.nextGroup, GroupQuery.nextClass] {
            let plan = try store.sql("EXPLAIN QUERY PLAN " + sql.replacingOccurrences(of: "?", with: "x'00'"))
            XCTAssertTrue(plan.contains("SEARCH items USING") && plan.contains("INDEX items_group_class"), "\(sql): \(plan)")
            XCTAssertFalse(plan.contains("SCAN") || plan.contains("TEMP B-TREE"), "\(sql): \(plan)")
        }
    }
}
