import XCTest
import KeychainStore

/// The README's library example, as a user of the product writes it (one import).
final class ReadmeExampleTests: XCTestCase {
    func testReadmeExample() throws {
        let dir = NSTemporaryDirectory() + "kcfs-readme-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let pass = SecureBytes(copying: Array("my passphrase".utf8))
        _ = try Keychain.create(at: dir + "/k.db", passphrase: pass, scrypt: ScryptParameters(logN: 10),
                                deviceKeyPath: dir + "/device.key")

        let keychain = try Keychain(openingAt: dir + "/k.db", deviceKeyPath: dir + "/device.key")
        try keychain.unlock(passphrase: SecureBytes(copying: Array("my passphrase".utf8)))
        let github = GenericPasswordQuery(keychain, service: "github")
        try github.set("s3cret", for: "alice")
        let secret = try github.get(for: "alice")
        XCTAssertEqual(secret?.unprotectedArray, Array("s3cret".utf8))
        try github.remove(for: "alice")
        XCTAssertNil(try github.get(for: "alice"))
        let site = InternetPasswordQuery(keychain, server: "example.com", protocol: .https)
        try site.set("hunter2", for: "bob", attributes: AttributeChanges { $0.label = "Example" })
        XCTAssertEqual(try site.attributes(for: "bob")?.label, "Example")
        XCTAssertEqual(try site.accounts(), ["bob"])
        XCTAssertEqual(try site.removeAll(), 1)
    }
}

/// The README shows the example above: each of its statements is in this file, so an edit to
/// one that does not compile is caught here.
final class ReadmeExampleTextTests: XCTestCase {
    func testEveryStatementOfTheReadmeExampleIsCompiledAbove() throws {
        let here = URL(fileURLWithPath: #filePath)
        let readme = try String(contentsOf: here.deletingLastPathComponent().appendingPathComponent("../../README.md"), encoding: .utf8)
        let source = try String(contentsOf: here, encoding: .utf8)
        let block = try XCTUnwrap(readme.components(separatedBy: "## Library").dropFirst().first?
            .components(separatedBy: "```swift\n").dropFirst().first?.components(separatedBy: "```").first)
        let statements = block.split(separator: "\n")
            .map { $0.components(separatedBy: "//")[0].trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && $0 != "import KeychainStore" }
        XCTAssertGreaterThan(statements.count, 5)
        for statement in statements {
            // The test asserts what the README prints, and opens its own temporary store.
            let core = statement.replacingOccurrences(of: "print(", with: "").replacingOccurrences(of: "KeychainLocations.store()", with: "")
            for fragment in core.components(separatedBy: CharacterSet(charactersIn: "(),")).map({ $0.trimmingCharacters(in: .whitespaces) })
            where fragment.count > 3 {
                XCTAssertTrue(source.contains(fragment), "README statement not compiled by the test: \(statement) [\(fragment)]")
            }
        }
    }
}
