import Foundation
import KeychainModel
import KeychainStore
import XCTest

/// `StoreProbe` reads a store for `status` and the `mount` preflight and writes nothing.
final class StoreProbeTests: XCTestCase {
    var store: TempStore!

    override func setUpWithError() throws { store = try TempStore() }
    override func tearDown() { store = nil }

    /// Every file in the store's directory, with its bytes and modification time.
    func files() throws -> [String: String] {
        let dir = (store.path as NSString).deletingLastPathComponent
        var out: [String: String] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: dir) {
            let path = dir + "/" + name
            var st = stat()
            XCTAssertEqual(stat(path, &st), 0)
            let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
            out[name] = "\(bytes.hashValue) \(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec)"
        }
        return out
    }

    func testReadsWhetherTheStoreHasAPassphraseAndChangesNoFile() throws {
        _ = try store.create()
        let before = try files()
        XCTAssertTrue(try StoreProbe(readingAt: store.path).hasPassphrase)
        XCTAssertEqual(try files(), before)
    }

    func testAStoreWithoutAPassphrase() throws {
        _ = try store.create(passphrase: nil)
        let before = try files()
        XCTAssertFalse(try StoreProbe(readingAt: store.path).hasPassphrase)
        XCTAssertEqual(try files(), before)
    }

    func testAMissingStore() {
        assertKeychainError(.noSuchStore(store.path), try StoreProbe(readingAt: store.path))
    }

    func testOtherFilesAreNotKeychains() throws {
        let dir = store.directory
        try Data("not a database at all, only text".utf8).write(to: URL(fileURLWithPath: dir + "/text.db"))
        assertKeychainError({ if case .notAKeychain = $0 { true } else { false } }, "notAKeychain",
                            try StoreProbe(readingAt: dir + "/text.db"))
        // An SQLite database of something else: no `meta` table, or not this format.
        _ = try store.create()
        try store.sql("UPDATE meta SET value = CAST('other-format' AS BLOB) WHERE name = 'format'")
        assertKeychainError(.notAKeychain("\(store.path) is not a keychainfs store"), try StoreProbe(readingAt: store.path))
        try store.sql("DROP TABLE meta")
        assertKeychainError(.notAKeychain("\(store.path) is not a keychainfs store"), try StoreProbe(readingAt: store.path))
    }
}
