import Synchronization
import XCTest
@testable import KeychainFileSystem
import KeychainCrypto
import KeychainModel
import KeychainStore

/// The interleavings that broke when the control socket wrote to the store behind the tree:
/// every change now goes through `ServedKeychain`, so after any mix of them the tree, the
/// index and the store agree exactly.
final class OwnerRaceTests: XCTestCase {
    var dir: String!
    var keychain: Keychain!
    var served: ServedKeychain!
    var tree: KeychainTree!
    let passphrase = SecureBytes(copying: Array("correct horse".utf8))

    override func setUpWithError() throws {
        (dir, keychain) = try makeTemporaryKeychain("kcfs-race", passphrase: passphrase)
        served = try ServedKeychain(keychain: keychain)
        tree = KeychainTree(served: served)
        try tree.makeDirectory("/svc")
    }

    override func tearDownWithError() throws { try? FileManager.default.removeItem(atPath: dir) }

    func key(_ account: String) throws -> ItemKey { .generic(try GenericPasswordKey(service: "svc", account: account)) }

    /// The mount's listing and contents, the index, and a fresh read of the store are one view.
    func assertViewsAgree(_ context: String) throws {
        let listed = Set(try tree.list("/svc").map(\.name))
        let (stored, problems) = try keychain.allItems()
        XCTAssertEqual(problems, [], context)
        XCTAssertEqual(listed, Set(stored.map(\.key.account)), context)
        // Listed just now, the service is read whole: the index holds exactly its stored items.
        XCTAssertEqual(Set(served.state.withLock { $0.index.items.keys }), Set(stored.map(\.id)), context)
        for item in stored {
            let value = try keychain.secret(of: item)
            XCTAssertEqual(try tree.get("/svc/" + item.key.account), String(decoding: value.unprotectedArray, as: UTF8.self), context)
        }
    }

    /// Unlink through the tree against a save through the control path, and a rename onto the
    /// same name against both: run together many times, each round ends with one view.
    func testUnlinkRenameAndControlSaveInterleave() throws {
        for round in 0..<150 {
            try tree.put("/svc/tmp", "renamed-\(round)")
            let group = DispatchGroup()
            let tree = self.tree!, served = self.served!, target = try key("acct")
            DispatchQueue.global().async(group: group) {
                _ = try? served.save(target, secret: SecureBytes(copying: Array("saved-\(round)".utf8)),
                                     changes: AttributeChanges(), updateExisting: true)
            }
            DispatchQueue.global().async(group: group) { try? tree.remove("/svc/acct") }
            DispatchQueue.global().async(group: group) {
                try? tree.rename("/svc/tmp", to: "/svc/acct", noReplace: false, exchange: false)
            }
            group.wait()
            try assertViewsAgree("round \(round)")
        }
    }

    /// The sequence that once revived a deleted item: a control save, then an unlink.
    func testUnlinkAfterControlSaveStaysDeleted() throws {
        _ = try served.save(try key("a"), secret: SecureBytes(copying: Array("v1".utf8)), changes: AttributeChanges(),
                            updateExisting: true)
        XCTAssertEqual(try tree.get("/svc/a"), "v1")
        try tree.remove("/svc/a")
        XCTAssertThrowsError(try tree.stat("/svc/a")) { XCTAssertEqual($0 as? FileSystemError, .notFound) }
        XCTAssertNil(try keychain.item(for: try key("a")))
        try assertViewsAgree("after unlink")
    }

    /// A lock that lands while a secret is being decrypted for open(): the open fails with
    /// ENOKEY and no copy is cached or left open.
    func testLockDuringOpenLeavesNothing() throws {
        try tree.put("/svc/a", "secret")
        served.state.withLock { $0.plaintext.removeAll() }
        let served = self.served!
        served.setAfterDecrypt { served.lock() }
        XCTAssertThrowsError(try tree.open("/svc/a", flags: O_RDONLY)) { XCTAssertEqual($0 as? FileSystemError, .keyUnavailable) }
        served.setAfterDecrypt(nil)
        XCTAssertEqual(served.state.withLock { $0.plaintext.count }, 0)
        XCTAssertEqual(served.state.withLock { $0.files.count }, 0)
        XCTAssertEqual(keychain.state, .locked)
    }

    /// A rename over an item (`mv tmp item`, `sed -i`) committed between open's finding the
    /// item and its reading the secret from the store: the open gets what the name holds now,
    /// not ENOENT for a name that never stopped existing.
    func testAnOpenRacingARenameOverTheItemOpensWhatTheNameHoldsNow() throws {
        try tree.put("/svc/item", "old")
        try tree.put("/svc/tmp", "new")
        served.state.withLock { $0.plaintext.removeAll() }
        let tree = self.tree!, renamed = Mutex(false)
        served.setBeforeSecretRead {
            guard !renamed.withLock({ done in defer { done = true }; return done }) else { return }
            try? tree.rename("/svc/tmp", to: "/svc/item", noReplace: false, exchange: false)
        }
        defer { served.setBeforeSecretRead(nil) }
        let h = try tree.open("/svc/item", flags: O_RDONLY)
        var buffer = [UInt8](repeating: 0, count: 16)
        let n = try buffer.withUnsafeMutableBytes { try tree.read(h, offset: 0, count: 16, into: $0.baseAddress!) }
        XCTAssertEqual(String(decoding: buffer[..<n], as: UTF8.self), "new")
        try tree.release(h)
        XCTAssertTrue(renamed.withLock { $0 }, "the rename ran inside the open")
    }

    /// A commit holds only the commit lock across its fsync: reads of another item go on.
    func testReadsProceedWhileAnotherItemCommits() throws {
        try tree.put("/svc/a", "a")
        try tree.put("/svc/b", "b")
        let inCommit = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        let served = self.served!
        DispatchQueue.global().async {
            served.change(origin: .control) { _ -> Void in
                inCommit.signal()
                release.wait()
            }
        }
        inCommit.wait()
        XCTAssertEqual(try tree.get("/svc/b"), "b")
        XCTAssertEqual(try tree.list("/svc").map(\.name), ["a", "b"])
        release.signal()
    }

    /// Sixteen wrong passphrases at once are judged one after another, so the backoff holds.
    func testConcurrentWrongUnlocksAreSerialised() throws {
        served.lock()
        let wrong = SecureBytes(copying: Array("wrong".utf8))
        let results = Mutex<[KeychainError]>([])
        let served = self.served!
        DispatchQueue.concurrentPerform(iterations: 16) { _ in
            do { try served.unlock(passphrase: wrong) } catch let e as KeychainError {
                results.withLock { $0.append(e) }
            } catch {}
        }
        let errors = results.withLock { $0 }
        XCTAssertEqual(errors.count, 16)
        XCTAssertEqual(errors.filter { $0 == .wrongPassphrase }.count, 3, "\(errors)")
        XCTAssertEqual(errors.filter { if case .tooManyAttempts = $0 { true } else { false } }.count, 13)
        XCTAssertEqual(try keychain.failureRecord().failures, 3)
    }

    /// The daemon answers finds and deletes from the index; the attribute filters apply there
    /// as in the store, on the exact-key probe too, and a delete takes the first match only
    /// unless told to take all.
    func testFiltersAndTheFirstMatchInTheIndex() throws {
        for (account, label) in [("a", "x"), ("b", "y"), ("c", "x"), ("d", nil)] {
            _ = try served.save(try key(account), secret: SecureBytes(copying: Array(account.utf8)),
                                changes: AttributeChanges { $0.label = label; $0.creator = label == "x" ? try FourCharCode("crea") : nil },
                                updateExisting: false)
        }
        func accounts(_ q: ItemQuery) throws -> [String] { try served.items(matching: q).map(\.key.account) }
        XCTAssertEqual(try accounts(ItemQuery(kind: .generic, attributes: AttributeValues { $0.label = "x" })), ["a", "c"])
        XCTAssertEqual(try accounts(ItemQuery(kind: .generic, service: "svc", attributes: AttributeValues { $0.creator = try FourCharCode("crea") })), ["a", "c"])
        XCTAssertEqual(try accounts(ItemQuery(kind: .generic, attributes: AttributeValues { $0.label = "z" })), [])
        XCTAssertEqual(try accounts(ItemQuery(kind: .generic, accessGroup: "", account: "b", service: "svc", attributes: AttributeValues { $0.label = "y" })), ["b"])
        XCTAssertEqual(try accounts(ItemQuery(kind: .generic, accessGroup: "", account: "b", service: "svc", attributes: AttributeValues { $0.label = "x" })), [])
        XCTAssertThrowsError(try served.delete(matching: ItemQuery(kind: .generic, attributes: AttributeValues { $0.label = "z" }), all: true)) {
            XCTAssertEqual($0 as? KeychainError, .itemNotFound)
        }
        XCTAssertEqual(try served.delete(matching: ItemQuery(kind: .generic, attributes: AttributeValues { $0.label = "x" }), all: false).map(\.key.account), ["a"])
        XCTAssertEqual(try served.delete(matching: ItemQuery(kind: .generic, attributes: AttributeValues { $0.label = "x" }), all: true).map(\.key.account), ["c"])
        XCTAssertEqual(try accounts(ItemQuery(kind: .generic)), ["b", "d"])
        try assertViewsAgree("after the filtered deletes")
    }
}
