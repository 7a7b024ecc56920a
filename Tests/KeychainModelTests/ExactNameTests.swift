import XCTest
@testable import KeychainModel

/// Two forms of one name are two names: the store tells items apart by their bytes.
final class ExactNameTests: XCTestCase {
    let nfc = "caf\u{E9}"
    let nfd = "cafe\u{301}"

    func testCanonicallyEquivalentNamesAreDistinct() {
        XCTAssertEqual(nfc, nfd, "the premise: Swift's String equality is canonical equivalence")
        XCTAssertNotEqual(nfc.exact, nfd.exact)
        XCTAssertEqual(Set([nfc.exact, nfd.exact, nfc.exact]).count, 2)
        XCTAssertEqual("caf\u{E9}".exact, nfc.exact)
        XCTAssertTrue(nfd.exact < nfc.exact, "byte order: 'e' comes before 0xC3")
    }

    func testPrimaryKeysCompareAsBytes() throws {
        let a = try GenericPasswordKey(service: nfc, account: "x")
        let b = try GenericPasswordKey(service: nfd, account: "x")
        XCTAssertNotEqual(a, b)
        XCTAssertEqual(Set([ItemKey.generic(a), .generic(b)]).count, 2)
        XCTAssertEqual(a, try GenericPasswordKey(service: nfc, account: "x"))
        let i = try InternetPasswordKey(server: "example.org", path: nfc, account: nfd)
        let j = try InternetPasswordKey(server: "example.org", path: nfc, account: nfc)
        XCTAssertNotEqual(i, j)
        XCTAssertEqual(Set([i, j, i]).count, 2)
    }

    func testFieldsDoNotRunIntoEachOther() throws {
        // Hashes are of each field with its length: ("ab", "c") and ("a", "bc") differ.
        let a = try GenericPasswordKey(service: "ab", account: "c")
        let b = try GenericPasswordKey(service: "a", account: "bc")
        XCTAssertNotEqual(a, b)
        XCTAssertEqual(Set([a, b]).count, 2)
        // A Set falls back to == on a collision: the hashes themselves must differ.
        XCTAssertNotEqual(a.hashValue, b.hashValue)
        XCTAssertNotEqual(nfc.exact.hashValue, nfd.exact.hashValue)
        XCTAssertEqual(nfc.exact.hashValue, "caf\u{E9}".exact.hashValue)
    }

    func testEqualityComparesEveryByte() {
        // Small strings (up to 15 bytes, kept inline) and heap strings; empty; a last byte apart.
        for base in ["", "a", "github", "an-account-name-well-past-fifteen-bytes-\u{E9}"] {
            let copy = String(decoding: Array(base.utf8), as: UTF8.self)
            XCTAssertTrue(ExactName.equal(base, copy))
            XCTAssertFalse(ExactName.equal(base, base + "x"))
            XCTAssertFalse(ExactName.equal(base + "x", base + "y"))
            XCTAssertFalse(ExactName.equal("y" + base, "x" + base))
        }
        XCTAssertFalse(ExactName.equal(nfc, nfd))
    }
}
