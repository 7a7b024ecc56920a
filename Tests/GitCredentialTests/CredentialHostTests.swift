import XCTest
@testable import GitCredential

final class CredentialHostTests: XCTestCase {
    private func host(_ text: String) throws -> CredentialHost { try CredentialHost(parsing: text) }

    private func assertFails(_ text: String, _ expected: CredentialError, line: UInt = #line) {
        XCTAssertThrowsError(try host(text), line: line) {
            XCTAssertEqual($0 as? CredentialError, expected, line: line)
        }
    }

    func testName() throws {
        XCTAssertEqual(try host("example.com"), CredentialHost(server: "example.com"))
    }

    func testNameAndPort() throws {
        XCTAssertEqual(try host("example.com:8443"), CredentialHost(server: "example.com", port: 8443))
        XCTAssertEqual(try host("h:1"), CredentialHost(server: "h", port: 1))
        XCTAssertEqual(try host("h:65535"), CredentialHost(server: "h", port: 65535))
    }

    func testBracketedIPv6() throws {
        XCTAssertEqual(try host("[fe80::1]"), CredentialHost(server: "fe80::1"))
        XCTAssertEqual(try host("[::1]:8443"), CredentialHost(server: "::1", port: 8443))
    }

    func testBareIPv6IsAPlainHost() throws {
        XCTAssertEqual(try host("fe80::1"), CredentialHost(server: "fe80::1"))
        XCTAssertEqual(try host("::1:8443"), CredentialHost(server: "::1:8443"))
    }

    func testBadPorts() {
        assertFails("example.com:0", .invalidPort("0"))
        assertFails("example.com:99999", .invalidPort("99999"))
        assertFails("example.com:65536", .invalidPort("65536"))
        assertFails("example.com:", .invalidPort(""))
        assertFails("example.com:https", .invalidPort("https"))
        assertFails("example.com:-1", .invalidPort("-1"))
        assertFails("example.com:+80", .invalidPort("+80"))
        assertFails("example.com: 80", .invalidPort(" 80"))
        assertFails("[::1]:0", .invalidPort("0"))
        assertFails("[::1]:x", .invalidPort("x"))
    }

    func testBadHosts() {
        assertFails("", .invalidHost(""))
        assertFails(":443", .invalidHost(":443"))
        assertFails("[]", .invalidHost("[]"))
        assertFails("[]:443", .invalidHost("[]:443"))
        assertFails("[::1", .invalidHost("[::1"))
        assertFails("[::1]443", .invalidHost("[::1]443"))
        assertFails("[::1]x:443", .invalidHost("[::1]x:443"))
    }
}
