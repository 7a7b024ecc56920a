import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStore
import XCTest

/// A directory's default access list (issue 17): kept by name, sealed, and bound to its name.
final class DirectoryAccessTests: XCTestCase {
    var store: TempStore!

    override func setUpWithError() throws { store = try TempStore() }
    override func tearDown() { store = nil }

    /// Flatpak rules: the only kind that pins no file, so that a store test needs none.
    private func list(_ apps: String...) -> AccessList {
        AccessList(rules: apps.map { AccessRule(program: .flatpak($0), executable: nil, script: nil) })
    }

    func testSetReadAndRemoveByNameAndKind() throws {
        let k = try store.create()
        XCTAssertNil(try k.directoryAccess(kind: .generic, name: "github"))
        try k.setDirectoryAccess(list("org.git.Client"), kind: .generic, name: "github")
        try k.setDirectoryAccess(list("org.curl.Client"), kind: .internet, name: "github")
        XCTAssertEqual(try k.directoryAccess(kind: .generic, name: "github"), list("org.git.Client"))
        XCTAssertEqual(try k.directoryAccess(kind: .internet, name: "github"), list("org.curl.Client"), "a server is another directory")
        let reopened = try store.openUnlocked()
        XCTAssertEqual(try reopened.directoryAccess(kind: .generic, name: "github"), list("org.git.Client"), "kept across opens")
        try reopened.setDirectoryAccess(nil, kind: .generic, name: "github")
        XCTAssertNil(try reopened.directoryAccess(kind: .generic, name: "github"))
        try reopened.setDirectoryAccess(.anyProgram, kind: .internet, name: "github")
        XCTAssertNil(try reopened.directoryAccess(kind: .internet, name: "github"), "an empty list removes it")
    }

    /// The attack: the files hold no name or path in plaintext, and a default moved to
    /// another name fails rather than applying there.
    func testSealedAndBoundToItsName() throws {
        let k = try store.create()
        try k.setDirectoryAccess(list("org.bank.SecretApp"), kind: .generic, name: "bank-service")
        try k.setDirectoryAccess(list("org.gnu.Head"), kind: .generic, name: "other")
        for file in [store.path, store.path + "-wal"] {
            guard let bytes = FileManager.default.contents(atPath: file) else { continue }
            for needle in ["bank-service", "org.bank.SecretApp"] {
                XCTAssertNil(bytes.range(of: Data(needle.utf8)), "\(needle) in plaintext in \(file)")
            }
        }
        _ = try store.sql("""
            CREATE TEMP TABLE d AS SELECT * FROM directory_access;
            UPDATE directory_access SET sealed = (SELECT sealed FROM d WHERE d.group_blind <> directory_access.group_blind);
            """)
        let reopened = try store.openUnlocked()
        XCTAssertThrowsError(try reopened.directoryAccess(kind: .generic, name: "bank-service"))
        XCTAssertThrowsError(try reopened.directoryAccess(kind: .generic, name: "other"))
    }
}
