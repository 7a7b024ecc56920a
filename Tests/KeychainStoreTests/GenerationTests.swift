import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStore
import XCTest

/// A passphrase change starts a new generation of class keys (DESIGN §3, issue 8).
final class GenerationTests: XCTestCase {
    var store: TempStore!

    override func setUpWithError() throws { store = try TempStore() }
    override func tearDown() { store = nil }

    /// Replaces the store's keybag and key-derivation data with those of an older copy, as an
    /// attacker with that copy and its passphrase would: the rows stay today's.
    func graftKeybag(from copy: String) throws {
        try store.sql("""
            ATTACH '\(copy)' AS old;
            DELETE FROM wrapped_keys; INSERT INTO wrapped_keys SELECT * FROM old.wrapped_keys;
            INSERT OR REPLACE INTO meta SELECT * FROM old.meta WHERE name IN ('salt', 'scrypt', 'kdf_check', 'key_generation');
            """)
    }

    func testAnOldCopyWithTheOldPassphraseOpensNoItemAddedAfterTheChange() throws {
        let k = try store.create()
        try add(k, genericKey("svc", "before"), "old-secret")
        let copy = store.directory + "/old-copy.db"
        try store.sql("VACUUM INTO '\(copy)'")
        try k.changePassphrase(old: secure(TempStore.passphrase), new: secure("new pass"))
        try add(k, genericKey("svc", "after"), "new-secret")
        try add(k, genericKey("svc", "after-always"), "new-always", class: .always)

        try graftKeybag(from: copy)
        let attacker = try store.open()
        try attacker.unlock(passphrase: secure(TempStore.passphrase))
        let before = try XCTUnwrap(try attacker.item(for: genericKey("svc", "before")))
        XCTAssertEqual(text(try attacker.secret(of: before)), "old-secret", "what the old copy held, it still opens")
        for name in ["after", "after-always"] {
            XCTAssertThrowsError(try attacker.item(for: genericKey("svc", name)).map { try attacker.secret(of: $0) },
                                 "\(name) was sealed under the new generation")
        }
        XCTAssertFalse(try attacker.allItems().items.contains { $0.key.account.hasPrefix("after") })
    }

    func testOlderItemsReadAfterSeveralChangesAndAlwaysItemsBeforeFirstUnlock() throws {
        let k = try store.create()
        var passphrase = TempStore.passphrase
        for round in 0..<3 {
            for c in AccessibilityClass.allCases { try add(k, genericKey("g\(round)", c.rawValue), "s\(round)-\(c.rawValue)", class: c) }
            try k.changePassphrase(old: secure(passphrase), new: secure("pass \(round)"))
            passphrase = "pass \(round)"
        }
        XCTAssertEqual(k.keyGeneration, 4)
        let boot = try store.open()
        for round in 0..<3 {
            for c in [AccessibilityClass.always, .alwaysThisDeviceOnly] {
                let item = try XCTUnwrap(try boot.item(for: genericKey("g\(round)", c.rawValue)))
                XCTAssertEqual(text(try boot.secret(of: item)), "s\(round)-\(c.rawValue)", "before first unlock")
            }
        }
        try boot.unlock(passphrase: secure(passphrase))
        for round in 0..<3 {
            for c in AccessibilityClass.allCases {
                let item = try XCTUnwrap(try boot.item(for: genericKey("g\(round)", c.rawValue)))
                XCTAssertEqual(item.sealed.generation, Int64(round + 1))
                XCTAssertEqual(text(try boot.secret(of: item)), "s\(round)-\(c.rawValue)")
            }
        }
        XCTAssertEqual(try boot.verify().problems, [])
    }

    func testRekeyResealsEveryItemUnderTheNewestGenerationAndDropsTheOldKeys() throws {
        let k = try store.create()
        for c in AccessibilityClass.allCases { try add(k, genericKey("svc", c.rawValue), "s-\(c.rawValue)", class: c) }
        let created = try k.allItems().items.map(\.record.attributes.modified)
        try k.changePassphrase(old: secure(TempStore.passphrase), new: secure("new pass"))
        var reports: [(Int, Int)] = []
        XCTAssertEqual(try k.rekey(batch: 3) { reports.append(($0, $1)) }, AccessibilityClass.allCases.count)
        XCTAssertEqual(reports.last.map { [$0.0, $0.1] }, [7, 7])
        XCTAssertEqual(reports.count, 4, "0, 3, 6, 7")
        XCTAssertEqual(try store.sql("SELECT DISTINCT generation FROM items"), "2")
        XCTAssertEqual(try store.sql("SELECT DISTINCT generation FROM wrapped_keys"), "2", "generation 1's keys are gone")
        let reopened = try store.openUnlocked(passphrase: "new pass")
        for c in AccessibilityClass.allCases {
            XCTAssertEqual(text(try reopened.secret(of: XCTUnwrap(try reopened.item(for: genericKey("svc", c.rawValue))))), "s-\(c.rawValue)")
        }
        XCTAssertEqual(try reopened.allItems().items.map(\.record.attributes.modified), created, "re-sealing is no modification")
        XCTAssertEqual(try reopened.verify().problems, [])
    }

    func testAChangeTouchesNoItemRow() throws {
        let k = try store.create()
        for i in 0..<20 { try add(k, genericKey("svc", "a\(i)"), "x") }
        let rows = try store.sql("SELECT id, version, generation, hex(secret) FROM items ORDER BY id")
        try k.changePassphrase(old: secure(TempStore.passphrase), new: secure("new pass"))
        XCTAssertEqual(try store.sql("SELECT id, version, generation, hex(secret) FROM items ORDER BY id"), rows)
        XCTAssertEqual(try store.sql("SELECT COUNT(*) FROM wrapped_keys WHERE wrapping = 'n'"), "7", "one successor row per class")
    }

    func testAWriterThatUnlockedBeforeAChangeIsRefused() throws {
        let k = try store.create()
        let other = try store.openUnlocked()
        try k.changePassphrase(old: secure(TempStore.passphrase), new: secure("new pass"))
        assertKeychainError({ if case .io = $0 { true } else { false } }, "io",
                            try add(other, genericKey("svc", "late"), "sealed under the old generation"))
    }
}

/// The keybag follows its rules, or the store is an integrity failure (issue 8).
final class KeybagPolicyTests: XCTestCase {
    var store: TempStore!

    override func setUpWithError() throws { store = try TempStore() }
    override func tearDown() { store = nil }

    func testARowTheRulesDoNotAllowIsRefusedAtOpen() throws {
        _ = try store.create()
        try store.sql("INSERT INTO wrapped_keys SELECT 'class.when-unlocked', 'd', generation, blob FROM wrapped_keys WHERE name = 'class.always' AND wrapping = 'd'")
        assertKeychainError(isIntegrityFailure, "integrityFailure", try store.open())
    }

    func testARowMovedFromAnotherStoreDoesNotOpen() throws {
        _ = try store.create()
        // A second store on the same machine: the same device key.
        let other = store.directory + "/other/keychain.db"
        _ = try Keychain.create(at: other, passphrase: secure(TempStore.passphrase), scrypt: TempStore.scrypt,
                                deviceKeyPath: store.deviceKeyPath)
        try store.sql("ATTACH '\(other)' AS o; UPDATE wrapped_keys SET blob = (SELECT blob FROM o.wrapped_keys WHERE name = 'class.always' AND wrapping = 'd') WHERE name = 'class.always' AND wrapping = 'd'")
        let k = try store.open()
        XCTAssertFalse(k.isAvailable(.always), "the moved row opens nothing before first unlock")
        assertKeychainError(isIntegrityFailure, "integrityFailure", try k.unlock(passphrase: secure(TempStore.passphrase)))
    }

    func testAReplacedWrappingOfAlwaysIsDetectedAtUnlock() throws {
        _ = try store.create()
        // Two wrappings of one class key must agree.
        try store.sql("UPDATE wrapped_keys SET blob = (SELECT blob FROM wrapped_keys WHERE name = 'class.always-this-device-only') WHERE name = 'class.always' AND wrapping = 'd'")
        assertKeychainError(isIntegrityFailure, "integrityFailure", try store.openUnlocked())
    }

    func testAFlippedPassphraseFlagIsRefused() throws {
        _ = try store.create()
        try store.sql("UPDATE meta SET value = X'00' WHERE name = 'has_passphrase'")
        assertKeychainError(isIntegrityFailure, "integrityFailure", try store.open())
    }

    func testVerifyNamesEachMissingRow() throws {
        let k = try store.create()
        try add(k, genericKey("svc", "a"), "x", class: .always)
        try store.sql("DELETE FROM wrapped_keys WHERE name = 'class.always' AND wrapping = 'd'")
        try store.sql("DELETE FROM wrapped_keys WHERE name = 'class.when-unlocked'")
        let problems = try store.openUnlocked().verify().problems
        XCTAssertEqual(problems.filter { $0.itemID == 0 }.map(\.reason), [
            "the keybag entry 'class.always' wrapped by 'd' is missing (deleted?)",
            "the keybag entry 'class.when-unlocked' wrapped by 'p' is missing (deleted?)",
        ])
        XCTAssertTrue(problems.allSatisfy { $0.description.hasPrefix("store: ") })
    }

    func testDamagedKDFDataIsNoWrongPassphraseAndCountsNothing() throws {
        _ = try store.create()
        try store.sql("UPDATE meta SET value = randomblob(16) WHERE name = 'salt'")
        let k = try store.open()
        assertKeychainError(isNotAKeychain, "notAKeychain", try k.unlock(passphrase: secure(TempStore.passphrase)))
        XCTAssertEqual(try k.failureRecord().failures, 0)
    }

    func testAFailureTimeInTheFutureCountsAsNow() throws {
        let k = try store.create()
        let future = Int(Date().timeIntervalSince1970) + 10 * 365 * 86400
        try store.sql("INSERT OR REPLACE INTO meta VALUES ('failed_unlocks', CAST('3' AS BLOB)), ('last_failed_unlock', CAST('\(future)' AS BLOB))")
        XCTAssertLessThanOrEqual(try k.failureRecord().lastFailure, Int(Date().timeIntervalSince1970))
        assertKeychainError({ if case .tooManyAttempts(let s) = $0 { s <= 5 } else { false } }, "a wait of at most 5 s",
                            try k.unlock(passphrase: secure(TempStore.passphrase)))
    }
}

/// Rollback and replay of rows, and of the whole store (issue 8).
final class RollbackTests: XCTestCase {
    var store: TempStore!

    override func setUpWithError() throws { store = try TempStore() }
    override func tearDown() { store = nil }

    func isRollback(_ e: KeychainError) -> Bool { if case .integrityFailure = e { true } else { false } }

    func testAReplayedRowIsRefusedAtOpenAndAcceptedOnRequest() throws {
        let k = try store.create()
        let item = try add(k, genericKey("svc", "a"), "v1")
        let saved = store.directory + "/row.db"
        try store.sql("ATTACH '\(saved)' AS s; CREATE TABLE s.r AS SELECT * FROM items WHERE id = \(item.id)")
        try k.save(genericKey("svc", "a"), secret: secure("v2"), updateExisting: true)
        try store.sql("ATTACH '\(saved)' AS s; DELETE FROM items WHERE id = \(item.id); INSERT INTO items SELECT * FROM s.r")
        assertKeychainError(isRollback, "integrity failure", try store.open())
        let accepted = try Keychain(openingAt: store.path, deviceKeyPath: store.deviceKeyPath, acceptRollback: true)
        try accepted.unlock(passphrase: secure(TempStore.passphrase))
        XCTAssertEqual(text(try accepted.secret(of: XCTUnwrap(try accepted.item(for: genericKey("svc", "a"))))), "v1")
        XCTAssertNoThrow(try store.open(), "once accepted, the store is the store of record")
    }

    func testARemovedRowIsRefused() throws {
        let k = try store.create()
        try add(k, genericKey("svc", "a"), "x")
        try add(k, genericKey("svc", "b"), "y")
        try store.sql("DELETE FROM items WHERE id = (SELECT MAX(id) FROM items)")
        assertKeychainError(isRollback, "integrity failure", try store.open())
    }

    func testAWholeStoreRolledBackIsRefused() throws {
        let k = try store.create()
        try add(k, genericKey("svc", "a"), "x")
        let backup = store.directory + "/backup.db"
        try store.sql("VACUUM INTO '\(backup)'")
        try add(k, genericKey("svc", "b"), "y")
        try FileManager.default.removeItem(atPath: store.path)
        try FileManager.default.copyItem(atPath: backup, toPath: store.path)
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: store.path + suffix) }
        chmod(store.path, 0o600)  // VACUUM INTO makes it 0644, which an open refuses
        assertKeychainError(isRollback, "integrity failure", try store.open())
    }

    func testAStoreCopiedElsewhereIsAStoreOfItsOwn() throws {
        let k = try store.create()
        try add(k, genericKey("svc", "a"), "x")
        let copy = store.directory + "/copy/keychain.db"
        try FileManager.default.createDirectory(atPath: store.directory + "/copy", withIntermediateDirectories: true)
        try store.sql("VACUUM INTO '\(copy)'")
        chmod(copy, 0o600)  // VACUUM INTO makes it 0644, which an open refuses
        let c = try Keychain(openingAt: copy, deviceKeyPath: store.deviceKeyPath)
        try c.unlock(passphrase: secure(TempStore.passphrase))
        for i in 0..<3 { try add(c, genericKey("svc", "c\(i)"), "x") }
        XCTAssertNoThrow(try store.open(), "the original is not older than itself")
    }

    func testTheLedgerTagCannotBeForgedWithoutTheKey() throws {
        let k = try store.create()
        try add(k, genericKey("svc", "a"), "x")
        try store.sql("UPDATE meta SET value = zeroblob(80) WHERE name = 'rows_state'")
        assertKeychainError(isRollback, "integrity failure", try store.open())
    }

    /// The ledger is read straight from SQLite: a value of another type is a damaged ledger,
    /// never "no ledger yet", which would have the rows as they are taken for the truth.
    func testALedgerOfAnotherTypeIsRefusedNotTakenAsMissing() throws {
        let k = try store.create()
        try add(k, genericKey("svc", "a"), "x")
        try store.sql("UPDATE meta SET value = 7 WHERE name = 'rows_state'")
        assertKeychainError(isRollback, "integrity failure", try store.open())
        try store.sql("UPDATE meta SET value = 7.5 WHERE name = 'rows_state'")
        assertKeychainError(isRollback, "integrity failure", try store.open())
    }
}

/// Extras are sealed under the item key, like the secret.
final class ExtrasTests: StoreTestCase {
    /// A row's nonces are drawn together (one RAND_bytes call per seal of a row): every seal,
    /// of every row and every version, still has its own.
    func testEverySealHasItsOwnNonce() throws {
        let key = try internetKey("git.example", account: "dev")
        try k.save(key, secret: secure("pw"), extras: secure("e1"), updateExisting: false)
        try add(k, genericKey("svc", "a"), "x")
        var nonces: [String] = []
        for round in 0..<3 {
            try k.save(key, secret: secure("pw\(round)"), updateExisting: true)
            let rows = try store.sql("""
                SELECT hex(substr(wrapped_key, 1, 12)), hex(substr(attributes, 1, 12)), hex(substr(secret, 1, 12)),
                       coalesce(hex(substr(extras, 1, 12)), '') FROM items
                """)
            for field in rows.split(whereSeparator: { $0 == "|" || $0 == "\n" }) where !field.isEmpty { nonces.append(String(field)) }
        }
        // 3 rounds x (the internet item's 4 seals + the generic item's 3); the generic row is the same each round.
        XCTAssertEqual(nonces.count, 3 * 7)
        XCTAssertEqual(Set(nonces).count, 3 * 4 + 3, "\(nonces)")
        XCTAssertTrue(nonces.allSatisfy { $0.count == 24 })
    }

    func testExtrasFollowTheSecretsLockState() throws {
        let key = try internetKey("git.example", account: "dev")
        try k.save(key, secret: secure("pw"), extras: secure("oauth_refresh_token=tok\n"), updateExisting: false)
        let item = try XCTUnwrap(try k.item(for: key))
        XCTAssertEqual(try k.extras(of: item).map(text), "oauth_refresh_token=tok\n")
        XCTAssertNil(item.record.attributes.generic)
        k.lock()
        assertKeychainError(.unavailable(.whenUnlocked), try k.extras(of: item))
    }

    func testUpdatesKeepOrDropExtras() throws {
        let key = try internetKey("git.example", account: "dev")
        try k.save(key, secret: secure("pw"), extras: secure("e1"), updateExisting: false)
        try k.save(key, secret: secure("pw2"), updateExisting: true)
        XCTAssertEqual(try k.extras(of: XCTUnwrap(try k.item(for: key))).map(text), "e1", "nil keeps them")
        try k.save(key, secret: secure("pw3"), extras: SecureBytes(), updateExisting: true)
        XCTAssertNil(try k.extras(of: XCTUnwrap(try k.item(for: key))), "empty drops them")
    }

    func testARenameOntoAnItemKeepsItsExtras() throws {
        let key = try internetKey("git.example", account: "dev")
        let target = try k.save(key, secret: secure("pw"), extras: secure("e1"), updateExisting: false)
        let temp = try k.save(try internetKey("git.example", account: "tmp"), secret: secure("new"), updateExisting: false)
        var record = target.record
        record.key = key
        let moved = try k.update(temp, to: record, replacing: target)
        XCTAssertEqual(try k.extras(of: moved).map(text), "e1")
        XCTAssertEqual(text(try k.secret(of: moved)), "new")
    }

    func testTamperedExtrasFailVerify() throws {
        let key = try internetKey("git.example", account: "dev")
        let item = try k.save(key, secret: secure("pw"), extras: secure("e1"), updateExisting: false)
        try store.sql("UPDATE items SET extras = substr(extras, 1, length(extras) - 1) || X'00' WHERE id = \(item.id)")
        XCTAssertEqual(try k.verify().problems.map(\.itemID), [item.id])
    }
}

/// A store made before generations, the ledger and sealed extras opens and migrates.
final class MigrationTests: XCTestCase {
    var store: TempStore!

    override func setUpWithError() throws {
        store = try TempStore.fixture(database: "legacy-store.db", deviceKey: "legacy-device.key")
    }
    override func tearDown() { store = nil }

    func testALegacyStoreOpensReadsAndMovesToGenerationOne() throws {
        let boot = try store.open()
        XCTAssertEqual(boot.keyGeneration, 0)
        let always = try XCTUnwrap(try boot.item(for: genericKey("legacy", "always")))
        XCTAssertEqual(text(try boot.secret(of: always)), "secret-always", "before first unlock, as before")
        try boot.unlock(passphrase: secure("legacy pass"))
        XCTAssertEqual(boot.keyGeneration, 1, "the first full unlock starts generation 1")
        for c in AccessibilityClass.allCases {
            let item = try XCTUnwrap(try boot.item(for: genericKey("legacy", c.rawValue)))
            XCTAssertEqual(item.sealed.generation, 0)
            XCTAssertEqual(text(try boot.secret(of: item)), "secret-\(c.rawValue)")
        }
        try add(boot, genericKey("new", "item"), "fresh", class: .whenUnlockedThisDeviceOnly)
        XCTAssertEqual(try boot.verify().problems, [])
        let again = try store.openUnlocked(passphrase: "legacy pass")
        XCTAssertEqual(text(try again.secret(of: XCTUnwrap(try again.item(for: genericKey("new", "item"))))), "fresh")
        XCTAssertEqual(text(try again.secret(of: XCTUnwrap(try again.item(for: genericKey("legacy", "when-unlocked"))))),
                       "secret-when-unlocked")
        XCTAssertEqual(try again.rekey(), 8)
        XCTAssertEqual(try store.sql("SELECT DISTINCT generation FROM items"), "1")
        XCTAssertEqual(try store.openUnlocked(passphrase: "legacy pass").verify().problems, [])
    }

    func testALegacyStoreWithAWrongPassphraseStaysAsItWas() throws {
        let k = try store.open()
        assertKeychainError(.wrongPassphrase, try k.unlock(passphrase: secure("wrong")))
        XCTAssertEqual(try store.sql("SELECT DISTINCT generation FROM wrapped_keys"), "0")
    }
}
