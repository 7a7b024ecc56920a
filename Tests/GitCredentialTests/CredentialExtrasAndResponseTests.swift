import XCTest
import KeychainCrypto
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
        XCTAssertEqual(e.encode().text, "password_expiry_utc=1700000000\noauth_refresh_token=tok\n")
    }

    func testNothingToEncode() {
        XCTAssertEqual(CredentialExtras().encode().count, 0)
        XCTAssertEqual(CredentialExtras(legacy: nil), CredentialExtras())
        XCTAssertTrue(CredentialExtras(legacy: nil).isEmpty)
        XCTAssertTrue(CredentialExtras(decoding: SecureBytes()).isEmpty)
    }

    func testFromRequestTreatsEmptyAsAbsent() {
        let r = CredentialRequest(passwordExpiryUTC: "", oauthRefreshToken: "tok")
        XCTAssertEqual(CredentialExtras(request: r), CredentialExtras(oauthRefreshToken: "tok"))
        XCTAssertEqual(CredentialExtras(request: CredentialRequest()).encode().count, 0)
    }

    func testDecodingToleratesForeignData() {
        XCTAssertEqual(CredentialExtras(legacy: Data([0xff, 0x00, 0x12])), CredentialExtras())
        XCTAssertEqual(CredentialExtras(legacy: Data("garbage\nfoo=bar\n\noauth_refresh_token=t".utf8)),
                       CredentialExtras(oauthRefreshToken: "t"))
        XCTAssertEqual(CredentialExtras(decoding: SecureBytes(copying: Array("x\npassword_expiry_utc=\u{ff}=\n".utf8))),
                       CredentialExtras(passwordExpiryUTC: "\u{ff}="))
    }
}

final class CredentialResponseTests: XCTestCase {
    private func text(_ bytes: SecureBytes) -> String { bytes.text }

    func testUsernameAndPassword() throws {
        let out = try CredentialResponse.format(account: "alice", secret: "s3cret")
        XCTAssertEqual(text(out), "username=alice\npassword=s3cret\n")
    }

    func testEmptyValuesArePrinted() throws {
        let out = try CredentialResponse.format(account: "", secret: SecureBytes())
        XCTAssertEqual(text(out), "username=\npassword=\n")
    }

    func testExtras() throws {
        let out = try CredentialResponse.format(account: "a", secret: "p",
                                                extras: CredentialExtras(passwordExpiryUTC: "1700000000",
                                                                         oauthRefreshToken: "tok"))
        XCTAssertEqual(text(out), "username=a\npassword=p\npassword_expiry_utc=1700000000\noauth_refresh_token=tok\n")
    }

    func testSecretBytesPassThrough() throws {
        let secret: [UInt8] = [0xc3, 0xa9, 0x3d, 0xff]
        let out = try CredentialResponse.format(account: "a", secret: SecureBytes(copying: secret))
        XCTAssertEqual(out.unprotectedArray, Array("username=a\npassword=".utf8) + secret + [UInt8(ascii: "\n")])
    }

    func testResponseParsesBackAsTheSameCredential() throws {
        let out = try CredentialResponse.format(account: "", secret: "x=y",
                                                extras: CredentialExtras(oauthRefreshToken: "t"))
        let r = try CredentialRequest(parsing: out)
        XCTAssertEqual(r, CredentialRequest(username: "", password: "x=y", oauthRefreshToken: "t"))
    }

    func testRefusesValuesThatWouldInjectLines() {
        XCTAssertThrowsError(try CredentialResponse.format(account: "a", secret: "p\nhost=evil")) {
            XCTAssertEqual($0 as? CredentialError, .unprintable("password"))
        }
        XCTAssertThrowsError(try CredentialResponse.format(account: "a\nb", secret: SecureBytes())) {
            XCTAssertEqual($0 as? CredentialError, .unprintable("username"))
        }
        XCTAssertThrowsError(try CredentialResponse.format(account: "a", secret: SecureBytes(copying: [0x61, 0x00]))) {
            XCTAssertEqual($0 as? CredentialError, .unprintable("password"))
        }
        XCTAssertThrowsError(try CredentialResponse.format(account: "a", secret: SecureBytes(),
                                                           extras: CredentialExtras(oauthRefreshToken: "t\nx"))) {
            XCTAssertEqual($0 as? CredentialError, .unprintable("oauth_refresh_token"))
        }
    }
}
