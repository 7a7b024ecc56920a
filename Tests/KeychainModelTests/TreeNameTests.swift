import KeychainModel
import XCTest

final class TreeNameTests: XCTestCase {
    func testEscapesEachSpecialCase() {
        XCTAssertEqual(TreeName.escape(""), "%")
        XCTAssertEqual(TreeName.escape("."), "%2E")
        XCTAssertEqual(TreeName.escape(".."), "%2E%2E")
        XCTAssertEqual(TreeName.escape("50%off"), "50%25off")
        XCTAssertEqual(TreeName.escape("a/b"), "a%2Fb")
        XCTAssertEqual(TreeName.escape("a\0b"), "a%00b")
    }

    /// A raw newline or escape in a listed file name would break ls, line-based tools and terminals.
    func testControlCharactersAreEscapedAndRoundTrip() {
        XCTAssertEqual(TreeName.escape("a\nb"), "a%0Ab")
        XCTAssertEqual(TreeName.escape("\u{1B}[31m\t\r\u{7F}"), "%1B[31m%09%0D%7F")
        for name in ["a\nb", "\u{1}", "tab\there", "\u{7F}", "\u{1F}x"] {
            let escaped = TreeName.escape(name)
            XCTAssertFalse(escaped.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }, escaped)
            XCTAssertEqual(TreeName.unescape(escaped), name)
        }
    }

    func testOrdinaryNamesMapStraightThrough() {
        for name in ["alice", "...", ".hidden", "a.b", "ä–漢字", "a b", "~", "a~b"] {
            XCTAssertEqual(TreeName.escape(name), name)
        }
    }

    func testEscapeUnescapeRoundTrips() {
        let names = ["", ".", "..", "%", "%%", "/", "//", "\0", "a%2Fb", "50%off", "a/b/c", "x\0y", "...",
                     ".a", "a.", "%~", "%2E", "ä/漢%字", "%25", String(repeating: "%", count: 10)]
        for name in names {
            let escaped = TreeName.escape(name)
            XCTAssertFalse(escaped.contains("/"), "escape(\(name.debugDescription)) contains /")
            XCTAssertFalse(escaped.utf8.contains(0), "escape(\(name.debugDescription)) contains NUL")
            XCTAssertNotEqual(escaped, ".")
            XCTAssertNotEqual(escaped, "..")
            XCTAssertFalse(escaped.isEmpty)
            XCTAssertEqual(TreeName.unescape(escaped), name, "round trip of \(name.debugDescription) via \(escaped)")
        }
    }

    func testEscapedNamesNeverContainTheVariantMarker() {
        for name in ["%~", "a%~b", "%", "~%"] {
            XCTAssertFalse(TreeName.escape(name).contains(InternetVariantName.marker), name)
        }
    }

    func testAnyValidEscapeIsAccepted() {
        XCTAssertEqual(TreeName.unescape("%69nternet"), "internet")
        XCTAssertEqual(TreeName.unescape("%2e%2E"), "..")
        XCTAssertEqual(TreeName.unescape("a%2fb"), "a/b")
    }

    func testLonePercentIsTheEmptyName() {
        XCTAssertEqual(TreeName.unescape("%"), "")
    }

    func testInvalidEscapesAreRejected() {
        for bad in ["a%", "%%", "%G1", "a%2", "%2", "%1G", "a%~ssh", "%zz"] {
            XCTAssertNil(TreeName.unescape(bad), "\(bad) should not unescape")
        }
    }

    func testEmptyFileNameAndRawSlashAreRejected() {
        XCTAssertNil(TreeName.unescape(""))
        XCTAssertNil(TreeName.unescape("a/b"))
    }

    func testEscapeThatDecodesToInvalidUTF8IsRejected() {
        XCTAssertNil(TreeName.unescape("%FF"))
        XCTAssertNil(TreeName.unescape("a%C3"))
        XCTAssertEqual(TreeName.unescape("%C3%A4"), "ä")
    }

    func testValidateUsesEscapedLength() {
        XCTAssertNoThrow(try TreeName.validate(String(repeating: "x", count: 255), as: "name"))
        XCTAssertThrowsError(try TreeName.validate(String(repeating: "x", count: 256), as: "name")) { error in
            XCTAssertEqual(error as? ModelError, .nameTooLong("name is 256 bytes once escaped; the limit is 255"))
        }
        XCTAssertThrowsError(try TreeName.validate(String(repeating: "\0", count: 86), as: "name"))
    }
}
