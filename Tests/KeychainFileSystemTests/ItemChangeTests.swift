import Foundation
import Synchronization
import XCTest
@testable import KeychainFileSystem
import KeychainCrypto
import KeychainModel
import KeychainStore
import KeychainBatch

/// Records what the owner delivers, and checks on each delivery that no lock of the owner is
/// held: it calls back into the owner (a read under `state`, a change under `committing`).
final class RecordingObserver: ItemChangeObserver {
    let heard = Mutex<[(changes: [ItemChange], origin: ChangeOrigin)]>([])
    let callBack = Mutex<(@Sendable () -> Void)?>(nil)

    func keychainDidChange(_ changes: [ItemChange], origin: ChangeOrigin) {
        heard.withLock { $0.append((changes, origin)) }
        callBack.withLock { $0 }?()
    }

    func take() -> [(changes: [ItemChange], origin: ChangeOrigin)] {
        heard.withLock { h -> [(changes: [ItemChange], origin: ChangeOrigin)] in
            let out = h
            h = []
            return out
        }
    }
}

/// A clock the test moves by hand.
final class ManualClock: MonotonicClock {
    let seconds = Atomic<Int64>(1000)
    var now: Int64 { seconds.load(ordering: .relaxed) }
    func advance(_ by: Int64) { seconds.add(by, ordering: .relaxed) }
}

/// Every operation of the owner tells its observers what it committed, once, after it has
/// let go of its locks and before it returns.
final class ItemChangeTests: XCTestCase {
    var dir: String!
    var keychain: Keychain!
    var served: ServedKeychain!
    var tree: KeychainTree!
    let recorder = RecordingObserver()
    let clock = ManualClock()
    let passphrase = SecureBytes(copying: Array("correct horse".utf8))

    override func setUpWithError() throws {
        (dir, keychain) = try makeTemporaryKeychain("kcfs-change", passphrase: passphrase)
        served = try ServedKeychain(keychain: keychain, clock: clock)
        tree = KeychainTree(served: served)
        served.addObserver(recorder)
        try tree.makeDirectory("/svc")
        try tree.makeDirectory("/internet/h.example")
        try tree.makeDirectory("/internet/h.example/443")
    }

    override func tearDownWithError() throws { try? FileManager.default.removeItem(atPath: dir) }

    func key(_ account: String) throws -> ItemKey { .generic(try GenericPasswordKey(service: "svc", account: account)) }
    func sorted(_ changes: [ItemChange]) -> [String] { changes.map { "\($0)" }.sorted() }
    func secret(_ text: String) -> SecureBytes { SecureBytes(copying: Array(text.utf8)) }

    func testTreeOperationsEmitTheirChanges() throws {
        let a = try key("a"), b = try key("b"), c = try key("c")
        // A pending create is not stored: nothing yet; its commit adds the name.
        let h = try tree.create("/svc/a", flags: O_WRONLY)
        XCTAssertTrue(recorder.take().isEmpty, "a pending item is not a stored change")
        _ = try Array("one".utf8).withUnsafeBytes { try tree.write(h, offset: 0, data: $0) }
        try tree.release(h)
        var heard: [(changes: [ItemChange], origin: ChangeOrigin)] = recorder.take()
        XCTAssertEqual(heard.map(\.changes), [[.added(try key("a"))]])
        XCTAssertEqual(heard.map(\.origin), [.tree])

        try tree.put("/svc/a", "two")
        XCTAssertEqual(recorder.take().map(\.changes), [[.updated(try key("a"))]])

        try tree.setAttribute("/svc/a", name: "user.keychain.label", value: Array("l".utf8))
        XCTAssertEqual(recorder.take().map(\.changes), [[.updated(try key("a"))]])

        try tree.rename("/svc/a", to: "/svc/b", noReplace: false, exchange: false)
        XCTAssertEqual(recorder.take().map(\.changes), [[.moved(from: a, to: b)]])

        try tree.put("/svc/c", "three")
        _ = recorder.take()
        try tree.rename("/svc/c", to: "/svc/b", noReplace: false, exchange: false)
        let replacing: [ItemChange] = [.removed(b), .moved(from: c, to: b)]
        let got = recorder.take().map(\.changes)
        XCTAssertEqual(got, [replacing])

        try tree.remove("/svc/b")
        heard = recorder.take()
        XCTAssertEqual(heard.map(\.changes), [[.removed(try key("b"))]])
        XCTAssertEqual(heard.map(\.origin), [.tree])

        // An internet item renamed by an attribute moves.
        try tree.put("/internet/h.example/443/alice", "pw")
        _ = recorder.take()
        try tree.setAttribute("/internet/h.example/443/alice", name: "user.keychain.securitydomain", value: Array("d".utf8))
        let changes = recorder.take().map(\.changes)
        XCTAssertEqual(changes.count, 1)
        guard case .moved(let from, let to)? = changes.first?.first else { return XCTFail("\(changes)") }
        XCTAssertEqual(from.account, "alice")
        XCTAssertEqual(to.account, "alice")
        XCTAssertNotEqual(from, to)
    }

    func testControlOperationsEmitTheirChanges() throws {
        _ = try served.save(try key("x"), secret: secret("1"), changes: AttributeChanges(), updateExisting: false)
        var heard: [(changes: [ItemChange], origin: ChangeOrigin)] = recorder.take()
        XCTAssertEqual(heard.map(\.changes), [[.added(try key("x"))]])
        XCTAssertEqual(heard.map(\.origin), [.control])
        _ = try served.save(try key("x"), secret: secret("2"), changes: AttributeChanges(), updateExisting: true)
        XCTAssertEqual(recorder.take().map(\.changes), [[.updated(try key("x"))]])

        var batch = ItemBatch()
        batch.append(ItemRecord(key: try key("y"), attributes: ItemAttributes(accessible: .whenUnlocked)), secret: secret("y"))
        batch.append(ItemRecord(key: try key("x"), attributes: ItemAttributes(accessible: .whenUnlocked)), secret: secret("x"))
        _ = try served.save(batch: batch, updateExisting: true)
        XCTAssertEqual(recorder.take().map { sorted($0.changes) }, [sorted([.added(try key("y")), .updated(try key("x"))])])

        _ = try served.delete(matching: ItemQuery(kind: .generic, service: "svc"), all: true)
        XCTAssertEqual(recorder.take().map { sorted($0.changes) }, [sorted([.removed(try key("x")), .removed(try key("y"))])])

        // A refused change commits nothing and says nothing.
        XCTAssertThrowsError(try served.delete(matching: ItemQuery(kind: .generic, service: "svc"), all: true))
        XCTAssertThrowsError(try tree.remove("/svc/none"))
        XCTAssertTrue(recorder.take().isEmpty)
    }

    func testLockAndUnlockEmitTheStateWhoeverAsks() throws {
        let dropped = Atomic<Int>(0)
        served.setAfterLock { dropped.add(1, ordering: .relaxed) }
        served.lock()
        XCTAssertEqual(recorder.take().map(\.changes), [[.lockStateChanged(.locked)]])
        XCTAssertEqual(dropped.load(ordering: .relaxed), 1, "the page drop runs for a lock the control socket asks")
        served.lock()
        XCTAssertTrue(recorder.take().isEmpty, "already locked: nothing changed")
        XCTAssertThrowsError(try served.unlock(passphrase: secret("wrong")))
        XCTAssertTrue(recorder.take().isEmpty)
        try tree.unlock(passphrase: passphrase)
        let heard: [(changes: [ItemChange], origin: ChangeOrigin)] = recorder.take()
        XCTAssertEqual(heard.map(\.changes), [[.lockStateChanged(.unlocked)]])
        XCTAssertEqual(heard.map(\.origin), [.tree])
    }

    /// The owner's hooks run at the same stack depth every time. Kept as bare closures in a
    /// `Mutex`, each read wrapped them in two more reabstraction thunks: the FUSE loop's
    /// `willWait`, run at every commit, made each create slower than the last, and the stack
    /// would at last have overflowed.
    func testHooksRunAtTheSameDepthEveryTime() throws {
        let waitDepths = Mutex<[Int]>([]), lockDepths = Mutex<[Int]>([])
        served.setBeforeWaiting { waitDepths.withLock { $0.append(Thread.callStackReturnAddresses.count) } }
        served.setAfterLock { lockDepths.withLock { $0.append(Thread.callStackReturnAddresses.count) } }
        for _ in 0..<100 { served.willWait() }
        for _ in 0..<20 {
            served.lock()
            try served.unlock(passphrase: passphrase)
        }
        for depths in [waitDepths.withLock { $0 }, lockDepths.withLock { $0 }] {
            XCTAssertGreaterThanOrEqual(depths.count, 20)
            XCTAssertEqual(Set(depths).count, 1, "depths \(depths.prefix(5)) … \(depths.suffix(5))")
        }
    }

    /// The idle lock, on an injected clock: it counts from the last access and from a new
    /// setting, and it is the same lock (page drop, observers) as any other.
    func testTheIdleLockFollowsTheClock() throws {
        let dropped = Atomic<Int>(0)
        tree.setAfterLock { dropped.add(1, ordering: .relaxed) }
        tree.lockIfIdle()
        clock.advance(10_000)
        tree.lockIfIdle()
        XCTAssertEqual(served.lockState, .unlocked, "lock-after off: never")
        tree.setLockAfter(60)
        tree.lockIfIdle()
        XCTAssertEqual(served.lockState, .unlocked, "a new setting counts from now")
        clock.advance(59)
        tree.lockIfIdle()
        XCTAssertEqual(served.lockState, .unlocked)
        clock.advance(30)
        tree.noteAccess()
        clock.advance(59)
        tree.lockIfIdle()
        XCTAssertEqual(served.lockState, .unlocked, "an access starts the count again")
        clock.advance(1)
        tree.lockIfIdle()
        XCTAssertEqual(served.lockState, .locked)
        XCTAssertEqual(dropped.load(ordering: .relaxed), 1)
        XCTAssertEqual(recorder.take().map(\.changes), [[.lockStateChanged(.locked)]])
        try tree.unlock(passphrase: passphrase)
        clock.advance(59)
        tree.lockIfIdle()
        XCTAssertEqual(served.lockState, .unlocked, "an unlock is an access")
    }

    /// An observer that calls back into the owner, for a read and for a change, does not
    /// deadlock: no lock of the owner is held while it runs. And it runs before the
    /// operation returns.
    func testObserversRunWithNoLockHeldAndBeforeTheCallerReturns() throws {
        let served = self.served!, tree = self.tree!, passphrase = self.passphrase, k = try key("reentrant")
        let reentered = Atomic<Int>(0)
        recorder.callBack.withLock {
            $0 = {
                // `state` (a read of the cache) and `committing` (a change) are both free.
                _ = served.cacheUsage
                if reentered.add(1, ordering: .relaxed).newValue == 1 {
                    _ = try? served.save(k, secret: SecureBytes(copying: [1]), changes: AttributeChanges(), updateExisting: true)
                }
            }
        }
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            try? tree.put("/svc/first", "x")
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success, "an observer that calls back in deadlocked")
        XCTAssertEqual(reentered.load(ordering: .relaxed), 2, "the nested change was delivered before the outer one returned")
        XCTAssertEqual(recorder.take().map(\.changes), [[.added(try key("first"))], [.added(k)]])

        // A lock's observer may unlock again.
        recorder.callBack.withLock { $0 = { if served.lockState == .locked { try? served.unlock(passphrase: passphrase) } } }
        let locked = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            served.lock()
            locked.signal()
        }
        XCTAssertEqual(locked.wait(timeout: .now() + 30), .success, "a lock's observer that unlocks deadlocked")
        XCTAssertEqual(served.lockState, .unlocked)
    }
}
