import Foundation
import Glibc
import KeychainCrypto
import KeychainFileSystem
import KeychainModel
import KeychainStore
import Synchronization
import XCTest
@testable import KeychainFuse

/// What the kernel is told of a change it did not make, and that telling it cannot deadlock.
final class KernelCacheNotifierTests: XCTestCase {
    private func generic(_ s: String, _ a: String) throws -> ItemKey { .generic(try GenericPasswordKey(service: s, account: a)) }

    /// `internet/example.com/443`, looked up.
    private func port443(_ t: inout InodeTable) -> UInt64 {
        let inet = t.lookedUp(InodeTable.root, "internet")
        return t.lookedUp(t.lookedUp(inet, "example.com"), "443")
    }

    func testANameTheKernelHoldsIsDeletedAndLeavesTheTable() throws {
        var t = InodeTable()
        let svc = t.lookedUp(InodeTable.root, "svc")
        let file = t.lookedUp(svc, "acct")
        let notices = KernelCacheNotifier.notices(for: .removed(try generic("svc", "acct")), &t)
        XCTAssertEqual(notices, [.delete(parent: svc, child: file, name: "acct"), .invalidateInode(file), .invalidateInode(svc)],
                       "the inode's attributes too: a descriptor open on it shows its own copy's size, not the item's last")
        XCTAssertNil(t.child(svc, "acct"), "a new lookup of the name gets a new inode")
        XCTAssertNil(t.path(file), "the old inode has no name, as after unlink(2)")
    }

    func testANameAddedWhereTheKernelHoldsAPendingFileUnlinksThatFile() throws {
        var t = InodeTable()
        let svc = t.lookedUp(InodeTable.root, "svc")
        let pending = t.created(svc, "new")
        t.opened(pending, 7)
        XCTAssertEqual(KernelCacheNotifier.notices(for: .added(try generic("svc", "new")), &t),
                       [.delete(parent: svc, child: pending, name: "new"), .invalidateInode(pending), .invalidateInode(svc)])
        XCTAssertNil(t.child(svc, "new"), "the stored item gets its own inode at its lookup, not the pending file's")
    }

    /// An internet item's account may be the name of a path directory beside it: a new item of
    /// that name leaves the directory's inode as it is.
    func testANameAddedWhereTheKernelHoldsADirectoryOnlyDropsTheEntry() throws {
        var t = InodeTable()
        let port = port443(&t)
        let docs = t.lookedUp(port, "docs")
        let key = ItemKey.internet(try InternetPasswordKey(server: "example.com", port: 443, path: "", protocol: .https, account: "docs"))
        XCTAssertEqual(KernelCacheNotifier.notices(for: .added(key), &t),
                       [.invalidateEntry(parent: port, name: "docs"), .invalidateEntry(parent: port, name: "docs%~https"),
                        .invalidateInode(port)])
        XCTAssertEqual(t.child(port, "docs"), docs)
    }

    func testANewNameDropsAnyEntryAndTheDirectorysAttributes() throws {
        var t = InodeTable()
        let svc = t.lookedUp(InodeTable.root, "my service")
        XCTAssertEqual(KernelCacheNotifier.notices(for: .added(try generic("my service", "a/b")), &t),
                       [.invalidateEntry(parent: svc, name: "a%2Fb"), .invalidateInode(svc)])
        // A service the kernel never looked up: only the root's entry for it, and the root.
        XCTAssertEqual(KernelCacheNotifier.notices(for: .added(try generic("other", "a")), &t),
                       [.invalidateEntry(parent: InodeTable.root, name: "other"), .invalidateInode(InodeTable.root)])
    }

    func testAnUpdateInvalidatesTheInodeOnlyIfTheKernelHoldsIt() throws {
        var t = InodeTable()
        let svc = t.lookedUp(InodeTable.root, "svc")
        XCTAssertEqual(KernelCacheNotifier.notices(for: .updated(try generic("svc", "acct")), &t), [])
        let file = t.lookedUp(svc, "acct")
        XCTAssertEqual(KernelCacheNotifier.notices(for: .updated(try generic("svc", "acct")), &t), [.invalidateInode(file)])
        XCTAssertEqual(KernelCacheNotifier.notices(for: .updated(try generic("gone", "acct")), &t), [],
                       "nothing below a directory the kernel never looked up")
    }

    func testAnInternetItemIsToldByItsPlainAndItsTaggedName() throws {
        var t = InodeTable()
        let dir = t.lookedUp(port443(&t), "docs")
        let plain = t.lookedUp(dir, "alice")
        let tagged = t.lookedUp(dir, "alice%~https")
        let key = ItemKey.internet(try InternetPasswordKey(server: "example.com", port: 443, path: "docs", protocol: .https,
                                                           account: "alice"))
        XCTAssertEqual(KernelCacheNotifier.notices(for: .updated(key), &t), [.invalidateInode(plain), .invalidateInode(tagged)])
        XCTAssertEqual(KernelCacheNotifier.notices(for: .removed(key), &t),
                       [.delete(parent: dir, child: plain, name: "alice"), .invalidateInode(plain),
                        .delete(parent: dir, child: tagged, name: "alice%~https"), .invalidateInode(tagged), .invalidateInode(dir)])
    }

    func testAnUnlockRefreshesTheDirectoriesTheKernelHolds() throws {
        var t = InodeTable()
        let svc = t.lookedUp(InodeTable.root, "svc")
        _ = t.lookedUp(svc, "acct")
        _ = t.lookedUp(InodeTable.root, "empty")
        XCTAssertEqual(KernelCacheNotifier.notices(for: .lockStateChanged(.unlocked), &t),
                       [.invalidateInode(InodeTable.root), .invalidateInode(svc)])
        XCTAssertEqual(KernelCacheNotifier.notices(for: .lockStateChanged(.locked), &t), [])
    }

    func testChangesMadeThroughTheMountAreNotTold() throws {
        let (dir, keychain) = try Self.keychain()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let fs = FuseFileSystem(tree: try KeychainTree(keychain: keychain))
        let told = Counter()
        let notifier = KernelCacheNotifier(fileSystem: fs) { _ in told.value.withLock { $0 += 1 } }
        _ = fs.inodes.withLock { $0.lookedUp(InodeTable.root, "svc") }
        notifier.keychainDidChange([.added(try generic("svc", "a"))], origin: .tree)
        XCTAssertEqual(told.value.withLock { $0 }, 0)
        notifier.keychainDidChange([.added(try generic("svc", "a"))], origin: .control)
        XCTAssertEqual(told.value.withLock { $0 }, 1)
        // An unlock is told whoever asked: no request of the mount unlocks.
        notifier.keychainDidChange([.lockStateChanged(.unlocked)], origin: .tree)
        XCTAssertEqual(told.value.withLock { $0 }, 2)
    }

    func testAChangeThroughTheMountIsRetoldOnlyWhenTheKernelMayHoldTheItemUnderAnotherName() throws {
        var t = InodeTable()
        let svc = t.lookedUp(InodeTable.root, "al")
        let bob = t.lookedUp(svc, "Bob")
        let key = try generic("al", "Bob")
        XCTAssertEqual(KernelCacheNotifier.retold(.updated(key), t), [], "the name used is the one the kernel holds")
        let alias = t.lookedUp(svc, "%42ob", alias: true)
        let dropped: [KernelCacheNotifier.Notice] = [.invalidateEntry(parent: svc, name: "Bob"), .invalidateInode(bob), .invalidateInode(svc)]
        XCTAssertEqual(KernelCacheNotifier.retold(.updated(key), t), dropped, "an alias is held: the listed name is told")
        XCTAssertEqual(KernelCacheNotifier.retold(.removed(key), t), dropped)
        XCTAssertNotNil(t.child(svc, "Bob"), "a retelling unlinks nothing")
        t.forget(alias, 1)
        XCTAssertEqual(KernelCacheNotifier.retold(.removed(key), t), [], "the alias is forgotten")

        let port = t.lookedUp(t.lookedUp(t.lookedUp(InodeTable.root, "internet"), "example.com"), "443")
        let plain = t.lookedUp(port, "alice")
        let internet = ItemKey.internet(try InternetPasswordKey(server: "example.com", port: 443, protocol: .https, account: "alice"))
        XCTAssertEqual(KernelCacheNotifier.retold(.updated(internet), t), [], "one of its two names held")
        let tagged = t.lookedUp(port, "alice%~https")
        XCTAssertEqual(KernelCacheNotifier.retold(.updated(internet), t),
                       [.invalidateEntry(parent: port, name: "alice"), .invalidateInode(plain),
                        .invalidateEntry(parent: port, name: "alice%~https"), .invalidateInode(tagged), .invalidateInode(port)])
        XCTAssertEqual(KernelCacheNotifier.retold(.moved(from: internet, to: key), t).count, 5 + 3, "both ends of a move")
    }

    func testARetoldChangeIsSentAfterTheRequestOnItsOwnThread() throws {
        let (dir, keychain) = try Self.keychain()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let fs = FuseFileSystem(tree: try KeychainTree(keychain: keychain))
        let told = Counter()
        let gate = Mutex(false)
        let notifier = KernelCacheNotifier(fileSystem: fs) { _ in
            gate.withLock { _ in }
            told.value.withLock { $0 += 1 }
        }
        fs.inodes.withLock { t in
            let svc = t.lookedUp(InodeTable.root, "svc")
            _ = t.lookedUp(svc, "a")
            _ = t.lookedUp(svc, "%61", alias: true)
        }
        // Were it sent on the calling thread, this would wait for `gate` forever.
        gate.withLock { _ in
            notifier.keychainDidChange([.updated(try! generic("svc", "a"))], origin: .tree)
            XCTAssertEqual(told.value.withLock { $0 }, 0)
        }
        notifier.retelling.sync {}
        XCTAssertEqual(told.value.withLock { $0 }, 1)
    }

    /// The interleaving libfuse warns of: a lookup in a directory is blocked inside the daemon
    /// (the kernel holds the directory's lock until it is answered) while a control-socket
    /// change in the same directory sends its notification, which needs that lock. The
    /// notification waits, the lookup is let go and answered, then the notification completes.
    func testANotificationWaitingOnABlockedLookupCompletesOnceItIsAnswered() throws {
        guard access("/dev/fuse", R_OK | W_OK) == 0, getuid() == 0 else { throw XCTSkip("needs /dev/fuse and root") }
        let (dir, keychain) = try Self.keychain()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let tree = try KeychainTree(keychain: keychain)
        let mp = dir + "/mnt"
        try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let mount = FuseMount(tree: tree, mountpoint: mp)
        try mount.mount()
        let loopEnded = DispatchSemaphore(value: 0)
        Thread {
            _ = mount.serve()
            loopEnded.signal()
        }.start()
        defer {
            tree.served.setAfterFillRead(nil)
            Self.run("/bin/fusermount3", ["-u", "-z", mp])
            if loopEnded.wait(timeout: .now() + 10) == .success { mount.close() }
        }
        _ = try tree.served.save(try generic("svc", "a"), secret: SecureBytes(copying: Array("one".utf8)),
                                 changes: AttributeChanges(), updateExisting: false)
        var st = stat()
        XCTAssertEqual(stat(mp + "/svc/a", &st), 0, "the kernel now holds svc and svc/a")

        let entered = DispatchSemaphore(value: 0), letGo = DispatchSemaphore(value: 0)
        let first = Counter()
        tree.served.setAfterFillRead {
            guard first.value.withLock({ n in defer { n += 1 }; return n == 0 }) else { return }
            entered.signal()
            letGo.wait()
        }
        let lookupDone = DispatchSemaphore(value: 0), saveDone = DispatchSemaphore(value: 0)
        Thread {
            var st = stat()
            _ = stat(mp + "/svc/missing", &st)
            lookupDone.signal()
        }.start()
        XCTAssertEqual(entered.wait(timeout: .now() + 10), .success, "the lookup reached the daemon and is held there")
        let keyB = try generic("svc", "b")
        Thread {
            _ = try? tree.served.save(keyB, secret: SecureBytes(copying: Array("two".utf8)),
                                      changes: AttributeChanges(), updateExisting: false)
            saveDone.signal()
        }.start()
        // The save commits and then waits in the kernel for the directory the lookup holds.
        XCTAssertEqual(saveDone.wait(timeout: .now() + 0.5), .timedOut, "the notification waits for the lookup")
        letGo.signal()
        XCTAssertEqual(lookupDone.wait(timeout: .now() + 10), .success, "the lookup is answered")
        XCTAssertEqual(saveDone.wait(timeout: .now() + 10), .success, "and then the notification completes")
        XCTAssertEqual(stat(mp + "/svc/b", &st), 0, "the new name shows at once")
    }

    private final class Counter: Sendable { let value = Mutex(0) }

    private static func keychain() throws -> (directory: String, keychain: Keychain) {
        let dir = NSTemporaryDirectory() + "kcfs-notifier-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let passphrase = SecureBytes(copying: Array("notifier test".utf8))
        let keychain = try Keychain.create(at: dir + "/k.db", passphrase: passphrase, scrypt: ScryptParameters(logN: 10),
                                           deviceKeyPath: dir + "/device.key")
        return (dir, keychain)
    }

    @discardableResult
    private static func run(_ path: String, _ args: [String]) -> Int32 {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: path)
        p.arguments = args
        do { try p.run() } catch { return -1 }
        p.waitUntilExit()
        return p.terminationStatus
    }
}
