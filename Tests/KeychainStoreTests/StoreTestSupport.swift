import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStore
import XCTest

/// A store in its own temporary directory, with its own device key.
final class TempStore {
    let directory: String
    let path: String
    let deviceKeyPath: String
    static let scrypt = ScryptParameters(logN: 10)
    static let passphrase = "correct horse"

    init() throws {
        let base = FileManager.default.temporaryDirectory.path + "/keychainfs-unit-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        directory = base
        path = base + "/store/keychain.db"
        deviceKeyPath = base + "/state/device.key"
    }

    deinit { try? FileManager.default.removeItem(atPath: directory) }

    /// A temporary store that is a copy of one kept in Fixtures (its database and device key).
    static func fixture(database: String, deviceKey: String) throws -> TempStore {
        let store = try TempStore()
        let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures")
        for dir in ["store", "state"] {
            try FileManager.default.createDirectory(atPath: store.directory + "/" + dir, withIntermediateDirectories: true)
        }
        try FileManager.default.copyItem(atPath: fixtures.appendingPathComponent(database).path, toPath: store.path)
        try FileManager.default.copyItem(atPath: fixtures.appendingPathComponent(deviceKey).path, toPath: store.deviceKeyPath)
        // As `init` leaves them: a store others can read is refused (StoreFiles), a device key
        // too (PrivateFile); git checks the fixtures out 0644.
        chmod(store.path, 0o600)
        chmod(store.deviceKeyPath, 0o600)
        return store
    }

    func create(passphrase: String? = TempStore.passphrase) throws -> Keychain {
        try Keychain.create(at: path, passphrase: passphrase.map(secure), scrypt: Self.scrypt, deviceKeyPath: deviceKeyPath)
    }

    /// Opens the store as at boot: before first unlock.
    func open(deviceKeyPath: String? = nil) throws -> Keychain {
        try Keychain(openingAt: path, deviceKeyPath: deviceKeyPath ?? self.deviceKeyPath)
    }

    func openUnlocked(passphrase: String = TempStore.passphrase) throws -> Keychain {
        let k = try open()
        try k.unlock(passphrase: secure(passphrase))
        return k
    }

    /// Runs SQL on the store with the sqlite3 command-line tool and returns its output.
    @discardableResult
    func sql(_ statement: String) throws -> String { try runSQLite(path, statement) }
}

func secure(_ text: String) -> SecureBytes { SecureBytes(copying: Array(text.utf8)) }
func text(_ bytes: SecureBytes) -> String { String(decoding: bytes.unprotectedArray, as: UTF8.self) }

struct SQLiteCLIError: Error, CustomStringConvertible { var description: String }

func sqlite3Path() throws -> String {
    for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
        let candidate = "\(dir)/sqlite3"
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
    }
    throw SQLiteCLIError(description: "the sqlite3 command-line tool is not installed (apt-get install sqlite3)")
}

@discardableResult
func runSQLite(_ db: String, _ statement: String) throws -> String {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: try sqlite3Path())
    p.arguments = ["-batch", db, statement]
    let out = Pipe(), err = Pipe()
    p.standardOutput = out
    p.standardError = err
    try p.run()
    let data = out.fileHandleForReading.readDataToEndOfFile()
    let errData = err.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    guard p.terminationStatus == 0 else {
        throw SQLiteCLIError(description: "sqlite3 failed: \(String(decoding: errData, as: UTF8.self))")
    }
    return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
}

func genericKey(_ service: String, _ account: String, group: String = "") throws -> ItemKey {
    .generic(try GenericPasswordKey(service: service, account: account, accessGroup: group))
}

func internetKey(_ server: String, port: UInt16 = 0, path: String = "", protocol proto: InternetProtocol = .https,
                 auth: AuthenticationType = .default, domain: String = "", account: String, group: String = "") throws -> ItemKey {
    .internet(try InternetPasswordKey(server: server, port: port, path: path, protocol: proto, authenticationType: auth,
                                      securityDomain: domain, account: account, accessGroup: group))
}

@discardableResult
func add(_ k: Keychain, _ key: ItemKey, _ secret: String, class c: AccessibilityClass = .default) throws -> KeychainItem {
    try k.save(key, secret: secure(secret), defaultClass: c, updateExisting: false)
}

func assertKeychainError<T>(_ expected: KeychainError, _ body: @autoclosure () throws -> T,
                            file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertThrowsError(try body(), file: file, line: line) { error in
        XCTAssertEqual(error as? KeychainError, expected, "\(error)", file: file, line: line)
    }
}

/// Matches on the case only, for errors that carry a message.
func assertKeychainError<T>(_ matches: (KeychainError) -> Bool, _ what: String, _ body: @autoclosure () throws -> T,
                            file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertThrowsError(try body(), file: file, line: line) { error in
        guard let e = error as? KeychainError, matches(e) else {
            return XCTFail("expected \(what), got \(error)", file: file, line: line)
        }
    }
}

func isIntegrityFailure(_ e: KeychainError) -> Bool { if case .integrityFailure = e { true } else { false } }
func isNotAKeychain(_ e: KeychainError) -> Bool { if case .notAKeychain = e { true } else { false } }
func isNoSuchStore(_ e: KeychainError) -> Bool { if case .noSuchStore = e { true } else { false } }
func isInvalidInput(_ e: KeychainError) -> Bool { if case .invalidInput = e { true } else { false } }
func isTooManyAttempts(_ e: KeychainError) -> Bool { if case .tooManyAttempts = e { true } else { false } }

/// A test case with a fresh, unlocked store for each test.
class StoreTestCase: XCTestCase {
    var store: TempStore!
    var k: Keychain!

    /// A record for batches and imports, with a fixed creation date unless given.
    func record(_ key: ItemKey, class c: AccessibilityClass = .default, label: String? = nil,
                created: Date = Date(timeIntervalSince1970: 1_000_000)) -> ItemRecord {
        ItemRecord(key: key, attributes: ItemAttributes(AttributeValues { $0.label = label }, accessible: c, created: created))
    }

    func batch(_ items: [(ItemRecord, String)]) -> ItemBatch {
        var b = ItemBatch()
        for (r, s) in items { b.append(r, secret: secure(s)) }
        return b
    }

    /// The stored secret of `key`, as text.
    func secret(_ key: ItemKey) throws -> String {
        text(try k.secret(of: XCTUnwrap(try k.item(for: key))))
    }

    override func setUpWithError() throws {
        store = try TempStore()
        k = try store.create()
    }

    override func tearDown() { k = nil; store = nil }
}
