import XCTest
@testable import KeychainFuse
import KeychainFileSystem

/// The inode table the binding keeps between the kernel's inode numbers and the tree's paths.
final class InodeTableTests: XCTestCase {
    func testLookupsCountAndForgetDrops() {
        var t = InodeTable()
        let dir = t.lookedUp(InodeTable.root, "svc")
        let file = t.lookedUp(dir, "acct")
        XCTAssertEqual(t.lookedUp(dir, "acct"), file, "one inode per name")
        XCTAssertEqual(t.path(file), "/svc/acct")
        XCTAssertEqual(t.path(InodeTable.root), "/")
        XCTAssertEqual(t.path(dir, "other"), "/svc/other")
        t.forget(file, 1)
        XCTAssertNotNil(t.nodes[file])
        t.forget(file, 1)
        XCTAssertNil(t.nodes[file])
        XCTAssertNil(t.child(dir, "acct"))
        XCTAssertNotEqual(t.lookedUp(dir, "acct"), file, "a forgotten inode's number is not reused")
        t.forget(InodeTable.root, 5)
        XCTAssertEqual(t.path(InodeTable.root), "/", "the root is never forgotten")
    }

    func testAnUnlinkedInodeKeepsItsHandlesAndLosesItsPath() {
        var t = InodeTable()
        let file = t.lookedUp(InodeTable.root, "f")
        t.opened(file, 7)
        t.unlink(InodeTable.root, "f")
        XCTAssertNil(t.path(file))
        XCTAssertEqual(t.handles(file), [7])
        XCTAssertNotEqual(t.lookedUp(InodeTable.root, "f"), file, "the name is free for a new inode")
        // The kernel may forget before the last release arrives.
        t.forget(file, 1)
        XCTAssertNotNil(t.nodes[file])
        t.released(file, 7)
        XCTAssertNil(t.nodes[file])
    }

    func testRenameMovesTheInodeAndUnlinksTheOneItReplaced() {
        var t = InodeTable()
        let a = t.lookedUp(InodeTable.root, "a")
        let child = t.lookedUp(a, "x")
        let b = t.lookedUp(InodeTable.root, "b")
        t.opened(b, 3)
        t.move(InodeTable.root, "a", to: InodeTable.root, "b")
        XCTAssertEqual(t.path(a), "/b")
        XCTAssertEqual(t.path(child), "/b/x", "what lies below moves with it")
        XCTAssertNil(t.path(b), "the replaced inode has no name")
        XCTAssertEqual(t.handles(b), [3])
        XCTAssertEqual(t.child(InodeTable.root, "b"), a)
        XCTAssertNil(t.child(InodeTable.root, "a"))
        // A directory whose name is gone takes the paths of what lies below with it.
        t.unlink(InodeTable.root, "b")
        XCTAssertNil(t.path(child))
    }

    func testCreateMakesANewInode() {
        var t = InodeTable()
        let old = t.lookedUp(InodeTable.root, "f")
        let new = t.created(InodeTable.root, "f")
        XCTAssertNotEqual(new, old)
        XCTAssertEqual(t.path(new), "/f")
        XCTAssertNil(t.path(old))
    }

    /// An open or a stat of a known inode takes its parsed path from the table; a rename or an
    /// unlink anywhere makes every cached one stale, since it may have moved a directory above.
    func testACachedLocationIsDroppedWhenAPathChanges() throws {
        var t = InodeTable()
        let dir = t.lookedUp(InodeTable.root, "svc")
        let file = t.lookedUp(dir, "acct")
        XCTAssertNil(t.cachedLocation(file))
        t.cacheLocation(file, try TreeLocation.parse(t.path(file)!), changes: t.pathChanges)
        XCTAssertEqual(t.cachedLocation(file), .genericItem(service: "svc", account: "acct"))
        _ = t.lookedUp(dir, "other")
        XCTAssertNotNil(t.cachedLocation(file), "a new name changes no known path")

        t.move(dir, "acct", to: dir, "renamed")
        XCTAssertNil(t.cachedLocation(file), "a rename makes it stale")
        let before = t.pathChanges
        t.cacheLocation(file, try TreeLocation.parse(t.path(file)!), changes: before)
        XCTAssertEqual(t.cachedLocation(file), .genericItem(service: "svc", account: "renamed"))

        t.unlink(dir, "other")
        XCTAssertNil(t.cachedLocation(file), "so does an unlink")
        // Parsed before that unlink: not kept, as the path it was parsed from may be gone.
        t.cacheLocation(file, .genericItem(service: "svc", account: "renamed"), changes: before)
        XCTAssertNil(t.cachedLocation(file))
        _ = t.created(dir, "renamed")
        XCTAssertNil(t.cachedLocation(file), "a create over the name unlinks the old inode")
        XCTAssertNil(t.path(file))
    }

    /// A path walk that reached an item's inode just before a rename over the item opens or
    /// stats it after: it is sent to what the name holds now, not ENOENT. An inode unlinked by
    /// a delete, or one moved away, is not.
    func testAnInodeReplacedByARenameFollowsItsName() {
        var t = InodeTable()
        let dir = t.lookedUp(InodeTable.root, "svc")
        let item = t.lookedUp(dir, "item"), temp = t.lookedUp(dir, "tmp")
        t.move(dir, "tmp", to: dir, "item")
        XCTAssertNil(t.location(item), "it has no path of its own")
        XCTAssertEqual(t.replacedLocation(item), .genericItem(service: "svc", account: "item"))
        XCTAssertEqual(t.location(temp), .genericItem(service: "svc", account: "item"))
        XCTAssertNil(t.replacedLocation(temp), "the inode that took the name has a path")
        let gone = t.lookedUp(dir, "gone")
        t.unlink(dir, "gone")
        XCTAssertNil(t.replacedLocation(gone), "a deleted name is gone")
        let away = t.lookedUp(dir, "away")
        t.move(dir, "away", to: dir, "elsewhere")
        XCTAssertNil(t.replacedLocation(away), "a moved inode follows its own new name")
    }

    func testWhatLiesBelowAnAliasIsAnAliasAndTheyAreCounted() {
        var t = InodeTable()
        let listed = t.lookedUp(InodeTable.root, "al")
        let file = t.lookedUp(listed, "Bob")
        let dir = t.entry(InodeTable.root, "%61l", alias: true)
        XCTAssertTrue(dir.alias)
        XCTAssertTrue(t.entry(dir.ino, "Bob", alias: false).alias, "a listed spelling below an alias directory")
        XCTAssertFalse(t.isAlias(file))
        XCTAssertEqual(t.aliases, 2)
        let other = t.lookedUp(InodeTable.root, "other")
        let below = t.lookedUp(other, "x")
        t.move(InodeTable.root, "other", to: InodeTable.root, "%6fther", alias: true)
        XCTAssertTrue(t.isAlias(below), "moved below a name spelled otherwise")
        XCTAssertEqual(t.aliases, 4)
        t.forget(below, 1)
        XCTAssertEqual(t.aliases, 3)
        t.move(InodeTable.root, "%6fther", to: InodeTable.root, "other", alias: false)
        XCTAssertFalse(t.isAlias(other))
        XCTAssertEqual(t.aliases, 2)
    }
}
