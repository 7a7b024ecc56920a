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
        // A damaged class (not a number) ends the walk of the group's classes, after every
        // number: the walk neither fails nor loops.
        try store.sql("UPDATE items SET class = 'x' WHERE id = (SELECT MIN(id) FROM items)")
        XCTAssertEqual(try k.groupClasses(kind: .generic, name: "mail"), [.always, .whenUnlocked, .afterFirstUnlockThisDeviceOnly])
    }

    /// Every group read is an index search: no pass over the table, no sort of a group's rows,
    /// so that it costs the same in a service of any size (the class rule runs at every create).
    func testGroupQueriesSearchTheGroupIndex() throws {
        _ = try store.create()
        for sql in [GroupQuery.rows, GroupQuery.firstRow, GroupQuery.nextGroup, GroupQuery.nextClass, GroupQuery.page] {
            let plan = try store.sql("EXPLAIN QUERY PLAN " + sql.replacing(/\?[0-9]*/, with: "x'00'"))
            XCTAssertTrue(plan.contains("SEARCH items USING") && plan.contains("INDEX items_group_class"), "\(sql): \(plan)")
            // A page's subqueries are co-routines, each one a search ("SCAN (subquery-N)" reads its output).
            XCTAssertFalse(plan.contains("SCAN items") || plan.contains("TEMP B-TREE"), "\(sql): \(plan)")
        }
    }

    /// A listing in pages (`groupPage`) lists every row that exists throughout it exactly
    /// once, while rows are added, deleted, renamed and moved between classes between its
    /// pages (each page is read as the FUSE binding reads one, on its own), and never a
    /// row that did not exist.
    func testGroupPagesListEachLastingRowOnceWhileRowsChange() throws {
        let k = try store.create()
        var items: [String: KeychainItem] = [:]
        for i in 0..<240 {
            let c: AccessibilityClass = [.always, .whenUnlocked, .afterFirstUnlock][i % 3]
            items["a\(i)"] = try add(k, genericKey("mail", "a\(i)"), "s", class: c)
        }
        try add(k, genericKey("other", "a1"), "s")
        try add(k, internetKey("mail", account: "web"), "s")
        var lasting = Set(items.keys)
        var ever = Set(items.keys)
        var listed: [String] = []
        var after: Int64 = 0
        var round = 0
        while true {
            let page = try k.groupPage(kind: .generic, name: "mail", after: after, limit: 7)
            listed += page.items.map(\.key.account)
            XCTAssertTrue(page.items.allSatisfy { $0.key.kind == .generic })
            guard let next = page.next else { break }
            XCTAssertGreaterThan(next, after)
            after = next
            round += 1
            // Between pages: one new row, one deleted (listed or not), one renamed and one
            // re-classed, from the front and the back of the id order in turn.
            let new = "n\(round)"
            items[new] = try add(k, genericKey("mail", new), "s", class: round.isMultiple(of: 2) ? .always : .whenUnlocked)
            ever.insert(new)
            let names = items.keys.filter { lasting.contains($0) }.sorted { items[$0]!.id < items[$1]!.id }
            guard names.count > 4 else { continue }
            let victim = round.isMultiple(of: 2) ? names.first! : names.last!
            try k.delete([items.removeValue(forKey: victim)!])
            lasting.remove(victim)
            let renamed = names[names.count / 2]
            var record = items[renamed]!.record
            record.key = try genericKey("mail", renamed + "-moved")
            items[renamed + "-moved"] = try k.update(items.removeValue(forKey: renamed)!, to: record)
            lasting.remove(renamed)
            ever.insert(renamed + "-moved")
            let reclassed = names[round.isMultiple(of: 2) ? names.count - 2 : 1]
            var changed = items[reclassed]!.record
            changed.attributes.accessible = changed.attributes.accessible == .always ? .afterFirstUnlock : .always
            items[reclassed] = try k.update(items[reclassed]!, to: changed)
        }
        XCTAssertGreaterThan(round, 30)
        XCTAssertEqual(listed.count, Set(listed).count, "no row listed twice")
        XCTAssertTrue(lasting.isSubset(of: Set(listed)), "missed: \(lasting.subtracting(listed).sorted())")
        XCTAssertTrue(Set(listed).isSubset(of: ever))
        XCTAssertFalse(listed.contains { $0 == "web" })
    }

    /// Rows whose names are unreadable now are skipped, but the cursor passes them.
    func testGroupPagesSkipUnreadableRows() throws {
        let k = try store.create()
        for i in 0..<20 { try add(k, genericKey("mail", "a\(i)"), "s", class: i < 15 ? .whenUnlocked : .always) }
        let boot = try store.open()
        let first = try boot.groupPage(kind: .generic, name: "mail", after: 0, limit: 10)
        XCTAssertEqual(first.items, [])
        XCTAssertNotNil(first.next)
        let second = try boot.groupPage(kind: .generic, name: "mail", after: first.next!, limit: 10)
        XCTAssertEqual(second.items.map(\.key.account).sorted(), (15..<20).map { "a\($0)" }.sorted())
        XCTAssertNil(try boot.groupPage(kind: .generic, name: "mail", after: second.next ?? Int64.max, limit: 10).next)
    }
    /// A listing that holds the items decoded reads only the rows' heads: the same ids and
    /// cursor as the whole rows, and a held item stands for its row only at the row's version,
    /// class and key generation, and only while its class is readable.
    func testGroupPageHeadsAreThoseOfTheRowsAndTellWhatIsCurrent() throws {
        let k = try store.create()
        for i in 0..<30 {
            try add(k, genericKey("mail", "a\(i)"), "s", class: i.isMultiple(of: 2) ? .always : .whenUnlocked)
        }
        var after: Int64 = 0
        var pages = 0
        while true {
            let page = try k.groupPage(kind: .generic, name: "mail", after: after, limit: 7)
            let heads = try k.groupPageHeads(kind: .generic, name: "mail", after: after, limit: 7)
            XCTAssertEqual(heads.heads.map(\.id), page.items.map(\.id))
            XCTAssertEqual(heads.next, page.next)
            for (head, item) in zip(heads.heads, page.items) { XCTAssertTrue(k.isCurrent(item, head)) }
            pages += 1
            guard let next = page.next else { break }
            after = next
        }
        XCTAssertEqual(pages, 5)

        let first = try k.groupPage(kind: .generic, name: "mail", after: 0, limit: 2).items
        let held = first[0]
        var record = held.record
        record.attributes.accessible = held.accessible == .always ? .afterFirstUnlock : .always
        _ = try k.update(try k.complete(held), to: record)
        let now = try k.groupPageHeads(kind: .generic, name: "mail", after: 0, limit: 2).heads
        XCTAssertEqual(now.map(\.id), first.map(\.id), "a new class keeps the row's id")
        XCTAssertFalse(k.isCurrent(held, now[0]), "the row changed: the held copy is stale")
        XCTAssertTrue(k.isCurrent(first[1], now[1]))

        // After a restart the when-unlocked class is locked: a held copy of such a row is not
        // readable now, so it does not stand for its row.
        let boot = try store.open()
        let locked = first[1].accessible == .whenUnlocked ? first[1] : first[0]
        let lockedHead = try boot.groupPageHeads(kind: .generic, name: "mail", after: 0, limit: 2).heads.first { $0.id == locked.id }!
        XCTAssertFalse(boot.isCurrent(locked, lockedHead))
    }
}
