import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStore
import XCTest

final class ChangePassphraseTests: XCTestCase {
    var store: TempStore!

    override func setUpWithError() throws { store = try TempStore() }
    override func tearDown() { store = nil }

    func itemRows() throws -> String {
        try store.sql("SELECT id, kind, class, version, hex(blind), hex(group_blind), hex(wrapped_key), hex(attributes), hex(secret) FROM items ORDER BY id")
    }

    func makeStore() throws {
        let k = try store.create()
        for c in AccessibilityClass.allCases { try add(k, genericKey("svc", c.rawValue), "s-\(c.rawValue)", class: c) }
    }

    func testOldPassphraseFailsAndNewWorks() throws {
        try makeStore()
        try store.openUnlocked().changePassphrase(old: secure(TempStore.passphrase), new: secure("new pass"))
        let k = try store.open()
        assertKeychainError(.wrongPassphrase, try k.unlock(passphrase: secure(TempStore.passphrase)))
        try k.unlock(passphrase: secure("new pass"))
        XCTAssertEqual(k.state, .unlocked)
        for c in AccessibilityClass.allCases {
            XCTAssertEqual(text(try k.secret(of: XCTUnwrap(try k.item(for: genericKey("svc", c.rawValue))))), "s-\(c.rawValue)")
        }
    }

    func testChangeFromBeforeFirstUnlockUnlocksWithTheOldPassphrase() throws {
        try makeStore()
        let k = try store.open()
        try k.changePassphrase(old: secure(TempStore.passphrase), new: secure("new pass"))
        XCTAssertEqual(k.state, .unlocked)
        XCTAssertNoThrow(try store.open().unlock(passphrase: secure("new pass")))
    }

    func testChangeDoesNotTouchTheItemsTable() throws {
        try makeStore()
        let before = try itemRows()
        XCTAssertFalse(before.isEmpty)
        let wrappedBefore = try store.sql("SELECT hex(blob) FROM wrapped_keys WHERE wrapping IN ('p', 'pd') ORDER BY name, wrapping")
        try store.openUnlocked().changePassphrase(old: secure(TempStore.passphrase), new: secure("new pass"))
        XCTAssertEqual(try itemRows(), before)
        XCTAssertNotEqual(try store.sql("SELECT hex(blob) FROM wrapped_keys WHERE wrapping IN ('p', 'pd') ORDER BY name, wrapping"),
                          wrappedBefore, "the class keys are re-wrapped")
    }

    func testWrongOldPassphraseChangesNothing() throws {
        try makeStore()
        let k = try store.open()
        assertKeychainError(.wrongPassphrase, try k.changePassphrase(old: secure("wrong"), new: secure("new pass")))
        XCTAssertNoThrow(try store.open().unlock(passphrase: secure(TempStore.passphrase)))
    }

    func testWrongOldPassphraseIsRefusedEvenWhenUnlocked() throws {
        try makeStore()
        let k = try store.openUnlocked()
        assertKeychainError(.wrongPassphrase, try k.changePassphrase(old: secure("wrong"), new: secure("new pass")))
        XCTAssertNoThrow(try store.open().unlock(passphrase: secure(TempStore.passphrase)))
    }

    func testNewScryptParametersAreStored() throws {
        try makeStore()
        try store.openUnlocked().changePassphrase(old: secure(TempStore.passphrase), new: secure("new pass"),
                                                  scrypt: ScryptParameters(logN: 11))
        let json = try store.sql("SELECT CAST(value AS TEXT) FROM meta WHERE name = 'scrypt'")
        let params = try JSONDecoder().decode(ScryptParameters.self, from: Data(json.utf8))
        XCTAssertEqual(params, ScryptParameters(logN: 11))
        XCTAssertNoThrow(try store.open().unlock(passphrase: secure("new pass")))
    }
}

/// The time the backoff reads, moved by the test: no test waits on the wall clock.
final class TestClock: @unchecked Sendable {
    private let lock = NSLock()
    private var seconds = 1_800_000_000

    func read() -> Int { lock.withLock { seconds } }
    func advance(_ by: Int) { lock.withLock { seconds += by } }
}

final class BackoffTests: XCTestCase {
    var store: TempStore!
    let clock = TestClock()

    override func setUpWithError() throws {
        store = try TempStore()
        _ = try store.create()
    }
    override func tearDown() { store = nil }

    /// The store opened with the test's clock.
    func open() throws -> Keychain {
        try Keychain(openingAt: store.path, deviceKeyPath: store.deviceKeyPath, clock: { [clock] in clock.read() })
    }

    func testBackoffDelaySchedule() {
        XCTAssertEqual(Keychain.backoffDelay(failures: 0), 0)
        XCTAssertEqual(Keychain.backoffDelay(failures: 1), 0)
        XCTAssertEqual(Keychain.backoffDelay(failures: 2), 0)
        XCTAssertEqual(Keychain.backoffDelay(failures: 3), 5)
        XCTAssertEqual(Keychain.backoffDelay(failures: 4), 10)
        XCTAssertEqual(Keychain.backoffDelay(failures: 5), 20)
        XCTAssertEqual(Keychain.backoffDelay(failures: 12), 2560)
        XCTAssertEqual(Keychain.backoffDelay(failures: 13), 3600)
        XCTAssertEqual(Keychain.backoffDelay(failures: 1000), 3600)
        XCTAssertEqual(Keychain.backoffDelay(failures: Int.max), 3600)
    }

    func fail(_ k: Keychain, times: Int) {
        for _ in 0..<times { assertKeychainError(.wrongPassphrase, try k.unlock(passphrase: secure("wrong"))) }
    }

    /// The wait `unlock` asks for now, or nil when it unlocks.
    func waitAsked(_ k: Keychain, passphrase: String = TempStore.passphrase) throws -> Int? {
        do {
            try k.unlock(passphrase: secure(passphrase))
            return nil
        } catch KeychainError.tooManyAttempts(let wait) {
            return wait
        }
    }

    /// What vouches for an access list change: the passphrase, checked as `unlock` checks it,
    /// with no key installed or forgotten.
    func testCheckingThePassphraseCountsFailuresAndChangesNoKeys() throws {
        let k = try open()
        XCTAssertNoThrow(try k.checkPassphrase(secure(TempStore.passphrase)))
        XCTAssertEqual(k.state, .beforeFirstUnlock, "a right passphrase unlocks nothing")
        for _ in 0..<3 { assertKeychainError(.wrongPassphrase, try k.checkPassphrase(secure("wrong"))) }
        XCTAssertEqual(try k.failureRecord().failures, 3)
        XCTAssertEqual(try waitAsked(k), 5, "unlock waits after three wrong checks")
        assertKeychainError(.tooManyAttempts(retryAfter: 5), try k.checkPassphrase(secure(TempStore.passphrase)))
        clock.advance(5)
        try k.unlock(passphrase: secure(TempStore.passphrase))
        XCTAssertNoThrow(try k.checkPassphrase(secure(TempStore.passphrase)))
        XCTAssertEqual(k.state, .unlocked, "nor does a check lock")
        XCTAssertEqual(try k.failureRecord().failures, 0)
    }

    func testThreeFailuresBlockEvenTheRightPassphrase() throws {
        let k = try open()
        fail(k, times: 3)
        XCTAssertEqual(try k.failureRecord().failures, 3)
        XCTAssertEqual(try waitAsked(k), 5)
        XCTAssertEqual(k.state, .beforeFirstUnlock)
        clock.advance(4)
        XCTAssertEqual(try waitAsked(k), 1, "one second before the delay is over it still waits")
        XCTAssertEqual(k.state, .beforeFirstUnlock)
    }

    func testBackoffSurvivesReopening() throws {
        fail(try open(), times: 3)
        let fresh = try open()
        XCTAssertEqual(try fresh.failureRecord().failures, 3)
        XCTAssertEqual(try waitAsked(fresh), 5)
    }

    func testBlockedAttemptDoesNotCountAsAFailure() throws {
        let k = try open()
        fail(k, times: 3)
        XCTAssertEqual(try waitAsked(k, passphrase: "wrong"), 5)
        XCTAssertEqual(try k.failureRecord().failures, 3)
    }

    func testTwoFailuresDoNotBlockAndSuccessResetsTheCounter() throws {
        let k = try open()
        fail(k, times: 2)
        XCTAssertEqual(try k.failureRecord().failures, 2)
        try k.unlock(passphrase: secure(TempStore.passphrase))
        XCTAssertEqual(k.state, .unlocked)
        XCTAssertEqual(try k.failureRecord().failures, 0)
    }

    func testUnlockIsAllowedAgainOnceTheDelayHasPassed() throws {
        let k = try open()
        fail(k, times: 3)
        clock.advance(5)
        XCTAssertNil(try waitAsked(k), "the right passphrase unlocks once the 5 s are over")
        XCTAssertEqual(k.state, .unlocked)
        XCTAssertEqual(try k.failureRecord().failures, 0)
    }

    func testFailureAfterTheDelayDoublesIt() throws {
        let k = try open()
        fail(k, times: 3)
        clock.advance(5)
        fail(k, times: 1)
        XCTAssertEqual(try k.failureRecord().failures, 4)
        XCTAssertEqual(try waitAsked(k), 10)
        clock.advance(9)
        XCTAssertEqual(try waitAsked(k), 1)
        clock.advance(1)
        XCTAssertNil(try waitAsked(k))
    }

    /// A failure recorded in the future (the clock was set back since) counts as now: the wait
    /// is the backoff's, never the years until that time.
    func testAFailureTimeInTheFutureWaitsOnlyTheBackoff() throws {
        let k = try open()
        fail(k, times: 3)
        clock.advance(-10 * 365 * 24 * 3600)
        XCTAssertEqual(try waitAsked(k), 5)
    }
}
