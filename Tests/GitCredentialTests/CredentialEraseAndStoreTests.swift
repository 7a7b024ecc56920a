import XCTest
import KeychainCrypto
import KeychainModel
@testable import GitCredential

final class CredentialEraseTests: XCTestCase {
    private let item = try! InternetPasswordKey(server: "example.com", path: "repo.git", protocol: .https, account: "alice")
    private let secret: SecureBytes = "s3cret"

    private func request(host: String = "example.com", path: String? = nil, username: String? = nil,
                         password: SecureBytes? = nil) -> CredentialRequest {
        CredentialRequest(protocol: "https", host: host, path: path, username: username, password: password)
    }

    func testErasesMatchWithoutPassword() {
        XCTAssertTrue(request().erases(key: item, secret: secret))
        XCTAssertTrue(request(path: "/repo.git", username: "alice").erases(key: item, secret: secret))
    }

    func testErasesWhenPasswordEqualsSecret() {
        XCTAssertTrue(request(username: "alice", password: "s3cret").erases(key: item, secret: secret))
    }

    func testKeepsWhenPasswordDiffers() {
        XCTAssertFalse(request(username: "alice", password: "old").erases(key: item, secret: secret))
        XCTAssertFalse(request(password: "s3cre").erases(key: item, secret: secret))
        XCTAssertFalse(request(password: "s3cret!").erases(key: item, secret: secret))
        XCTAssertFalse(request(password: "").erases(key: item, secret: secret), "empty password is a password")
    }

    func testEmptyPasswordErasesEmptySecret() {
        XCTAssertTrue(request(password: "").erases(key: item, secret: SecureBytes()))
    }

    /// A secret the keychain could not read (its class locked) never equals a password, not
    /// even an empty one; without a password the match alone decides.
    func testUnreadableSecret() {
        XCTAssertFalse(request(password: "").erases(key: item, secret: nil))
        XCTAssertFalse(request(password: "s3cret").erases(key: item, secret: nil))
        XCTAssertTrue(request(username: "alice").erases(key: item, secret: nil))
    }

    func testKeepsNonMatchingItems() {
        XCTAssertFalse(request(username: "bob").erases(key: item, secret: secret))
        XCTAssertFalse(request(path: "other.git").erases(key: item, secret: secret))
        XCTAssertFalse(request(host: "example.com:8443").erases(key: item, secret: secret))
        XCTAssertFalse(request(host: "example.org").erases(key: item, secret: secret))
        var http = request()
        http.protocol = "http"
        XCTAssertFalse(http.erases(key: item, secret: secret))
    }

    func testUnusableRequestErasesNothing() {
        XCTAssertFalse(CredentialRequest().erases(key: item, secret: secret))
        XCTAssertFalse(CredentialRequest(protocol: "https").erases(key: item, secret: secret))
        XCTAssertFalse(request(host: "example.com:0").erases(key: item, secret: secret))
        XCTAssertFalse(CredentialRequest(protocol: "gopher", host: "example.com").erases(key: item, secret: secret))
    }
}

final class CredentialStoreRequestTests: XCTestCase {
    private func full() -> CredentialRequest {
        CredentialRequest(protocol: "https", host: "example.com:8443", path: "/org//repo.git/",
                          username: "alice", password: "s3cret",
                          passwordExpiryUTC: "1700000000", oauthRefreshToken: "refresh")
    }

    func testBuildsKeySecretAndExtras() throws {
        let s = try CredentialStoreRequest(request: full())
        XCTAssertEqual(s.key, try InternetPasswordKey(server: "example.com", port: 8443, path: "org/repo.git",
                                                      protocol: .https, account: "alice"))
        XCTAssertEqual(s.password, "s3cret")
        XCTAssertEqual(s.extras, CredentialExtras(passwordExpiryUTC: "1700000000", oauthRefreshToken: "refresh"))
    }

    func testStoredItemIsFoundByTheMatchingQuery() throws {
        var r = full()
        let s = try CredentialStoreRequest(request: r)
        r.password = nil
        XCTAssertTrue(try CredentialQuery(request: r).matches(key: s.key))
    }

    func testDefaultPortAndNoPath() throws {
        var r = full()
        r.host = "example.com"
        r.path = nil
        let s = try CredentialStoreRequest(request: r)
        XCTAssertEqual(s.key.port, 443)
        XCTAssertEqual(s.key.path, "")
        XCTAssertEqual(s.key.authenticationType, .default)
        XCTAssertEqual(s.key.securityDomain, "")
    }

    func testEmptyUsernameAndPasswordAreStored() throws {
        var r = full()
        r.username = ""
        r.password = ""
        let s = try CredentialStoreRequest(request: r)
        XCTAssertEqual(s.key.account, "")
        XCTAssertEqual(s.password, "")
    }

    func testRequiredFields() {
        let cases: [(WritableKeyPath<CredentialRequest, String?>, String)] = [
            (\.protocol, "protocol"), (\.host, "host"), (\.username, "username"),
        ]
        var noPassword = full()
        noPassword.password = nil
        XCTAssertThrowsError(try CredentialStoreRequest(request: noPassword)) {
            XCTAssertEqual($0 as? CredentialError, .missingField("password"))
        }
        for (field, name) in cases {
            var r = full()
            r[keyPath: field] = nil
            XCTAssertThrowsError(try CredentialStoreRequest(request: r)) {
                XCTAssertEqual($0 as? CredentialError, .missingField(name))
            }
        }
    }

    func testRefusesBadProtocolHostAndNames() {
        var r = full()
        r.protocol = "gopher"
        XCTAssertThrowsError(try CredentialStoreRequest(request: r)) {
            XCTAssertEqual($0 as? CredentialError, .unsupportedProtocol("gopher"))
        }
        r = full()
        r.host = "example.com:99999"
        XCTAssertThrowsError(try CredentialStoreRequest(request: r)) {
            XCTAssertEqual($0 as? CredentialError, .invalidPort("99999"))
        }
        r = full()
        r.username = String(repeating: "u", count: 300)
        XCTAssertThrowsError(try CredentialStoreRequest(request: r)) {
            guard case .invalidItem = $0 as? CredentialError else { return XCTFail("\($0)") }
        }
    }
}
