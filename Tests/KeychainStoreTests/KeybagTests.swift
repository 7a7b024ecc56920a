import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStore
import XCTest

/// The lock states and what each class of item allows in them (DESIGN §2).
final class KeybagTests: XCTestCase {
    var store: TempStore!

    override func setUpWithError() throws { store = try TempStore() }
    override func tearDown() { store = nil }

    static let alwaysClasses: Set<AccessibilityClass> = [.always, .alwaysThisDeviceOnly]
    static let afterFirstUnlockClasses: Set<AccessibilityClass> = [.afterFirstUnlock, .afterFirstUnlockThisDeviceOnly]
    static let whenUnlockedClasses: Set<AccessibilityClass> = [.whenUnlocked, .whenUnlockedThisDeviceOnly, .whenPasscodeSetThisDeviceOnly]

    static func key(_ c: AccessibilityClass) throws -> ItemKey { try genericKey("svc", c.rawValue) }
    static func secretText(_ c: AccessibilityClass) -> String { "secret-of-\(c.rawValue)" }

    /// A passphrase store with one item of every class, closed again.
    func makeStoreWithEveryClass(passphrase: String? = TempStore.passphrase) throws {
        let k = try store.create(passphrase: passphrase)
        for c in AccessibilityClass.allCases where passphrase != nil || c != .whenPasscodeSetThisDeviceOnly {
            try add(k, Self.key(c), Self.secretText(c), class: c)
        }
    }

    func listedClasses(_ k: Keychain) throws -> Set<AccessibilityClass> {
        let (items, problems) = try k.allItems()
        XCTAssertEqual(problems, [])
        return Set(items.map(\.accessible))
    }

    func assertReadable(_ k: Keychain, _ classes: Set<AccessibilityClass>, file: StaticString = #filePath, line: UInt = #line) throws {
        for c in classes {
            guard let item = try k.item(for: Self.key(c)) else { XCTFail("\(c) not found", file: file, line: line); continue }
            XCTAssertEqual(text(try k.secret(of: item)), Self.secretText(c), file: file, line: line)
        }
    }

    // MARK: create and reopen

    func testCreatedStoreIsUnlockedWithEveryClassReadable() throws {
        let k = try store.create()
        XCTAssertEqual(k.state, .unlocked)
        XCTAssertTrue(k.hasPassphrase)
        XCTAssertTrue(k.deviceKeyPresent)
        for c in AccessibilityClass.allCases {
            try add(k, Self.key(c), Self.secretText(c), class: c)
            XCTAssertTrue(k.isAvailable(c), c.rawValue)
        }
        try assertReadable(k, Set(AccessibilityClass.allCases))
    }

    func testReopenedStoreIsBeforeFirstUnlockWithOnlyAlwaysItemsListed() throws {
        try makeStoreWithEveryClass()
        let k = try store.open()
        XCTAssertEqual(k.state, .beforeFirstUnlock)
        XCTAssertEqual(try listedClasses(k), Self.alwaysClasses)
        XCTAssertEqual(try k.items(matching: ItemQuery(kind: .generic, service: "svc")).map(\.accessible).sorted(),
                       Self.alwaysClasses.sorted())
    }

    func testBeforeFirstUnlockAlwaysSecretsAreReadable() throws {
        try makeStoreWithEveryClass()
        let k = try store.open()
        try assertReadable(k, Self.alwaysClasses)
    }

    func testBeforeFirstUnlockOtherItemsCannotBeLookedUp() throws {
        try makeStoreWithEveryClass()
        let k = try store.open()
        for c in AccessibilityClass.allCases where !Self.alwaysClasses.contains(c) {
            XCTAssertFalse(k.isAvailable(c), c.rawValue)
            assertKeychainError(.unavailable(c), try k.item(for: Self.key(c)))
        }
    }

    func testBeforeFirstUnlockNewItemsOfLockedClassesAreRefused() throws {
        try makeStoreWithEveryClass()
        let k = try store.open()
        assertKeychainError(.unavailable(.whenUnlocked), try add(k, genericKey("svc", "new"), "x", class: .whenUnlocked))
        XCTAssertNoThrow(try add(k, genericKey("svc", "new-always"), "x", class: .always))
    }

    func testUnlockWithTheRightPassphraseOpensEverything() throws {
        try makeStoreWithEveryClass()
        let k = try store.open()
        try k.unlock(passphrase: secure(TempStore.passphrase))
        XCTAssertEqual(k.state, .unlocked)
        XCTAssertEqual(try listedClasses(k), Set(AccessibilityClass.allCases))
        try assertReadable(k, Set(AccessibilityClass.allCases))
    }

    func testWrongPassphraseChangesNothing() throws {
        try makeStoreWithEveryClass()
        let before = try store.sql("SELECT name, wrapping, hex(blob) FROM wrapped_keys ORDER BY 1, 2; SELECT id, hex(wrapped_key), hex(attributes), hex(secret) FROM items ORDER BY id")
        let k = try store.open()
        assertKeychainError(.wrongPassphrase, try k.unlock(passphrase: secure("wrong horse")))
        XCTAssertEqual(k.state, .beforeFirstUnlock)
        XCTAssertEqual(try listedClasses(k), Self.alwaysClasses)
        assertKeychainError(.unavailable(.whenUnlocked), try k.item(for: Self.key(.whenUnlocked)))
        let after = try store.sql("SELECT name, wrapping, hex(blob) FROM wrapped_keys ORDER BY 1, 2; SELECT id, hex(wrapped_key), hex(attributes), hex(secret) FROM items ORDER BY id")
        XCTAssertEqual(before, after)
        // The right one still works afterwards.
        try k.unlock(passphrase: secure(TempStore.passphrase))
        XCTAssertEqual(k.state, .unlocked)
    }

    func testMissingPassphraseIsWrongForAPassphraseStore() throws {
        try makeStoreWithEveryClass()
        let k = try store.open()
        assertKeychainError(.wrongPassphrase, try k.unlock(passphrase: nil))
        XCTAssertEqual(k.state, .beforeFirstUnlock)
    }

    // MARK: lock

    func testLockForgetsWhenUnlockedSecretsOnly() throws {
        try makeStoreWithEveryClass()
        let k = try store.openUnlocked()
        k.lock()
        XCTAssertEqual(k.state, .locked)
        for c in Self.whenUnlockedClasses {
            let item = try XCTUnwrap(try k.item(for: Self.key(c)), c.rawValue)
            assertKeychainError(.unavailable(c), try k.secret(of: item))
            XCTAssertFalse(k.isAvailable(c))
        }
        try assertReadable(k, Self.afterFirstUnlockClasses.union(Self.alwaysClasses))
    }

    func testLockedStoreStillListsEveryName() throws {
        try makeStoreWithEveryClass()
        let k = try store.openUnlocked()
        k.lock()
        XCTAssertEqual(try listedClasses(k), Set(AccessibilityClass.allCases))
        XCTAssertEqual(try k.items(matching: ItemQuery(kind: .generic)).count, AccessibilityClass.allCases.count)
    }

    func testLockedStoreRefusesNewWhenUnlockedItems() throws {
        try makeStoreWithEveryClass()
        let k = try store.openUnlocked()
        k.lock()
        assertKeychainError(.unavailable(.whenUnlocked), try add(k, genericKey("svc", "new"), "x", class: .whenUnlocked))
        XCTAssertNoThrow(try add(k, genericKey("svc", "new-afu"), "x", class: .afterFirstUnlock))
    }

    func testUnlockAfterLockRestoresSecrets() throws {
        try makeStoreWithEveryClass()
        let k = try store.openUnlocked()
        k.lock()
        try k.unlock(passphrase: secure(TempStore.passphrase))
        XCTAssertEqual(k.state, .unlocked)
        try assertReadable(k, Set(AccessibilityClass.allCases))
    }

    func testLockBeforeFirstUnlockDoesNothing() throws {
        try makeStoreWithEveryClass()
        let k = try store.open()
        k.lock()
        XCTAssertEqual(k.state, .beforeFirstUnlock)
        try assertReadable(k, Self.alwaysClasses)
    }

    // MARK: no passphrase

    func testNoPassphraseStoreRefusesWhenPasscodeSetItems() throws {
        let k = try store.create(passphrase: nil)
        XCTAssertFalse(k.hasPassphrase)
        assertKeychainError(isInvalidInput, "invalidInput",
                            try add(k, genericKey("svc", "a"), "x", class: .whenPasscodeSetThisDeviceOnly))
        XCTAssertEqual(try k.allItems().items.count, 0)
    }

    func testNoPassphraseStoreHoldsEveryOtherClass() throws {
        try makeStoreWithEveryClass(passphrase: nil)
        let k = try store.open()
        XCTAssertFalse(k.hasPassphrase)
        XCTAssertEqual(k.state, .beforeFirstUnlock)
        XCTAssertEqual(try listedClasses(k), Self.alwaysClasses)
        try k.unlock(passphrase: nil)
        XCTAssertEqual(k.state, .unlocked)
        var all = Set(AccessibilityClass.allCases)
        all.remove(.whenPasscodeSetThisDeviceOnly)
        XCTAssertEqual(try listedClasses(k), all)
        try assertReadable(k, all)
    }

    func testNoPassphraseStoreHasNoPassphraseToChange() throws {
        let k = try store.create(passphrase: nil)
        assertKeychainError(isInvalidInput, "invalidInput", try k.changePassphrase(old: secure(""), new: secure("x")))
    }

    // MARK: another machine

    func testCopiedStoreWithoutDeviceKeyShowsNothingBeforeUnlock() throws {
        try makeStoreWithEveryClass()
        let k = try store.open(deviceKeyPath: store.directory + "/elsewhere/device.key")
        XCTAssertFalse(k.deviceKeyPresent)
        XCTAssertEqual(k.state, .beforeFirstUnlock)
        XCTAssertEqual(try k.allItems().items.count, 0)
    }

    func testCopiedStoreWithoutDeviceKeyOpensWithPassphraseButNotThisDeviceOnlyItems() throws {
        try makeStoreWithEveryClass()
        // Copy the store to another directory, as to another machine, and open it without the device key.
        let copy = store.directory + "/other-machine/keychain.db"
        try FileManager.default.createDirectory(atPath: store.directory + "/other-machine", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: store.path, toPath: copy)
        let k = try Keychain(openingAt: copy, deviceKeyPath: store.directory + "/other-machine/device.key")
        try k.unlock(passphrase: secure(TempStore.passphrase))
        XCTAssertEqual(k.state, .unlocked)
        let portable = Set(AccessibilityClass.allCases.filter { !$0.isThisDeviceOnly })
        XCTAssertEqual(try listedClasses(k), portable)
        try assertReadable(k, portable)
        for c in AccessibilityClass.allCases where c.isThisDeviceOnly {
            XCTAssertFalse(k.isAvailable(c), c.rawValue)
            assertKeychainError(.unavailable(c), try k.item(for: Self.key(c)))
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: store.directory + "/other-machine/device.key"),
                       "opening a store must not create a device key")
    }

    func testCopiedStoreOnMachineWithItsOwnDeviceKeyOpensWithPassphrase() throws {
        try makeStoreWithEveryClass()
        // The other machine has a device key of its own: made by creating a store there.
        let otherKey = store.directory + "/other-machine/device.key"
        _ = try Keychain.create(at: store.directory + "/other-machine/own.db", passphrase: secure("x"),
                                scrypt: TempStore.scrypt, deviceKeyPath: otherKey)
        let k = try store.open(deviceKeyPath: otherKey)
        XCTAssertEqual(try k.allItems().items.count, 0)
        try k.unlock(passphrase: secure(TempStore.passphrase))
        XCTAssertEqual(k.state, .unlocked)
        let portable = Set(AccessibilityClass.allCases.filter { !$0.isThisDeviceOnly })
        XCTAssertEqual(try listedClasses(k), portable)
        try assertReadable(k, portable)
        for c in AccessibilityClass.allCases where c.isThisDeviceOnly {
            assertKeychainError(.unavailable(c), try k.item(for: Self.key(c)))
        }
    }

    func testDeviceKeyFileIsPrivateAndNotInTheStore() throws {
        _ = try store.create()
        let attrs = try FileManager.default.attributesOfItem(atPath: store.deviceKeyPath)
        XCTAssertEqual((attrs[.posixPermissions] as? NSNumber)?.intValue, 0o600)
        XCTAssertEqual((attrs[.size] as? NSNumber)?.intValue, AESGCM.keyBytes)
        let storeAttrs = try FileManager.default.attributesOfItem(atPath: store.path)
        XCTAssertEqual((storeAttrs[.posixPermissions] as? NSNumber)?.intValue, 0o600)
        let deviceKey = try Data(contentsOf: URL(fileURLWithPath: store.deviceKeyPath))
        for file in [store.path, store.path + "-wal"] {
            guard let data = FileManager.default.contents(atPath: file) else { continue }
            XCTAssertNil(data.range(of: deviceKey), "\(file) contains the device key")
        }
    }
}
