import XCTest
@testable import KeychainFileSystem
import KeychainCrypto
import KeychainModel
import KeychainStore
import KeychainBatch

/// What programs expect of a regular filesystem: open files that outlive their names, times
/// that follow changes, link counts, and renames of empty directories.
final class PosixSemanticsTests: XCTestCase {
    var dir: String!
    var keychain: Keychain!
    var tree: KeychainTree!

    override func setUpWithError() throws {
        (dir, keychain) = try makeTemporaryKeychain("kcfs-posix", passphrase: SecureBytes(copying: Array("pw".utf8)))
        tree = try KeychainTree(keychain: keychain)
    }

    override func tearDownWithError() throws { try? FileManager.default.removeItem(atPath: dir) }

    func write(_ h: UInt64, _ text: String, at offset: Int) throws {
        _ = try Array(text.utf8).withUnsafeBytes { try tree.write(h, offset: offset, data: $0) }
    }

    func read(_ h: UInt64) throws -> String {
        var buf = [UInt8](repeating: 0, count: 4096)
        let n = try buf.withUnsafeMutableBytes { try tree.read(h, offset: 0, count: 4096, into: $0.baseAddress!) }
        return String(decoding: buf[0..<n], as: UTF8.self)
    }

    func get(_ path: String) throws -> String {
        let h = try tree.open(path, flags: O_RDONLY)
        defer { try? tree.release(h) }
        return try read(h)
    }

    func rename(_ from: String, _ to: String, noReplace: Bool = false) throws {
        try tree.rename(from, to: to, noReplace: noReplace, exchange: false)
    }

    func assertErrno(_ expected: FileSystemError, _ body: @autoclosure () throws -> Void, line: UInt = #line) {
        XCTAssertThrowsError(try body(), line: line) { XCTAssertEqual($0 as? FileSystemError, expected, line: line) }
    }

    /// A moment later than the last change, as the clock sees it.
    func later() -> Date {
        usleep(2000)
        return Date()
    }

    // MARK: open files

    func testAnOpenFileOutlivesItsName() throws {
        try tree.makeDirectory("/svc")
        try tree.put("/svc/f", "hello world")
        let h = try tree.open("/svc/f", flags: O_RDWR)
        XCTAssertEqual(try tree.stat(handle: h).links, 1)
        try tree.remove("/svc/f")
        var st = try tree.stat(handle: h)
        XCTAssertEqual([st.size, st.links], [11, 0])
        XCTAssertFalse(st.isDirectory)
        try tree.truncate(handle: h, size: 5)
        st = try tree.stat(handle: h)
        XCTAssertEqual([st.size, st.links], [5, 0])
        XCTAssertEqual(try tree.seek(handle: h, offset: 0, whence: KeychainTree.seekData), 0)
        XCTAssertEqual(try tree.seek(handle: h, offset: 2, whence: KeychainTree.seekHole), 5)
        assertErrno(FileSystemError(ENXIO), _ = try tree.seek(handle: h, offset: 5, whence: KeychainTree.seekData))
        assertErrno(FileSystemError(ENXIO), _ = try tree.seek(handle: h, offset: -1, whence: KeychainTree.seekHole))
        assertErrno(.invalid, _ = try tree.seek(handle: h, offset: 0, whence: SEEK_END))
        XCTAssertEqual(try read(h), "hello")
        try write(h, "!", at: 5)
        XCTAssertEqual(try tree.stat(handle: h).size, 6)
        // Its commit goes nowhere: nothing comes back under the old name.
        try tree.flush(h)
        try tree.release(h)
        XCTAssertEqual(try tree.list("/svc"), [])
        XCTAssertEqual(try keychain.allItems().items.count, 0)
        assertErrno(.badHandle, _ = try tree.stat(handle: h))
    }

    func testAnUnlinkedFileWithSeveralHandlesShowsTheWrittenOne() throws {
        try tree.makeDirectory("/svc")
        let writer = try tree.create("/svc/f", flags: O_RDWR)
        let other = try tree.open("/svc/f", flags: O_WRONLY)
        try tree.remove("/svc/f")
        try write(writer, "hello", at: 0)
        for order in [[other, writer], [writer, other]] {
            XCTAssertEqual(try tree.stat(anyOf: order), try tree.stat(handle: writer))
        }
        XCTAssertEqual(try tree.stat(anyOf: [other]).size, 0, "each handle has its own copy")
        try tree.release(writer)
        try tree.release(other)
        assertErrno(.notFound, _ = try tree.stat(anyOf: [writer, other]))
    }

    func testAFileReplacedByARenameKeepsItsCopyWhileOpen() throws {
        try tree.makeDirectory("/svc")
        try tree.put("/svc/acct", "old")
        let h = try tree.open("/svc/acct", flags: O_RDONLY)
        try tree.put("/svc/tmp", "newer")
        try rename("/svc/tmp", "/svc/acct")
        let st = try tree.stat(handle: h)
        XCTAssertEqual([st.size, st.links], [3, 0])
        XCTAssertEqual(try read(h), "old")
        try tree.release(h)
        XCTAssertEqual(try get("/svc/acct"), "newer")
    }

    func testAPendingChangeShowsItsTimeAndTheCommitKeepsIt() throws {
        try tree.makeDirectory("/svc")
        try tree.put("/svc/f", "hello")
        let before = try tree.stat("/svc/f").modified
        let h = try tree.open("/svc/f", flags: O_RDWR)
        XCTAssertEqual(try tree.stat(handle: h).modified, before, "nothing changed yet")
        let truncatedAfter = later()
        try tree.truncate(handle: h, size: 3)
        let pending = try tree.stat(handle: h)
        XCTAssertEqual(pending.size, 3)
        XCTAssertGreaterThanOrEqual(pending.modified, truncatedAfter)
        XCTAssertEqual(try tree.stat("/svc/f"), pending, "stat of the path shows the pending change")
        _ = later()
        try tree.release(h)
        // What the kernel cached from the pending stat is what is stored.
        XCTAssertEqual(try tree.stat("/svc/f"), pending)
        XCTAssertEqual(try get("/svc/f"), "hel")
    }

    // MARK: a value stored through another channel while a file is open

    func key(_ account: String) throws -> ItemKey { .generic(try GenericPasswordKey(service: "svc", account: account)) }
    func secret(_ text: String) -> SecureBytes { SecureBytes(copying: Array(text.utf8)) }

    /// Each way another channel stores a whole value: the CLI's and git's (`save`), D-Bus's
    /// `SetSecret` (`replaceSecret`) and `CreateItem` with replace (`saveFirstFree`), an
    /// import's or a sync merge's (`save(batch:)`).
    func storeElsewhere(_ account: String, _ text: String, by way: Int) throws {
        let served = tree.served
        let k = try key(account)
        let extras: (SecureBytes?) -> SecureBytes = { _ in SecureBytes(copying: [1]) }
        switch way {
        case 0: _ = try served.save(k, secret: secret(text), changes: AttributeChanges(), updateExisting: true)
        case 1:
            let item = try XCTUnwrap(try served.items(matching: .exactly(k)).first)
            _ = try served.replaceSecret(of: item, secret: secret(text), extras: extras)
        case 2:
            let (_, replaced) = try served.saveFirstFree([k], secret: secret(text), label: "L", replaces: { _, _ in true }, extras: extras)
            XCTAssertTrue(replaced)
        default:
            var batch = ItemBatch()
            batch.append(ItemRecord(key: k, attributes: ItemAttributes(accessible: .whenUnlocked)), secret: secret(text))
            _ = try served.save(batch: batch, updateExisting: true)
        }
    }

    /// A write not yet committed on an open file was committed at its close over a value
    /// stored after it through any other channel, whose client had heard "done" (found over
    /// D-Bus with python3-secretstorage).
    func testAValueStoredElsewhereIsNotUndoneByAnOlderUncommittedWrite() throws {
        try tree.makeDirectory("/svc")
        for way in 0..<4 {
            let path = "/svc/a\(way)"
            try tree.put(path, "0123456789")
            let h = try tree.open(path, flags: O_RDWR)
            try write(h, "MOUNT", at: 0)
            try storeElsewhere("a\(way)", "from-dbus", by: way)
            XCTAssertEqual(try get(path), "from-dbus", "way \(way)")
            XCTAssertEqual(try tree.stat(path).size, 9, "way \(way): stat shows it, not the uncommitted write")
            XCTAssertEqual(try read(h), "MOUNT56789", "way \(way): the descriptor keeps its copy")
            try tree.flush(h)
            try tree.sync(h)
            try tree.release(h)
            XCTAssertEqual(try get(path), "from-dbus", "way \(way): the close stored nothing")
            XCTAssertEqual(try tree.served.secret(of: try XCTUnwrap(try tree.served.items(matching: .exactly(key("a\(way)"))).first))
                .unprotectedArray, Array("from-dbus".utf8), "way \(way): the store holds it")
        }
    }

    func testAnUncommittedTruncateAtOpenIsOutdatedLikeAWrite() throws {
        try tree.makeDirectory("/svc")
        try tree.put("/svc/t", "0123456789")
        let h = try tree.open("/svc/t", flags: O_WRONLY | O_TRUNC)
        try storeElsewhere("t", "from-other", by: 1)
        try tree.release(h)
        XCTAssertEqual(try get("/svc/t"), "from-other")
    }

    /// A write after the other channel's value is a later change: the close commits it (the
    /// descriptor's whole copy, as every commit does).
    func testAWriteAfterTheValueStoredElsewhereIsCommitted() throws {
        try tree.makeDirectory("/svc")
        try tree.put("/svc/w", "0123456789")
        let h = try tree.open("/svc/w", flags: O_RDWR)
        try write(h, "MOUNT", at: 0)
        try storeElsewhere("w", "from-other", by: 0)
        try write(h, "!", at: 10)
        let copy = try read(h)
        try tree.release(h)
        XCTAssertEqual(try get("/svc/w"), copy)
        XCTAssertEqual(copy, "MOUNT56789!")
    }

    /// A change that keeps the secret (D-Bus's Attributes, a label) leaves a pending write to
    /// its commit.
    func testAChangeThatKeepsTheSecretLeavesAnUncommittedWrite() throws {
        try tree.makeDirectory("/svc")
        try tree.put("/svc/r", "0123456789")
        let h = try tree.open("/svc/r", flags: O_RDWR)
        try write(h, "MOUNT", at: 0)
        let item = try XCTUnwrap(try tree.served.items(matching: .exactly(key("r"))).first)
        let renamed = try tree.served.rename(item, to: try key("r2"), extras: { _ in SecureBytes(copying: [2]) })
        _ = try tree.served.setLabel(of: renamed, to: "label")
        XCTAssertEqual(try get("/svc/r2"), "0123456789")
        try tree.release(h)
        XCTAssertEqual(try get("/svc/r2"), "MOUNT56789", "the file followed its item, and its write was committed")
        XCTAssertEqual(try tree.served.extras(of: try XCTUnwrap(try tree.served.items(matching: .exactly(key("r2"))).first))?
                .unprotectedArray, [2])
    }

    // MARK: directories

    func testDirectoryTimesFollowTheirEntries() throws {
        var t = later()
        try tree.makeDirectory("/svc")
        let made = try tree.stat("/svc").modified
        XCTAssertGreaterThanOrEqual(made, t, "a new directory has the time it was made")
        XCTAssertEqual(try tree.stat("/").modified, made, "and so has its parent")
        t = later()
        try tree.put("/svc/a", "1")
        let added = try tree.stat("/svc").modified
        XCTAssertGreaterThanOrEqual(added, t, "an entry added")
        XCTAssertEqual(try tree.stat("/").modified, made, "the grandparent does not change")
        _ = later()
        try tree.put("/svc/a", "2")
        XCTAssertEqual(try tree.stat("/svc").modified, added, "a changed secret changes no entry")
        t = later()
        try tree.remove("/svc/a")
        XCTAssertGreaterThanOrEqual(try tree.stat("/svc").modified, t, "an entry removed")
        t = later()
        try tree.removeDirectory("/svc")
        XCTAssertGreaterThanOrEqual(try tree.stat("/").modified, t, "a directory removed")

        for (path, parent) in [("/internet/h", "/internet"), ("/internet/h/443", "/internet/h"),
                               ("/internet/h/443/docs", "/internet/h/443"), ("/internet/h/443/docs/v1", "/internet/h/443/docs")] {
            t = later()
            try tree.makeDirectory(path)
            XCTAssertGreaterThanOrEqual(try tree.stat(path).modified, t, path)
            XCTAssertEqual(try tree.stat(parent).modified, try tree.stat(path).modified, parent)
        }
        t = later()
        try tree.put("/internet/h/443/docs/alice", "pw")
        XCTAssertGreaterThanOrEqual(try tree.stat("/internet/h/443/docs").modified, t)

        // Items made elsewhere (the control socket) change their directory's time too.
        t = later()
        _ = try tree.served.save(.generic(GenericPasswordKey(service: "cli", account: "x")), secret: SecureBytes(copying: [1]),
                                 changes: AttributeChanges(), updateExisting: false)
        XCTAssertGreaterThanOrEqual(try tree.stat("/cli").modified, t)
        XCTAssertGreaterThanOrEqual(try tree.stat("/").modified, t)
    }

    func testDirectoryLinkCountsCountSubdirectories() throws {
        XCTAssertEqual(try tree.stat("/").links, 3, "the root holds internet/")
        try tree.makeDirectory("/svc")
        try tree.put("/svc/a", "1")
        try tree.put("/svc/b", "2")
        XCTAssertEqual(try tree.stat("/").links, 4)
        XCTAssertEqual(try tree.stat("/svc").links, 2, "items are files")
        XCTAssertEqual(try tree.stat("/svc/a").links, 1)
        XCTAssertEqual(try tree.stat("/internet").links, 2)
        try tree.makeDirectory("/internet/h")
        try tree.makeDirectory("/internet/h/443")
        try tree.makeDirectory("/internet/h/80")
        try tree.makeDirectory("/internet/h/443/docs")
        try tree.put("/internet/h/443/alice", "pw")
        XCTAssertEqual(try tree.stat("/internet").links, 3)
        XCTAssertEqual(try tree.stat("/internet/h").links, 4)
        XCTAssertEqual(try tree.stat("/internet/h/443").links, 3)
        XCTAssertEqual(try tree.stat("/internet/h/443/docs").links, 2)
        try tree.removeDirectory("/internet/h/80")
        XCTAssertEqual(try tree.stat("/internet/h").links, 3)
    }

    func testEmptyDirectoriesRenameAndNonEmptyOnesDoNot() throws {
        // Servers, ports and path directories, as services.
        try tree.makeDirectory("/internet/a")
        try rename("/internet/a", "/internet/b")
        XCTAssertEqual(try tree.list("/internet").map(\.name), ["b"])
        try tree.makeDirectory("/internet/b/443")
        try rename("/internet/b/443", "/internet/b/8443")
        XCTAssertEqual(try tree.list("/internet/b").map(\.name), ["8443"])
        try tree.makeDirectory("/internet/c")
        try rename("/internet/b/8443", "/internet/c/22")
        XCTAssertEqual(try tree.list("/internet/b").map(\.name), [])
        XCTAssertEqual(try tree.list("/internet/c").map(\.name), ["22"])
        try tree.makeDirectory("/internet/c/22/docs")
        try rename("/internet/c/22/docs", "/internet/c/22/api")
        XCTAssertEqual(try tree.list("/internet/c/22").map(\.name), ["api"])
        assertErrno(.invalid, try self.rename("/internet/c/22/api", "/internet/c/22/x%~ssh"))
        assertErrno(.invalid, try self.rename("/internet/b", "/internet/c/99999"))
        assertErrno(.notFound, try self.rename("/internet/b", "/internet/nope/443"))
        assertErrno(.notPermitted, try self.rename("/internet/b", "/svc/x"))

        // Non-empty: the source answers EXDEV (mv then copies), the target ENOTEMPTY.
        try tree.put("/internet/c/22/api/alice", "pw")
        assertErrno(.crossDevice, try self.rename("/internet/c", "/internet/d"))
        assertErrno(.crossDevice, try self.rename("/internet/c/22/api", "/internet/c/22/v2"))
        assertErrno(.notEmpty, try self.rename("/internet/b", "/internet/c"))
        assertErrno(.notEmpty, try self.rename("/internet/b", "/internet/c/22"))
        try tree.makeDirectory("/internet/e")
        try tree.makeDirectory("/internet/e/443")
        // Both non-empty: the target's ENOTEMPTY, as rename(2) reports it first.
        assertErrno(.notEmpty, try self.rename("/internet/c", "/internet/e"))
        try tree.makeDirectory("/svc")
        try tree.put("/svc/acct", "1")
        try tree.makeDirectory("/empty")
        assertErrno(.notEmpty, try self.rename("/empty", "/svc"))

        // Onto an empty directory: it is replaced. Onto a file, into itself, over the roots: no.
        try rename("/internet/b", "/internet/e/443")
        XCTAssertEqual(try tree.list("/internet/e").map(\.name), ["443"])
        XCTAssertFalse(try tree.list("/internet").map(\.name).contains("b"))
        assertErrno(.exists, try self.rename("/internet/e/443", "/empty", noReplace: true))
        assertErrno(.notDirectory, try self.rename("/empty", "/svc/acct"))
        assertErrno(.isDirectory, try self.rename("/svc/acct", "/empty"))
        try tree.makeDirectory("/internet/f")
        assertErrno(.invalid, try self.rename("/internet/f", "/internet/f/443"))
        assertErrno(FileSystemError(EBUSY), try self.rename("/", "/x"))
        assertErrno(.notPermitted, try self.rename("/internet", "/x"))
        assertErrno(.notPermitted, try self.rename("/empty", "/internet"))
        try rename("/internet/f", "/internet/f")
        XCTAssertTrue(try tree.stat("/internet/f").isDirectory, "a rename onto itself changes nothing")
        // An empty directory is only a name, so it may become any directory.
        try rename("/empty", "/internet/g")
        XCTAssertTrue(try tree.stat("/internet/g").isDirectory)
        assertErrno(.notFound, _ = try tree.stat("/empty"))
    }
}
