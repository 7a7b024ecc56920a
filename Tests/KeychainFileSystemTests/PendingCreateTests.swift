import XCTest
@testable import KeychainFileSystem
import KeychainCrypto
import KeychainModel
import KeychainStore

/// A file created through the tree is pending until a commit inserts it with its secret:
/// one commit per create, counted by the store's commit counter.
final class PendingCreateTests: XCTestCase {
    var dir: String!
    var keychain: Keychain!
    var tree: KeychainTree!

    override func setUpWithError() throws {
        (dir, keychain) = try makeTemporaryKeychain("kcfs-pending", passphrase: SecureBytes(copying: Array("pw".utf8)))
        tree = try KeychainTree(keychain: keychain)
        try tree.makeDirectory("/svc")
    }

    override func tearDownWithError() throws { try? FileManager.default.removeItem(atPath: dir) }

    func write(_ h: UInt64, _ text: String, at offset: Int = 0) throws {
        _ = try Array(text.utf8).withUnsafeBytes { try tree.write(h, offset: offset, data: $0) }
    }

    func stored(_ account: String) throws -> KeychainItem? {
        try keychain.item(for: .generic(try GenericPasswordKey(service: "svc", account: account)))
    }

    func storedSecret(_ account: String) throws -> String? {
        try stored(account).map { String(decoding: try keychain.secret(of: $0).unprotectedArray, as: UTF8.self) }
    }

    /// The commits `body` makes.
    func commits(_ body: () throws -> Void) rethrows -> UInt64 {
        let before = keychain.commitCount
        try body()
        return keychain.commitCount - before
    }

    func assertErrno(_ expected: FileSystemError, _ body: @autoclosure () throws -> Void, line: UInt = #line) {
        XCTAssertThrowsError(try body(), line: line) { XCTAssertEqual($0 as? FileSystemError, expected, line: line) }
    }

    func testTheCounterCountsCommits() throws {
        XCTAssertEqual(try commits { try keychain.add(ItemRecord(key: .generic(try GenericPasswordKey(service: "svc", account: "x")),
                                                                 attributes: ItemAttributes()),
                                                      secret: SecureBytes(copying: [1])) }, 1)
    }

    func testACreateIsPendingUntilItsCloseAndCommitsOnce() throws {
        let n = try commits {
            let h = try tree.create("/svc/new", flags: O_WRONLY)
            XCTAssertNil(try stored("new"), "nothing is stored at create")
            XCTAssertEqual(try tree.list("/svc").map(\.name), ["new"], "but ls shows it")
            let st = try tree.stat("/svc/new")
            XCTAssertEqual(st.size, 0)
            XCTAssertEqual(st.mode, 0o100600)
            XCTAssertEqual(st.links, 1)
            XCTAssertEqual(try tree.stat(handle: h).size, 0)
            try write(h, "s3cret")
            XCTAssertEqual(try tree.stat("/svc/new").size, 6, "stat shows the pending copy")
            try tree.release(h)
        }
        XCTAssertEqual(n, 1)
        XCTAssertEqual(try storedSecret("new"), "s3cret")
        XCTAssertEqual(try stored("new")?.sealed.version, 1, "inserted once, never updated")
        XCTAssertEqual(try tree.stat("/svc/new").size, 6)
    }

    /// sh -c 'echo x > f': create, a flush from the shell's dup and close, the write, then
    /// close's flush and release.
    func testAShellRedirectionCommitsOnce() throws {
        let n = try commits {
            let h = try tree.create("/svc/sh", flags: O_WRONLY | O_TRUNC)
            try tree.flush(h)
            XCTAssertNil(try stored("sh"), "the flush before any write stores nothing")
            try write(h, "x\n")
            try tree.flush(h)
            try tree.release(h)
        }
        XCTAssertEqual(n, 1)
        XCTAssertEqual(try storedSecret("sh"), "x\n")
    }

    func testAnEmptyCreateAndCloseStoresAnEmptyItemInOneCommit() throws {
        XCTAssertEqual(try commits { try tree.release(try tree.create("/svc/empty", flags: O_WRONLY)) }, 1)
        XCTAssertEqual(try storedSecret("empty"), "")
    }

    func testFsyncInsertsAndTheCloseAfterItCommitsNothingMore() throws {
        let h = try tree.create("/svc/synced", flags: O_RDWR)
        try write(h, "durable")
        XCTAssertEqual(try commits { try tree.sync(h) }, 1)
        XCTAssertEqual(try storedSecret("synced"), "durable")
        XCTAssertEqual(try commits { try tree.release(h) }, 0)
        let empty = try tree.create("/svc/syncedEmpty", flags: O_WRONLY)
        XCTAssertEqual(try commits { try tree.sync(empty) }, 1, "an fsync of an empty new file stores it")
        XCTAssertEqual(try storedSecret("syncedEmpty"), "")
        XCTAssertEqual(try commits { try tree.release(empty) }, 0)
    }

    func testWritesAfterTheFirstCommitUpdateTheStoredItem() throws {
        let h = try tree.create("/svc/two", flags: O_WRONLY)
        try write(h, "one")
        try tree.flush(h)
        try write(h, "two", at: 3)
        XCTAssertEqual(try commits { try tree.release(h) }, 1)
        XCTAssertEqual(try storedSecret("two"), "onetwo")
        XCTAssertEqual(try stored("two")?.sealed.version, 2)
    }

    func testAnotherOpenOfAPendingFileReadsItEmptyAndStoresNothing() throws {
        let h = try tree.create("/svc/shared", flags: O_WRONLY)
        try write(h, "later")
        let reader = try tree.open("/svc/shared", flags: O_RDONLY)
        var buf = [UInt8](repeating: 0, count: 16)
        XCTAssertEqual(try buf.withUnsafeMutableBytes { try tree.read(reader, offset: 0, count: 16, into: $0.baseAddress!) }, 0)
        XCTAssertEqual(try commits { try tree.release(reader) }, 0)
        XCTAssertNil(try stored("shared"))
        try tree.release(h)
        XCTAssertEqual(try storedSecret("shared"), "later")
    }

    func testAnUnlinkedPendingFileIsNeverStored() throws {
        let n = try commits {
            let h = try tree.create("/svc/gone", flags: O_WRONLY)
            try write(h, "never")
            try tree.remove("/svc/gone")
            assertErrno(.notFound, _ = try tree.stat("/svc/gone"))
            XCTAssertEqual(try tree.stat(handle: h).links, 0)
            try tree.release(h)
        }
        XCTAssertEqual(n, 0)
        XCTAssertNil(try stored("gone"))
        XCTAssertEqual(try tree.list("/svc").map(\.name), [])
    }

    func testARenamedPendingFileIsStoredOnceUnderItsNewName() throws {
        let n = try commits {
            let h = try tree.create("/svc/tmp", flags: O_WRONLY)
            try write(h, "moved")
            try tree.rename("/svc/tmp", to: "/svc/final", noReplace: false, exchange: false)
            XCTAssertEqual(try tree.list("/svc").map(\.name), ["final"])
            try tree.release(h)
        }
        XCTAssertEqual(n, 1)
        XCTAssertNil(try stored("tmp"))
        XCTAssertEqual(try storedSecret("final"), "moved")
    }

    func testAPendingFileRenamedOntoAnItemReplacesItsSecretAtClose() throws {
        let old = try tree.create("/svc/acct", flags: O_WRONLY)
        try write(old, "old")
        try tree.release(old)
        let h = try tree.create("/svc/acct.tmp", flags: O_WRONLY)
        try write(h, "new")
        try tree.rename("/svc/acct.tmp", to: "/svc/acct", noReplace: false, exchange: false)
        try tree.release(h)
        XCTAssertEqual(try storedSecret("acct"), "new")
        XCTAssertNil(try stored("acct.tmp"))
        XCTAssertEqual(try tree.list("/svc").map(\.name), ["acct"])
    }

    func testAttributesOfAPendingFileAreStoredWithItInOneCommit() throws {
        let n = try commits {
            let h = try tree.create("/svc/labelled", flags: O_WRONLY)
            try tree.setAttribute("/svc/labelled", name: "user.keychain.label", value: Array("work".utf8))
            XCTAssertEqual(try tree.attribute("/svc/labelled", name: "user.keychain.label"), Array("work".utf8))
            try write(h, "v")
            try tree.release(h)
        }
        XCTAssertEqual(n, 1)
        XCTAssertEqual(try stored("labelled")?.record.attributes.label, "work")
    }

    func testPendingFilesAreNotInTheControlSocketsAnswers() throws {
        let h = try tree.create("/svc/hidden", flags: O_WRONLY)
        XCTAssertEqual(try tree.served.items(matching: ItemQuery(kind: .generic)).count, 0)
        XCTAssertEqual(try tree.served.items(matching: .exactly(.generic(try GenericPasswordKey(service: "svc", account: "hidden")))).count, 0)
        XCTAssertEqual(try tree.served.allItems().count, 0)
        try tree.release(h)
        XCTAssertEqual(try tree.served.allItems().map(\.key.account), ["hidden"])
    }

    /// The control socket stores the same name meanwhile: the insert fails at close with
    /// EEXIST, the pending file is gone, and the saved item keeps the name.
    func testAFailedInsertRemovesThePendingFileAndReportsTheError() throws {
        let h = try tree.create("/svc/race", flags: O_WRONLY)
        try write(h, "mine")
        _ = try tree.served.save(.generic(try GenericPasswordKey(service: "svc", account: "race")),
                                 secret: SecureBytes(copying: Array("theirs".utf8)), changes: AttributeChanges(),
                                 updateExisting: true)
        assertErrno(.exists, try tree.release(h))
        XCTAssertEqual(try storedSecret("race"), "theirs")
        XCTAssertEqual(try tree.list("/svc").map(\.name), ["race"])
        XCTAssertEqual(try tree.stat("/svc/race").size, 6)
    }

    /// The stored item takes the pending file's name at once, not at the file's commit: a delete
    /// of that item leaves nothing listed, the pending file's copy is its own (as an unlinked
    /// file's), its first commit fails with EEXIST and stores nothing, and later ones do nothing.
    func testAPendingFileWhoseNameIsStoredElsewhereLosesItAtOnce() throws {
        let key = ItemKey.generic(try GenericPasswordKey(service: "svc", account: "taken"))
        let h = try tree.create("/svc/taken", flags: O_RDWR)
        try write(h, "mine")
        _ = try tree.served.save(key, secret: SecureBytes(copying: Array("theirs".utf8)), changes: AttributeChanges(),
                                 updateExisting: true)
        XCTAssertEqual(try tree.list("/svc").map(\.name), ["taken"])
        XCTAssertEqual(try tree.stat("/svc/taken").size, 6, "the stored item's size, not the pending copy's")
        try tree.truncate(handle: h, size: 10)
        XCTAssertEqual(try tree.stat("/svc/taken").size, 6)
        XCTAssertEqual(try tree.stat(handle: h), .file(size: 10, modified: try tree.stat(handle: h).modified, links: 0))
        try tree.served.delete(try XCTUnwrap(try keychain.item(for: key)))
        XCTAssertEqual(try tree.list("/svc").map(\.name), [], "the pending file is not listed again")
        assertErrno(.notFound, _ = try tree.stat("/svc/taken"))
        XCTAssertEqual(try commits { assertErrno(.exists, try tree.flush(h)) }, 0)
        XCTAssertEqual(try commits { try tree.release(h) }, 0)
        XCTAssertNil(try stored("taken"))
    }

    /// A this-device-only sibling stored between the create and the insert (the control
    /// socket, while the file is open) makes the new item this-device-only at its insert.
    func testASiblingStoredAfterTheCreateStillSetsTheClassAtTheInsert() throws {
        let h = try tree.create("/svc/late", flags: O_WRONLY)
        try write(h, "mine")
        _ = try tree.served.save(.generic(try GenericPasswordKey(service: "svc", account: "strict")),
                                 secret: SecureBytes(copying: Array("x".utf8)),
                                 changes: AttributeChanges(accessible: .whenUnlockedThisDeviceOnly),
                                 updateExisting: false)
        try tree.release(h)
        XCTAssertEqual(try stored("late")?.accessible, .whenUnlockedThisDeviceOnly)
    }

    func testALockBeforeTheCommitRemovesThePendingFile() throws {
        let h = try tree.create("/svc/locked", flags: O_WRONLY)
        try write(h, "lost")
        tree.lock()
        XCTAssertEqual(try commits { assertErrno(.keyUnavailable, try tree.release(h)) }, 0)
        try tree.unlock(passphrase: SecureBytes(copying: Array("pw".utf8)))
        assertErrno(.notFound, _ = try tree.stat("/svc/locked"))
        XCTAssertNil(try stored("locked"))
    }

    /// fsync(2) drops nothing (the FUSE binding could not tell the kernel before its reply):
    /// the file goes at its close.
    func testAnFsyncAfterALockKeepsThePendingFileUntilItsClose() throws {
        let h = try tree.create("/svc/synced", flags: O_WRONLY)
        try write(h, "lost")
        tree.lock()
        try tree.unlock(passphrase: SecureBytes(copying: Array("pw".utf8)))
        assertErrno(.keyUnavailable, try tree.sync(h))
        XCTAssertEqual(try tree.list("/svc").map(\.name), ["synced"], "still there after the fsync")
        assertErrno(.keyUnavailable, try tree.flush(h))
        assertErrno(.notFound, _ = try tree.stat("/svc/synced"))
        try? tree.release(h)
        XCTAssertNil(try stored("synced"))
    }

    func testAnAbandonedPendingFileLeavesNothing() throws {
        let h = try tree.create("/svc/huge", flags: O_WRONLY)
        assertErrno(.tooLarge, try tree.truncate(handle: h, size: maxSecretBytes + 1))
        XCTAssertEqual(try commits { assertErrno(.tooLarge, try tree.release(h)) }, 0)
        assertErrno(.notFound, _ = try tree.stat("/svc/huge"))
    }

    func testCreatingOverAPendingFileIsEEXIST() throws {
        let h = try tree.create("/svc/once", flags: O_WRONLY)
        assertErrno(.exists, _ = try tree.create("/svc/once", flags: O_WRONLY))
        try tree.release(h)
    }
}
