import XCTest
import KeychainCrypto
@testable import GitCredential

final class CredentialRequestTests: XCTestCase {
    private func parse(_ text: String) throws -> CredentialRequest {
        try CredentialRequest(parsing: SecureBytes(copying: Array(text.utf8)))
    }

    func testParsesAllFields() throws {
        let r = try parse("""
            protocol=https
            host=example.com:8443
            path=repo.git
            username=alice
            password=s3cret
            password_expiry_utc=1700000000
            oauth_refresh_token=tok

            """)
        XCTAssertEqual(r, CredentialRequest(protocol: "https", host: "example.com:8443", path: "repo.git",
                                            username: "alice", password: "s3cret",
                                            passwordExpiryUTC: "1700000000", oauthRefreshToken: "tok"))
    }

    func testEmptyInputGivesEmptyRequest() throws {
        XCTAssertEqual(try parse(""), CredentialRequest())
    }

    func testMissingTrailingNewline() throws {
        let r = try parse("protocol=https\nhost=example.com")
        XCTAssertEqual(r.host, "example.com")
    }

    func testStopsAtEmptyLine() throws {
        let r = try parse("protocol=https\n\nhost=evil.example\n")
        XCTAssertEqual(r.protocol, "https")
        XCTAssertNil(r.host)
    }

    func testStopsAtEmptyLineEvenIfLaterLinesAreMalformed() throws {
        XCTAssertEqual(try parse("host=a\n\nno equals sign\n").host, "a")
    }

    func testAcceptsCRLF() throws {
        let r = try parse("protocol=https\r\nhost=example.com\r\n\r\nusername=bob\r\n")
        XCTAssertEqual(r.host, "example.com")
        XCTAssertNil(r.username)
    }

    func testSplitsAtFirstEquals() throws {
        let r = try parse("password=a=b==c\nusername==x\n")
        XCTAssertEqual(r.password, "a=b==c")
        XCTAssertEqual(r.username, "=x")
    }

    func testAbsentAndEmptyUsernameAndPasswordDiffer() throws {
        let absent = try parse("protocol=https\nhost=h\n")
        XCTAssertNil(absent.username)
        XCTAssertNil(absent.password)
        let empty = try parse("protocol=https\nhost=h\nusername=\npassword=\n")
        XCTAssertEqual(empty.username, "")
        XCTAssertEqual(empty.password, "")
    }

    /// An unknown attribute's value is never read as text (it may be a secret of a newer git),
    /// so one that is not UTF-8 does not make the request malformed.
    func testUnknownValuesAreNotRead() throws {
        let bytes = Array("protocol=https\ncredential=".utf8) + [0xff, 0xfe] + Array("\nhost=h\n".utf8)
        let r = try CredentialRequest(parsing: SecureBytes(copying: bytes))
        XCTAssertEqual(r, CredentialRequest(protocol: "https", host: "h"))
    }

    func testUnknownKeysAreIgnored() throws {
        let r = try parse("protocol=https\nquit=1\nephemeral=true\nurl=https://evil/\nhost=h\n")
        XCTAssertEqual(r, CredentialRequest(protocol: "https", host: "h"))
    }

    func testLaterLineWins() throws {
        XCTAssertEqual(try parse("host=a\nhost=b\n").host, "b")
    }

    func testLongLineCannotSmuggleHost() throws {
        let padding = String(repeating: "A", count: 5000)
        let r = try parse("protocol=https\nhost=good.example\nwwwauth[]=Basic \(padding)host=evil.example\n"
            + "path=\(padding)\n")
        XCTAssertEqual(r.host, "good.example")
        XCTAssertEqual(r.arrays["wwwauth"], ["Basic \(padding)host=evil.example"])
        XCTAssertEqual(r.path, padding)
    }

    func testOnlyALineStartingWithHostSetsHost() throws {
        let r = try parse("path=x\nhost=evil\nusername= host=evil\nxhost=evil\n")
        XCTAssertEqual(r.host, "evil")
        let r2 = try parse("username= host=evil\nxhost=evil\n host=evil\n")
        XCTAssertNil(r2.host)
    }

    func testCarriageReturnInsideValueIsNotALineBreak() throws {
        let r = try parse("username=a\rhost=evil\n")
        XCTAssertNil(r.host)
        XCTAssertEqual(r.username, "a\rhost=evil")
    }

    func testArraysCollectAndResetOnEmptyValue() throws {
        let r = try parse("wwwauth[]=Basic\nwwwauth[]=Bearer\ncapability[]=authtype\ncapability[]=\nstate[]=x\n")
        XCTAssertEqual(r.arrays["wwwauth"], ["Basic", "Bearer"])
        XCTAssertNil(r.arrays["capability"])
        XCTAssertEqual(r.arrays["state"], ["x"])
    }

    func testEmptyValuesAreKept() throws {
        let r = try parse("protocol=\nhost=\npath=\n")
        XCTAssertEqual(r.protocol, "")
        XCTAssertEqual(r.host, "")
        XCTAssertEqual(r.path, "")
    }

    func testLineWithoutEqualsIsMalformed() {
        XCTAssertThrowsError(try parse("protocol=https\nhost\n")) {
            XCTAssertEqual($0 as? CredentialError, .malformedLine(2))
        }
    }

    func testNulByteIsMalformed() {
        XCTAssertThrowsError(try parse("host=a\0b\n")) {
            XCTAssertEqual($0 as? CredentialError, .malformedLine(1))
        }
    }

    func testInvalidUTF8IsMalformed() {
        let bytes = Array("protocol=https\nhost=".utf8) + [0xff, 0xfe] + [UInt8(ascii: "\n")]
        XCTAssertThrowsError(try CredentialRequest(parsing: SecureBytes(copying: bytes))) {
            XCTAssertEqual($0 as? CredentialError, .malformedLine(2))
        }
    }

    /// The secrets are bytes, as git's are: kept whether or not they are UTF-8.
    func testSecretsNeedNotBeUTF8() throws {
        let raw: [UInt8] = [0xff, 0xfe, 0x3d]
        let bytes = Array("protocol=https\npassword=".utf8) + raw + Array("\noauth_refresh_token=".utf8) + raw
        let r = try CredentialRequest(parsing: SecureBytes(copying: bytes))
        XCTAssertEqual(r.password?.unprotectedArray, raw)
        XCTAssertEqual(r.oauthRefreshToken?.unprotectedArray, raw)
    }

    func testUTF8ValuesSurvive() throws {
        XCTAssertEqual(try parse("password=pässwörd🔑\n").password, "pässwörd🔑")
    }

    func testActions() {
        XCTAssertEqual(CredentialAction(argument: "get"), .get)
        XCTAssertEqual(CredentialAction(argument: "store"), .store)
        XCTAssertEqual(CredentialAction(argument: "erase"), .erase)
        XCTAssertNil(CredentialAction(argument: "GET"))
        XCTAssertNil(CredentialAction(argument: "capability"))
        XCTAssertNil(CredentialAction(argument: ""))
    }
}
