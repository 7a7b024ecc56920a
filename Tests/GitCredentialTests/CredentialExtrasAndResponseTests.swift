import XCTest
@testable import GitCredential

final class CredentialExtrasTests: XCTestCase {
    func testRoundTrip() {
        let all = CredentialExtras(passwordExpiryUTC: "1700000000", oauthRefreshToken: "a=b")
        XCTAssertEqual(CredentialExtras(decoding: all.encode()), all)
        let one = CredentialExtras(oauthRefreshToken: "tok")
        XCTAssertEqual(CredentialExtras(decoding: one.encode()), one)
        let other = CredentialExtras(passwordExpiryUTC: "1")
        XCTAssertEqual(CredentialExtras(decoding: other.encode()), other)
    }

    func testEncodedForm() {
        let e = CredentialExtras(passwordExpiryUTC: "1700000000", oauthRefreshToken: "tok")
        XCTAssertEqual(e.encode(), Data("password_expiry_utc=1700000000\noauth_refresh_token=tok\n".utf8))
    }

    func testNothingToEncode() {
        XCTAssertNil(CredentialExtras().encode())
        XCTAssertEqual(CredentialExtras(decoding: nil), CredentialExtras())
        XCTAssertTrue(CredentialExtras(decoding: nil).isEmpty)
    }

    func testFromRequestTreatsEmptyAsAbsent() {
        let r = CredentialRequest(passwordExpiryUTC: "", oauthRefreshToken: "tok")
        XCTAssertEqual(CredentialExtras(request: r), CredentialExtras(oauthRefreshToken: "tok"))
        XCTAssertNil(CredentialExtras(request: CredentialRequest()).encode())
    }

    func testDecodingToleratesForeignData() {
        XCTAssertEqual(CredentialExtras(decoding: Data([0xff, 0x00, 0x12])), CredentialExtras())
        XCTAssertEqual(CredentialExtras(decoding: Data("garbage\nfoo=bar\n\noauth_refresh_token=t".utf8)),
                       CredentialExtras(oauthRefreshToken: "t"))
    }
}

final class CredentialResponseTests: XCTestCase {
    private func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    func testUsernameAndPassword() throws {
        let out = try CredentialResponse.format(account: "alice", secret: Array("s3cret".utf8))
        XCTAssertEqual(text(out), "username=alice\npassword=s3cret\n")
    }

    func testEmptyValuesArePrinted() throws {
        let out = try CredentialResponse.format(account: "", secret: [UInt8]())
        XCTAssertEqual(text(out), "username=\npassword=\n")
    }

    func testExtras() throws {
        let out = try CredentialResponse.format(account: "a", secret: Array("p".utf8),
                                                extras: CredentialExtras(passwordExpiryUTC: "1700000000",
                                                                         oauthRefreshToken: "tok"))
        XCTAssertEqual(text(out), "username=a\npassword=p\npassword_expiry_utc=1700000000\noauth_refresh_token=tok\n")
    }

    func testSecretBytesPassThrough() throws {
        let secret: [UInt8] = [0xc3, 0xa9, 0x3d, 0xff]
        let out = try CredentialResponse.format(account: "a", secret: secret)
        XCTAssertEqual(out, Array("username=a\npassword=".utf8) + secret + [UInt8(ascii: "\n")])
    }

    func testResponseParsesBackAsTheSameCredential() throws {
        let out = try CredentialResponse.format(account: "", secret: Array("x=y".utf8),
                                                extras: CredentialExtras(oauthRefreshToken: "t"))
        let r = try CredentialRequest(parsing: out)
        XCTAssertEqual(r, CredentialRequest(username: "", password: "x=y", oauthRefreshToken: "t"))
    }

    func testRefusesValuesThatWouldInjectLines() {
        XCTAssertThrowsError(try CredentialResponse.format(account: "a", secret: Array("p\nhost=evil".utf8))) {
            XCTAssertEqual($0 as? CredentialError, .unprintable("password"))
        }
        XCTAssertThrowsError(try CredentialResponse.format(account: "a\nb", secret: [UInt8]())) {
            XCTAssertEqual($0 as? CredentialError, .unprintable("username"))
        }
        XCTAssertThrowsError(try CredentialResponse.format(account: "a", secret: [0x61, 0x00])) {
            XCTAssertEqual($0 as? CredentialError, .unprintable("password"))
        }
        XCTAssertThrowsError(try CredentialResponse.format(account: "a", secret: [UInt8](),
                                                           extras: CredentialExtras(oauthRefreshToken: "t\nx"))) {
            XCTAssertEqual($0 as? CredentialError, .unprintable("oauth_refresh_token"))
        }
    }
}
