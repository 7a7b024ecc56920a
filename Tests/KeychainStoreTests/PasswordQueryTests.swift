import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStore
import XCTest

final class GenericPasswordQueryTests: XCTestCase {
    var store: TempStore!
    var k: Keychain!
    var github: GenericPasswordQuery!

    override func setUpWithError() throws {
        store = try TempStore()
        k = try store.create()
        github = GenericPasswordQuery(k, service: "github")
    }
    override func tearDown() { github = nil; k = nil; store = nil }

    func testSetThenGet() throws {
        try github.set("s3cret", for: "alice")
        XCTAssertEqual(try github.get(for: "alice").map(text), "s3cret")
        XCTAssertEqual(try k.item(for: genericKey("github", "alice"))?.key, try genericKey("github", "alice"))
    }

    func testGetOfMissingAccountIsNil() throws {
        XCTAssertNil(try github.get(for: "nobody"))
        XCTAssertNil(try github.attributes(for: "nobody"))
    }

    func testSetUpdatesExistingItem() throws {
        try github.set("one", for: "alice", attributes: AttributeChanges { $0.label = "GitHub" })
        let created = try XCTUnwrap(try github.attributes(for: "alice")).created
        try github.set(SecureBytes(copying: Array("two".utf8)), for: "alice")
        XCTAssertEqual(try github.get(for: "alice").map(text), "two")
        let attrs = try XCTUnwrap(try github.attributes(for: "alice"))
        XCTAssertEqual(attrs.label, "GitHub")
        XCTAssertEqual(attrs.created, created)
        XCTAssertEqual(try k.allItems().items.count, 1)
    }

    func testAttributes() throws {
        try github.set("x", for: "alice", attributes: AttributeChanges(accessible: .afterFirstUnlock) { $0.label = "L"; $0.comment = "C" })
        let attrs = try XCTUnwrap(try github.attributes(for: "alice"))
        XCTAssertEqual(attrs.label, "L")
        XCTAssertEqual(attrs.comment, "C")
        XCTAssertEqual(attrs.accessible, .afterFirstUnlock)
    }

    func testRemove() throws {
        try github.set("x", for: "alice")
        try github.set("y", for: "bob")
        try github.remove(for: "alice")
        XCTAssertNil(try github.get(for: "alice"))
        XCTAssertEqual(try github.get(for: "bob").map(text), "y")
    }

    func testRemoveOfMissingAccountIsItemNotFound() {
        assertKeychainError(.itemNotFound, try github.remove(for: "nobody"))
    }

    func testRemoveAllRemovesOnlyThisService() throws {
        try github.set("x", for: "alice")
        try github.set("y", for: "bob")
        let gitlab = GenericPasswordQuery(k, service: "gitlab")
        try gitlab.set("z", for: "alice")
        let grouped = GenericPasswordQuery(k, service: "github", accessGroup: "team")
        try grouped.set("w", for: "alice")
        XCTAssertEqual(try github.removeAll(), 2)
        XCTAssertEqual(try github.accounts(), [])
        XCTAssertEqual(try gitlab.get(for: "alice").map(text), "z")
        XCTAssertEqual(try grouped.get(for: "alice").map(text), "w")
        XCTAssertEqual(try github.removeAll(), 0)
    }

    func testAccountsAreInOrder() throws {
        for a in ["carol", "alice", "bob"] { try github.set("x", for: a) }
        XCTAssertEqual(try github.accounts(), ["alice", "bob", "carol"])
    }

    func testAccessGroupsAreSeparate() throws {
        let team = GenericPasswordQuery(k, service: "github", accessGroup: "team")
        try github.set("personal", for: "alice")
        try team.set("shared", for: "alice")
        XCTAssertEqual(try github.get(for: "alice").map(text), "personal")
        XCTAssertEqual(try team.get(for: "alice").map(text), "shared")
    }

    func testBadNamesMapToTypedErrors() {
        assertKeychainError(isInvalidInput, "invalidInput", try GenericPasswordQuery(k, service: "").set("x", for: "a"))
        assertKeychainError({ if case .nameTooLong = $0 { true } else { false } }, "nameTooLong",
                            try github.set("x", for: String(repeating: "a", count: 256)))
    }
}

final class InternetPasswordQueryTests: XCTestCase {
    var store: TempStore!
    var k: Keychain!
    var site: InternetPasswordQuery!

    override func setUpWithError() throws {
        store = try TempStore()
        k = try store.create()
        site = InternetPasswordQuery(k, server: "example.org")
    }
    override func tearDown() { site = nil; k = nil; store = nil }

    func testSetThenGetUsesTheWellKnownPort() throws {
        try site.set("web", for: "alice")
        XCTAssertEqual(try site.get(for: "alice").map(text), "web")
        let item = try XCTUnwrap(try k.item(for: internetKey("example.org", port: 443, account: "alice")))
        guard case .internet(let key) = item.key else { return XCTFail("not an internet item") }
        XCTAssertEqual(key.port, 443)
        XCTAssertEqual(key.protocol, .https)
    }

    func testDifferentProtocolsAreDifferentItems() throws {
        let ssh = InternetPasswordQuery(k, server: "example.org", protocol: .ssh)
        try site.set("web", for: "alice")
        try ssh.set("shell", for: "alice")
        XCTAssertEqual(try site.get(for: "alice").map(text), "web")
        XCTAssertEqual(try ssh.get(for: "alice").map(text), "shell")
    }

    func testSetUpdatesAndAttributes() throws {
        try site.set("one", for: "alice", attributes: AttributeChanges { $0.comment = "first" })
        try site.set("two", for: "alice")
        XCTAssertEqual(try site.get(for: "alice").map(text), "two")
        XCTAssertEqual(try site.attributes(for: "alice")?.comment, "first")
        XCTAssertEqual(try site.accounts(), ["alice"])
    }

    func testRemoveAndRemoveAll() throws {
        let other = InternetPasswordQuery(k, server: "example.org", port: 8443, path: "/api/")
        try site.set("x", for: "alice")
        try site.set("y", for: "bob")
        try other.set("z", for: "alice")
        try site.remove(for: "alice")
        XCTAssertNil(try site.get(for: "alice"))
        assertKeychainError(.itemNotFound, try site.remove(for: "alice"))
        XCTAssertEqual(try site.removeAll(), 1)
        XCTAssertEqual(try other.get(for: "alice").map(text), "z")
        XCTAssertEqual(try InternetPasswordQuery(k, server: "example.org", port: 8443, path: "api").get(for: "alice").map(text), "z")
    }

    func testBadServerIsInvalidInput() {
        assertKeychainError(isInvalidInput, "invalidInput", try InternetPasswordQuery(k, server: "").set("x", for: "a"))
    }
}
