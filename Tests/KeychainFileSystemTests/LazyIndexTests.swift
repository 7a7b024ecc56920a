import Foundation
import Synchronization
import XCTest
@testable import KeychainFileSystem
import KeychainCrypto
import KeychainModel
import KeychainStore

/// The index is a bounded cache filled as the mount is used, not a copy of the store made at mount.
final class LazyIndexTests: XCTestCase {
    var dir: String!
    var keychain: Keychain!
    let passphrase = SecureBytes(copying: Array("correct horse".utf8))

    override func setUpWithError() throws {
        (dir, keychain) = try makeTemporaryKeychain("kcfs-lazy", passphrase: passphrase)
    }

    override func tearDownWithError() throws { try? FileManager.default.removeItem(atPath: dir) }

    func key(_ service: String, _ account: String, group: String = "") throws -> ItemKey {
        .generic(try GenericPasswordKey(service: service, account: account, accessGroup: group))
    }

    /// Adds items straight to the store, as an import does, behind the mount's back.
    func fill(_ service: String, count: Int, accessible: AccessibilityClass = .whenUnlocked, on k: Keychain? = nil) throws {
        for i in 0..<count {
            try (k ?? keychain).add(ItemRecord(key: try key(service, "a\(i)"), attributes: ItemAttributes(accessible: accessible)),
                                    secret: SecureBytes(copying: Array("secret-\(service)-\(i)".utf8)))
        }
    }

    func indexed(_ served: ServedKeychain) -> [Int64: KeychainItem] { served.state.withLock { $0.index.items } }

    func testNothingIsReadAtMountAndALookupReadsOneItemWithoutItsSealedBlobs() throws {
        try fill("svc", count: 50)
        let tree = try KeychainTree(keychain: keychain)
        XCTAssertEqual(indexed(tree.served).count, 0, "the mount read nothing")
        XCTAssertEqual(try tree.get("/svc/a7"), "secret-svc-7")
        XCTAssertEqual(try tree.stat("/svc/a7").size, "secret-svc-7".utf8.count)
        let held = indexed(tree.served)
        XCTAssertEqual(held.count, 1, "one lookup read one item")
        XCTAssertTrue(held.values.allSatisfy { $0.isSummary && $0.sealed.secret.isEmpty && $0.sealed.attributes.isEmpty })
        XCTAssertThrowsError(try tree.stat("/svc/missing")) { XCTAssertEqual($0 as? FileSystemError, .notFound) }
        XCTAssertThrowsError(try tree.stat("/nosuch")) { XCTAssertEqual($0 as? FileSystemError, .notFound) }
        XCTAssertEqual(try tree.list("/svc").count, 50, "a listing reads the service whole")
        XCTAssertEqual(indexed(tree.served).count, 50)
    }

    /// A paged listing's entries carry what `stat` of each name gives (readdirplus answers
    /// with them): on the first listing (rows read and decoded), on the next (held items
    /// taken by the rows' heads), with an open copy being written (its size), and once an
    /// item changed behind the mount's back (the row is read again, not the held copy).
    func testPagedListingEntriesCarryTheStatOfTheirNames() throws {
        try fill("svc", count: 30)
        let tree = try KeychainTree(keychain: keychain)
        func listed() throws -> [KeychainTree.ListedEntry] {
            var all: [KeychainTree.ListedEntry] = []
            var offset: Int64 = 0
            while let page = try tree.listPage(.service("svc"), after: offset, listedPending: [], limit: 7), !page.isEmpty {
                all += page
                offset = page.last!.offset
            }
            return all.filter { $0.entry.name != "." && $0.entry.name != ".." }
        }
        func check(_ why: String) throws {
            let entries = try listed()
            XCTAssertEqual(entries.count, 30, why)
            for e in entries {
                XCTAssertNotNil(e.stat, "\(why): \(e.entry.name)")
                XCTAssertEqual(e.stat, try tree.stat("/svc/" + e.entry.name), "\(why): \(e.entry.name)")
            }
        }
        try check("first listing")
        try check("listed again")
        let h = try tree.open("/svc/a3", flags: O_WRONLY | O_TRUNC)
        _ = try Array("a longer value than before".utf8).withUnsafeBytes { try tree.write(h, offset: 0, data: $0) }
        try check("with a copy being written")
        XCTAssertEqual(try listed().first { $0.entry.name == "a3" }?.stat?.size, "a longer value than before".utf8.count)
        try tree.release(h)
        let stored = try XCTUnwrap(try keychain.item(for: try key("svc", "a5")))
        _ = try keychain.update(stored, to: stored.record, secret: SecureBytes(copying: Array("changed behind its back".utf8)),
                                modified: Date(timeIntervalSince1970: 1_000_000))
        XCTAssertEqual(try listed().first { $0.entry.name == "a5" }?.stat?.size, "changed behind its back".utf8.count,
                       "the row's new version is read, not the held copy")
    }

    func testTheRootListsEveryServiceFromOneRowEachAndLeavesOtherAccessGroupsOut() throws {
        try fill("b", count: 3)
        try fill("a", count: 2)
        // Its first row is in another access group; a later one is in the default group.
        try keychain.add(ItemRecord(key: try key("mixed", "x", group: "team"), attributes: ItemAttributes()), secret: SecureBytes())
        try keychain.add(ItemRecord(key: try key("mixed", "y"), attributes: ItemAttributes()), secret: SecureBytes())
        try keychain.add(ItemRecord(key: try key("hidden", "x", group: "team"), attributes: ItemAttributes()), secret: SecureBytes())
        let tree = try KeychainTree(keychain: keychain)
        XCTAssertEqual(try tree.list("/").map(\.name), ["internet", "a", "b", "mixed"])
        XCTAssertEqual(try tree.stat("/").links, 2 + 1 + 3)
        XCTAssertThrowsError(try tree.stat("/hidden")) { XCTAssertEqual($0 as? FileSystemError, .notFound) }
        XCTAssertEqual(try tree.list("/mixed").map(\.name), ["y"])
    }

    func testTheIndexStaysBoundedAndKeepsItemsWithOpenFiles() throws {
        try fill("svc", count: 60)
        let served = try ServedKeychain(keychain: keychain, indexLimit: 8)
        let tree = KeychainTree(served: served)
        let h = try tree.open("/svc/a0", flags: O_RDWR | O_TRUNC)
        var most = 0
        for i in 1..<60 {
            XCTAssertEqual(try tree.get("/svc/a\(i)"), "secret-svc-\(i)")
            most = max(most, indexed(served).count)
        }
        // Eviction runs before each fill puts its item in: at most one past the limit.
        XCTAssertLessThanOrEqual(most, 9)
        let a0 = try XCTUnwrap(keychain.item(for: try key("svc", "a0"))).id
        XCTAssertNotNil(indexed(served)[a0], "an open file's item stays")
        _ = try Array("changed".utf8).withUnsafeBytes { try tree.write(h, offset: 0, data: $0) }
        try tree.release(h)
        XCTAssertEqual(try tree.get("/svc/a0"), "changed")
        XCTAssertEqual(try tree.list("/svc").count, 60, "a listing after evictions is whole")
        XCTAssertEqual(try tree.get("/svc/a59"), "secret-svc-59")
    }

    /// A stat or an open of an item already in the index marks it used (in the same look at
    /// the index that finds it there), so eviction takes others first.
    func testAnItemLookedUpAgainIsNotEvicted() throws {
        try fill("svc", count: 40)
        let served = try ServedKeychain(keychain: keychain, indexLimit: 8)
        let tree = KeychainTree(served: served)
        let a0 = try XCTUnwrap(keychain.item(for: try key("svc", "a0"))).id
        for i in 1..<40 {
            _ = try tree.stat("/svc/a0")
            _ = try tree.stat("/svc/a\(i)")
            XCTAssertNotNil(indexed(served)[a0], "after the fill of a\(i)")
        }
        let h = try tree.open("/svc/a0", flags: O_RDONLY)
        try tree.release(h)
        XCTAssertEqual(try tree.get("/svc/a0"), "secret-svc-0")
    }

    /// A fill that read the store before a concurrent commit must not put back the older item.
    func testAFillReadBeforeACommitDoesNotInstallTheOlderItem() throws {
        try fill("svc", count: 1)
        let served = try ServedKeychain(keychain: keychain)
        let tree = KeychainTree(served: served)
        let k = try key("svc", "a0")
        let once = Mutex(true)
        served.setAfterFillRead {
            guard once.withLock({ let first = $0; $0 = false; return first }) else { return }
            _ = try? served.save(k, secret: SecureBytes(copying: Array("a much longer new value".utf8)), changes: AttributeChanges(),
                                 updateExisting: true)
        }
        XCTAssertEqual(try tree.stat("/svc/a0").size, "a much longer new value".utf8.count)
        served.setAfterFillRead(nil)
        let stored = try XCTUnwrap(keychain.item(for: k))
        XCTAssertEqual(indexed(served)[stored.id]?.sealed.version, stored.sealed.version)
        XCTAssertEqual(try tree.get("/svc/a0"), "a much longer new value")
    }

    /// A name found in no row is remembered, so that a shell loop's lookup and create of each
    /// new name read the store once, not twice; a change that adds the name ends it.
    func testANameFoundAbsentIsNotReadAgainUntilAChangeAddsIt() throws {
        try fill("svc", count: 3)
        let served = try ServedKeychain(keychain: keychain)
        let tree = KeychainTree(served: served)
        let fills = Mutex(0)
        served.setAfterFillRead { fills.withLock { $0 += 1 } }
        for _ in 0..<3 {
            XCTAssertThrowsError(try tree.stat("/svc/new")) { XCTAssertEqual($0 as? FileSystemError, .notFound) }
        }
        XCTAssertEqual(fills.withLock { $0 }, 2, "one read for the service, one for the name; none after")
        _ = try served.save(try key("svc", "new"), secret: SecureBytes(copying: Array("n".utf8)), changes: AttributeChanges(),
                            updateExisting: false)
        XCTAssertEqual(try tree.get("/svc/new"), "n")
        let handle = try tree.create("/svc/other", flags: O_WRONLY)
        try tree.release(handle)
        XCTAssertEqual(try tree.stat("/svc/other").size, 0)
        served.setAfterFillRead(nil)
    }

    /// A directory mkdir made holds every readable item of its service (none): a shell loop
    /// creating names in it reads no name from the store. The classes of the service's rows
    /// are read at its first create, and every later change (another channel's, a delete, a
    /// class set on a file) is seen by the next create's class, as when each create read them.
    func testADirectoryMadeByMkdirReadsNoNameAndItsClassesFollowEveryChange() throws {
        let served = try ServedKeychain(keychain: keychain)
        let tree = KeychainTree(served: served)
        let fills = Mutex(0)
        served.setAfterFillRead { fills.withLock { $0 += 1 } }
        try tree.makeDirectory("/fresh")
        let afterMkdir = fills.withLock { $0 }
        func accessible(_ path: String) throws -> String {
            String(decoding: try tree.attribute(path, name: "user.keychain.accessible"), as: UTF8.self)
        }
        for name in ["a", "b"] {
            XCTAssertThrowsError(try tree.stat("/fresh/\(name)")) { XCTAssertEqual($0 as? FileSystemError, .notFound) }
            try tree.release(try tree.create("/fresh/\(name)", flags: O_WRONLY))
            XCTAssertEqual(try accessible("/fresh/\(name)"), "when-unlocked")
        }
        XCTAssertEqual(fills.withLock { $0 }, afterMkdir, "no name was looked up in the store")
        served.setAfterFillRead(nil)
        XCTAssertEqual(served.state.withLock { $0.index.storedClasses["fresh"] }, [.whenUnlocked], "read once, then kept")

        // Another channel stores a this-device-only item beside them: the next file takes its class.
        _ = try served.save(try key("fresh", "strict"), secret: SecureBytes(copying: Array("x".utf8)),
                            changes: AttributeChanges(accessible: .whenUnlockedThisDeviceOnly), updateExisting: false)
        let h = try tree.create("/fresh/c", flags: O_WRONLY)
        XCTAssertEqual(try accessible("/fresh/c"), "when-unlocked-this-device-only", "pending, it shows the stricter class")
        try tree.release(h)
        // Once the strict item is gone, new files take the default again: a delete drops what was read.
        XCTAssertEqual(try served.delete(matching: .exactly(try key("fresh", "strict")), all: false).count, 1)
        try tree.remove("/fresh/c")
        try tree.release(try tree.create("/fresh/d", flags: O_WRONLY))
        XCTAssertEqual(try accessible("/fresh/d"), "when-unlocked")
        // A class set on an item is a change too.
        try tree.setAttribute("/fresh/a", name: "user.keychain.accessible", value: Array("always-this-device-only".utf8))
        try tree.release(try tree.create("/fresh/e", flags: O_WRONLY))
        XCTAssertEqual(try accessible("/fresh/e"), "when-unlocked-this-device-only")
    }

    /// A service known by its name (the root listed) but not read whole is not empty for
    /// rename: the store says so, and the move is EXDEV (mv then copies item by item). It was
    /// moved as empty, and its items were left in the store under a name the tree no longer
    /// showed; a mkdir of the old name then hid them until the next mount.
    func testAServiceKnownOnlyByNameIsNotMovedAsEmpty() throws {
        try fill("svcD", count: 1)
        let tree = try KeychainTree(keychain: keychain)
        XCTAssertEqual(try tree.list("/").map(\.name), ["internet", "svcD"])
        XCTAssertThrowsError(try tree.rename("/svcD", to: "/svcE", noReplace: false, exchange: false)) {
            XCTAssertEqual($0 as? FileSystemError, .crossDevice)
        }
        try tree.makeDirectory("/empty")
        XCTAssertThrowsError(try tree.rename("/empty", to: "/svcD", noReplace: false, exchange: false)) {
            XCTAssertEqual($0 as? FileSystemError, .notEmpty, "nor replaced as empty")
        }
        XCTAssertEqual(try tree.get("/svcD/a0"), "secret-svcD-0")
        XCTAssertThrowsError(try tree.makeDirectory("/svcD")) { XCTAssertEqual($0 as? FileSystemError, .exists) }
        try tree.rename("/empty", to: "/moved", noReplace: false, exchange: false)
        XCTAssertEqual(try tree.list("/").map(\.name), ["internet", "moved", "svcD"])
    }

    func testBeforeFirstUnlockOnlyAlwaysNamesShowThenEveryNameAfterTheUnlock() throws {
        try fill("svc", count: 2, accessible: .always)
        try keychain.add(ItemRecord(key: try key("svc", "locked"), attributes: ItemAttributes(accessible: .whenUnlocked)),
                         secret: SecureBytes(copying: Array("l".utf8)))
        try keychain.add(ItemRecord(key: try key("later", "x"), attributes: ItemAttributes(accessible: .whenUnlocked)),
                         secret: SecureBytes(copying: Array("x".utf8)))
        let reopened = try Keychain(openingAt: dir + "/k.db", deviceKeyPath: dir + "/device.key")
        XCTAssertEqual(reopened.state, .beforeFirstUnlock)
        let tree = try KeychainTree(keychain: reopened)
        XCTAssertEqual(try tree.list("/").map(\.name), ["internet", "svc"])
        XCTAssertEqual(try tree.list("/svc").map(\.name), ["a0", "a1"])
        XCTAssertThrowsError(try tree.stat("/svc/locked")) { XCTAssertEqual($0 as? FileSystemError, .notFound) }
        XCTAssertEqual(try tree.get("/svc/a0"), "secret-svc-0")
        try tree.unlock(passphrase: passphrase)
        XCTAssertEqual(try tree.list("/").map(\.name), ["internet", "later", "svc"])
        XCTAssertEqual(try tree.list("/svc").map(\.name), ["a0", "a1", "locked"])
        XCTAssertEqual(try tree.get("/svc/locked"), "l")
    }

    /// Control-socket queries read the store: an item the mount never looked up is found.
    func testQueriesAndTheItemCountGoToTheStore() throws {
        try fill("svc", count: 5)
        let tree = try KeychainTree(keychain: keychain)
        XCTAssertEqual(try tree.served.items(matching: ItemQuery(kind: .generic, service: "svc")).count, 5)
        XCTAssertEqual(try tree.served.allItems().count, 5)
        XCTAssertEqual(String(decoding: try tree.attribute("/", name: "user.keychain.items"), as: UTF8.self), "5")
        XCTAssertEqual(indexed(tree.served).count, 0, "queries fill no cache")
        XCTAssertEqual(try tree.served.delete(matching: ItemQuery(kind: .generic, account: "a1", service: "svc"), all: false).count, 1)
        XCTAssertEqual(try tree.list("/svc").count, 4)
    }
}
