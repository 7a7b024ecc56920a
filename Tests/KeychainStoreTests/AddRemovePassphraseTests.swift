import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStore
import XCTest

final class AddRemovePassphraseTests: XCTestCase {
    var store: TempStore!

    override func setUpWithError() throws { store = try TempStore() }
    override func tearDown() { store = nil }

    private let passcodeClass = AccessibilityClass.whenPasscodeSetThisDeviceOnly

    /// One item of each class the store allows, named after its class.
    private func fill(_ k: Keychain) throws {
        for c in AccessibilityClass.allCases where k.hasPassphrase || c != passcodeClass {
            try add(k, genericKey("svc", c.rawValue), "s-\(c.rawValue)", class: c)
        }
    }

    private func assertReadable(_ k: Keychain, _ classes: [AccessibilityClass], file: StaticString = #filePath, line: UInt = #line) throws {
        for c in classes {
            let item = try XCTUnwrap(try k.item(for: genericKey("svc", c.rawValue)), c.rawValue, file: file, line: line)
            XCTAssertEqual(text(try k.secret(of: item)), "s-\(c.rawValue)", file: file, line: line)
        }
    }

    private func wrappedKeys() throws -> String { try store.sql("SELECT name, wrapping, hex(blob) FROM wrapped_keys ORDER BY name, wrapping") }
    /// The rows of the newest generation: adding or removing the passphrase starts one, and the
    /// older generation's keys stay only wrapped by their successors, for the older items.
    private static let newestLayout = """
        SELECT name, wrapping FROM wrapped_keys WHERE generation = (SELECT MAX(generation) FROM wrapped_keys)
        ORDER BY name, wrapping
        """
    private func layout() throws -> String { try store.sql(Self.newestLayout) }
    private func olderWrappings() throws -> String {
        try store.sql("SELECT DISTINCT wrapping FROM wrapped_keys WHERE generation < (SELECT MAX(generation) FROM wrapped_keys)")
    }

    func testRemoveDeletesPasscodeItemsAndKeepsTheRest() throws {
        try fill(try store.create())
        XCTAssertEqual(try store.open().removePassphrase(secure(TempStore.passphrase)), 1)
        let k = try store.open()
        XCTAssertFalse(k.hasPassphrase)
        try k.unlock(passphrase: nil)
        let kept = AccessibilityClass.allCases.filter { $0 != passcodeClass }
        try assertReadable(k, kept)
        XCTAssertNil(try k.item(for: genericKey("svc", passcodeClass.rawValue)))
        XCTAssertEqual(try k.countsByClass()[passcodeClass], nil)
        assertKeychainError(isInvalidInput, "no passcode items without a passphrase",
                            try add(k, genericKey("svc", "again"), "x", class: passcodeClass))
    }

    func testRemovedStoreHasTheLayoutOfADeviceOnlyStore() throws {
        try fill(try store.create())
        try store.open().removePassphrase(secure(TempStore.passphrase))
        let other = try TempStore()
        _ = try other.create(passphrase: nil)
        XCTAssertEqual(try layout(), try other.sql(Self.newestLayout))
        XCTAssertEqual(try olderWrappings(), "n")
        XCTAssertEqual(try store.sql("SELECT COUNT(*) FROM wrapped_keys WHERE name = 'class.\(passcodeClass.rawValue)'"), "0",
                       "no key of the deleted class is left in any generation")
    }

    func testRemoveWithAWrongPassphraseChangesNothing() throws {
        try fill(try store.create())
        let before = try wrappedKeys()
        assertKeychainError(.wrongPassphrase, try store.open().removePassphrase(secure("wrong")))
        XCTAssertEqual(try wrappedKeys(), before)
        let k = try store.openUnlocked()
        XCTAssertTrue(k.hasPassphrase)
        try assertReadable(k, AccessibilityClass.allCases)
    }

    func testRemoveWithoutTheDeviceKeyChangesNothing() throws {
        try fill(try store.create())
        let before = try wrappedKeys()
        let elsewhere = try store.open(deviceKeyPath: store.directory + "/no-such/device.key")
        assertKeychainError(isInvalidInput, "the device key is needed", try elsewhere.removePassphrase(secure(TempStore.passphrase)))
        XCTAssertEqual(try wrappedKeys(), before)
        XCTAssertEqual(try store.open().countsByClass()[passcodeClass], 1, "no item was deleted")
    }

    func testRemoveFromADeviceOnlyStoreIsRefused() throws {
        _ = try store.create(passphrase: nil)
        assertKeychainError(isInvalidInput, "no passphrase to remove", try store.open().removePassphrase(secure("x")))
    }

    func testAddGivesADeviceOnlyStoreAPassphrase() throws {
        try fill(try store.create(passphrase: nil))
        try store.open().addPassphrase(secure("new pass"), scrypt: TempStore.scrypt)
        let k = try store.open()
        XCTAssertTrue(k.hasPassphrase)
        XCTAssertEqual(k.state, .beforeFirstUnlock)
        try assertReadable(k, [.always, .alwaysThisDeviceOnly])
        assertKeychainError(.unavailable(.whenUnlocked), try k.item(for: genericKey("svc", "when-unlocked")))
        assertKeychainError(.wrongPassphrase, try k.unlock(passphrase: nil))
        assertKeychainError(.wrongPassphrase, try k.unlock(passphrase: secure("wrong")))
        try k.unlock(passphrase: secure("new pass"))
        try assertReadable(k, AccessibilityClass.allCases.filter { $0 != passcodeClass })
        try add(k, genericKey("svc", passcodeClass.rawValue), "s-\(passcodeClass.rawValue)", class: passcodeClass)
        try assertReadable(try store.openUnlocked(passphrase: "new pass"), AccessibilityClass.allCases)
    }

    func testAddedStoreHasTheLayoutOfAPassphraseStore() throws {
        _ = try store.create(passphrase: nil)
        try store.open().addPassphrase(secure("new pass"), scrypt: TempStore.scrypt)
        let other = try TempStore()
        _ = try other.create()
        XCTAssertEqual(try layout(), try other.sql(Self.newestLayout))
        XCTAssertEqual(try olderWrappings(), "n")
    }

    func testAddLeavesTheItemsTableAlone() throws {
        try fill(try store.create(passphrase: nil))
        let rows = "SELECT id, class, version, hex(wrapped_key), hex(attributes), hex(secret) FROM items ORDER BY id"
        let before = try store.sql(rows)
        try store.open().addPassphrase(secure("new pass"), scrypt: TempStore.scrypt)
        XCTAssertEqual(try store.sql(rows), before)
    }

    func testAddToAStoreWithAPassphraseIsRefused() throws {
        _ = try store.create()
        let before = try wrappedKeys()
        assertKeychainError(isInvalidInput, "already has one", try store.open().addPassphrase(secure("other"), scrypt: TempStore.scrypt))
        XCTAssertEqual(try wrappedKeys(), before)
    }

    func testAddAnEmptyPassphraseIsRefused() throws {
        _ = try store.create(passphrase: nil)
        assertKeychainError(isInvalidInput, "empty", try store.open().addPassphrase(secure(""), scrypt: TempStore.scrypt))
        XCTAssertFalse(try store.open().hasPassphrase)
    }

    func testRemoveThenAddKeepsEveryOtherItem() throws {
        try fill(try store.create())
        try store.open().removePassphrase(secure(TempStore.passphrase))
        try store.open().addPassphrase(secure("second"), scrypt: TempStore.scrypt)
        let k = try store.openUnlocked(passphrase: "second")
        try assertReadable(k, AccessibilityClass.allCases.filter { $0 != passcodeClass })
        assertKeychainError(.wrongPassphrase, try store.open().unlock(passphrase: secure(TempStore.passphrase)))
    }
}
