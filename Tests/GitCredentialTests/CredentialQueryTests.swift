import XCTest
import KeychainModel
@testable import GitCredential

final class CredentialQueryTests: XCTestCase {
    private func key(server: String = "example.com", port: UInt16 = 0, path: String = "",
                     protocol proto: InternetProtocol = .https, account: String = "alice",
                     authenticationType: AuthenticationType = .default,
                     securityDomain: String = "") throws -> InternetPasswordKey {
        try InternetPasswordKey(server: server, port: port, path: path, protocol: proto,
                                authenticationType: authenticationType, securityDomain: securityDomain,
                                account: account)
    }

    private func query(protocol proto: String? = "https", host: String? = "example.com", path: String? = nil,
                       username: String? = nil) throws -> CredentialQuery {
        try CredentialQuery(request: CredentialRequest(protocol: proto, host: host, path: path, username: username))
    }

    func testMapsRequest() throws {
        let q = try query(host: "example.com:8443", path: "/a//b/", username: "alice")
        XCTAssertEqual(q, CredentialQuery(protocol: .https, server: "example.com", port: 8443,
                                          path: "a/b", account: "alice"))
    }

    func testAbsentPortResolvesToWellKnownPort() throws {
        XCTAssertEqual(try query().port, 443)
        XCTAssertEqual(try query(protocol: "http").port, 80)
        XCTAssertEqual(try query(protocol: "ssh").port, 22)
        XCTAssertEqual(try query(protocol: "ftp").port, 21)
        XCTAssertEqual(try query(protocol: "abcd").port, 0, "no well-known port: stays unspecified")
    }

    func testIPv6Host() throws {
        let q = try query(host: "[::1]:8443")
        XCTAssertEqual(q.server, "::1")
        XCTAssertEqual(q.port, 8443)
        XCTAssertTrue(q.matches(key: try key(server: "::1", port: 8443)))
    }

    func testUnsupportedProtocol() {
        for name in ["gopher", "git", "", "https+x"] {
            XCTAssertThrowsError(try query(protocol: name)) {
                XCTAssertEqual($0 as? CredentialError, .unsupportedProtocol(name))
            }
        }
    }

    func testFourCharacterProtocolIsAccepted() throws {
        XCTAssertEqual(try query(protocol: "abcd").protocol, try InternetProtocol(parsing: "abcd"))
    }

    func testMissingProtocolOrHost() {
        XCTAssertThrowsError(try query(protocol: nil)) {
            XCTAssertEqual($0 as? CredentialError, .missingField("protocol"))
        }
        // git's certificate requests carry only a path.
        XCTAssertThrowsError(try query(protocol: "cert", host: nil, path: "/home/a/cert.p12")) {
            XCTAssertEqual($0 as? CredentialError, .missingField("host"))
        }
    }

    func testBadHostIsAnError() {
        XCTAssertThrowsError(try query(host: "example.com:99999")) {
            XCTAssertEqual($0 as? CredentialError, .invalidPort("99999"))
        }
    }

    func testPathNormalisation() throws {
        let q = try query(path: "/a//b/")
        XCTAssertEqual(q.path, "a/b")
        XCTAssertTrue(q.matches(key: try key(path: "a/b")))
        XCTAssertTrue(try query(path: "a/b").matches(key: try key(path: "/a//b/")))
    }

    func testExactMatch() throws {
        let q = try query(path: "repo.git", username: "alice")
        XCTAssertTrue(q.matches(key: try key(path: "repo.git")))
    }

    func testMisses() throws {
        let q = try query(path: "repo.git", username: "alice")
        XCTAssertFalse(q.matches(key: try key(path: "repo.git", protocol: .http)), "protocol")
        XCTAssertFalse(q.matches(key: try key(server: "example.org", path: "repo.git")), "server")
        XCTAssertFalse(q.matches(key: try key(server: "EXAMPLE.COM", path: "repo.git")), "server is exact")
        XCTAssertFalse(q.matches(key: try key(path: "repo.git", account: "bob")), "account")
        XCTAssertFalse(q.matches(key: try key(path: "repo.git", account: "")), "empty account")
        XCTAssertFalse(q.matches(key: try key(path: "other.git")), "path")
        XCTAssertFalse(q.matches(key: try key()), "empty path")
        XCTAssertFalse(q.matches(key: try key(port: 8443, path: "repo.git")), "port")
    }

    func testExplicitPortAndDefaultPortNeverMatch() throws {
        XCTAssertFalse(try query(host: "example.com:8443").matches(key: try key()))
        XCTAssertFalse(try query().matches(key: try key(port: 8443)))
        XCTAssertTrue(try query(host: "example.com:443").matches(key: try key()),
                      "the well-known port spelled out is the same port")
    }

    func testAbsentUsernameAndPathMatchAny() throws {
        let q = try query()
        XCTAssertTrue(q.matches(key: try key()))
        XCTAssertTrue(q.matches(key: try key(path: "x/y", account: "bob")))
        XCTAssertTrue(q.matches(key: try key(account: "")))
    }

    func testEmptyUsernameMatchesOnlyEmptyAccount() throws {
        let q = try query(username: "")
        XCTAssertTrue(q.matches(key: try key(account: "")))
        XCTAssertFalse(q.matches(key: try key(account: "alice")))
    }

    func testEmptyPathMatchesOnlyEmptyPath() throws {
        let q = try query(path: "/")
        XCTAssertEqual(q.path, "")
        XCTAssertTrue(q.matches(key: try key()))
        XCTAssertFalse(q.matches(key: try key(path: "a")))
    }

    func testNonCanonicalItemsAreNotGits() throws {
        let q = try query()
        XCTAssertFalse(q.matches(key: try key(authenticationType: try AuthenticationType(parsing: "html-form"))))
        XCTAssertFalse(q.matches(key: try key(securityDomain: "realm")))
    }
}
