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
        try site.set("hunter2", for: "bob", attributes: AttributeChanges(label: "Example"))
        XCTAssertEqual(try site.attributes(for: "bob")?.label, "Example")
        XCTAssertEqual(try site.accounts(), ["bob"])
        XCTAssertEqual(try site.removeAll(), 1)
    }
}
