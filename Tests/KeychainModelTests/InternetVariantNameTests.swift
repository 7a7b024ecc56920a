import KeychainModel
import XCTest

final class InternetVariantNameTests: XCTestCase {
    private func roundTrip(_ key: InternetPasswordKey, file: StaticString = #filePath, line: UInt = #line) {
        let name = InternetVariantName.fileName(for: key)
        guard let parsed = InternetVariantName.parse(name, port: key.port) else {
            return XCTFail("\(name) does not parse", file: file, line: line)
        }
        XCTAssertEqual(parsed.account, key.account, file: file, line: line)
        XCTAssertEqual(parsed.protocol, key.protocol, file: file, line: line)
        XCTAssertEqual(parsed.authenticationType, key.authenticationType, file: file, line: line)
        XCTAssertEqual(parsed.securityDomain, key.securityDomain, file: file, line: line)
        // The tagged form names the same item.
        XCTAssertEqual(InternetVariantName.parse(InternetVariantName.taggedFileName(for: key), port: key.port), parsed,
                       file: file, line: line)
    }

    func testCanonicalVariantIsTheEscapedAccount() throws {
        let key = try InternetPasswordKey(server: "example.org", port: 443, protocol: .https, account: "alice")
        XCTAssertTrue(key.isCanonicalVariant)
        XCTAssertEqual(InternetVariantName.fileName(for: key), "alice")
        XCTAssertEqual(InternetVariantName.taggedFileName(for: key), "alice%~https")
        roundTrip(key)
    }

    func testCanonicalVariantWithSpecialAccount() throws {
        let key = try InternetPasswordKey(server: "h", port: 22, protocol: .ssh, account: "a/b%")
        XCTAssertTrue(key.isCanonicalVariant)
        XCTAssertEqual(InternetVariantName.fileName(for: key), "a%2Fb%25")
        roundTrip(key)
    }

    func testOtherProtocolOnThePortIsTagged() throws {
        let key = try InternetPasswordKey(server: "h", port: 443, protocol: .ssh, account: "alice")
        XCTAssertFalse(key.isCanonicalVariant)
        XCTAssertEqual(InternetVariantName.fileName(for: key), "alice%~ssh")
        roundTrip(key)
        let parsed = InternetVariantName.parse("alice%~ssh", port: 443)
        XCTAssertEqual(parsed?.account, "alice")
        XCTAssertEqual(parsed?.protocol, .ssh)
        XCTAssertEqual(parsed?.authenticationType, .default)
        XCTAssertEqual(parsed?.securityDomain, "")
    }

    func testAuthenticationTypeIsTagged() throws {
        let form = try AuthenticationType(parsing: "html-form")
        let key = try InternetPasswordKey(server: "h", protocol: .https, authenticationType: form, account: "alice")
        XCTAssertEqual(InternetVariantName.fileName(for: key), "alice%~https,html-form")
        roundTrip(key)
    }

    func testDomainWithCommasRoundTrips() throws {
        let key = try InternetPasswordKey(server: "h", protocol: .https, securityDomain: "a,b,c/d", account: "alice")
        XCTAssertEqual(InternetVariantName.fileName(for: key), "alice%~https,default,a,b,c%2Fd")
        roundTrip(key)
        let withAuth = try InternetPasswordKey(server: "h", protocol: .http, authenticationType: AuthenticationType(parsing: "ntlm"),
                                               securityDomain: ",,", account: "bob")
        roundTrip(withAuth)
    }

    func testAccountEndingInPercentRoundTrips() throws {
        let key = try InternetPasswordKey(server: "h", port: 443, protocol: .ssh, account: "a%")
        XCTAssertEqual(InternetVariantName.fileName(for: key), "a%25%~ssh")
        roundTrip(key)
    }

    func testEmptyAccountRoundTrips() throws {
        roundTrip(try InternetPasswordKey(server: "h", account: ""))
        roundTrip(try InternetPasswordKey(server: "h", port: 443, protocol: InternetProtocol(parsing: "ftp"), account: ""))
    }

    func testUntaggedNameTakesThePortsProtocol() {
        XCTAssertEqual(InternetVariantName.parse("alice", port: 22)?.protocol, .ssh)
        XCTAssertEqual(InternetVariantName.parse("alice", port: 443)?.protocol, .https)
        XCTAssertEqual(InternetVariantName.parse("alice", port: 8080)?.protocol, .https)
    }

    func testAccountNamedLikeATagIsEscaped() throws {
        // An account literally called "alice%~ssh" must not be read back as alice over ssh.
        let key = try InternetPasswordKey(server: "h", port: 443, protocol: .https, account: "alice%~ssh")
        let name = InternetVariantName.fileName(for: key)
        XCTAssertEqual(name, "alice%25~ssh")
        roundTrip(key)
    }

    func testUnparseableNamesAreRejected() {
        XCTAssertNil(InternetVariantName.parse("alice%~", port: 443))
        XCTAssertNil(InternetVariantName.parse("alice%~no-such-protocol", port: 443))
        XCTAssertNil(InternetVariantName.parse("alice%~https,no-such-auth", port: 443))
        XCTAssertNil(InternetVariantName.parse("a%G1%~ssh", port: 443))
        XCTAssertNil(InternetVariantName.parse("a%G1", port: 443))
        XCTAssertNil(InternetVariantName.parse("alice%~https,default,bad%", port: 443))
    }

    func testForPortPicksTheDefaultProtocol() {
        XCTAssertEqual(InternetProtocol.forPort(443), .https)
        XCTAssertEqual(InternetProtocol.forPort(80), .http)
        XCTAssertEqual(InternetProtocol.forPort(22), .ssh)
        XCTAssertEqual(InternetProtocol.forPort(21).name, "ftp")     // not ftp-account
        XCTAssertEqual(InternetProtocol.forPort(445).name, "smb")    // not cifs
        XCTAssertEqual(InternetProtocol.forPort(993).name, "imaps")
        XCTAssertEqual(InternetProtocol.forPort(12345), .https)
        XCTAssertEqual(InternetProtocol.forPort(0), .https)
    }

    func testProtocolAndAuthParsing() throws {
        XCTAssertEqual(try InternetProtocol(parsing: "https").code.text, "htps")
        XCTAssertEqual(try InternetProtocol(parsing: "SSH").code.text, "ssh ")
        XCTAssertEqual(try InternetProtocol(parsing: "htps"), .https)
        XCTAssertEqual(try InternetProtocol(parsing: "imps").name, "imaps")
        XCTAssertThrowsError(try InternetProtocol(parsing: "gopher"))
        XCTAssertThrowsError(try InternetProtocol(parsing: ""))
        XCTAssertEqual(try AuthenticationType(parsing: "http-basic").code.text, "http")
        XCTAssertEqual(try AuthenticationType(parsing: "dflt"), .default)
        XCTAssertThrowsError(try AuthenticationType(parsing: "kerberos5"))
        XCTAssertThrowsError(try FourCharCode("abc"))
        XCTAssertThrowsError(try FourCharCode("ab\u{7f}c"))
    }
}
