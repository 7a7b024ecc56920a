import KeychainModel
import XCTest

final class PrimaryKeyTests: XCTestCase {
    private func assertNameTooLong<T>(_ body: @autoclosure () throws -> T, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try body(), file: file, line: line) { error in
            guard case ModelError.nameTooLong = error else {
                return XCTFail("expected nameTooLong, got \(error)", file: file, line: line)
            }
        }
    }

    private func assertInvalid<T>(_ body: @autoclosure () throws -> T, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try body(), file: file, line: line) { error in
            guard case ModelError.invalid = error else {
                return XCTFail("expected invalid, got \(error)", file: file, line: line)
            }
        }
    }

    // MARK: generic passwords

    func testEmptyServiceIsRefused() {
        assertInvalid(try GenericPasswordKey(service: "", account: "alice"))
    }

    func testEmptyAccountIsAllowedForGenericPassword() throws {
        let key = try GenericPasswordKey(service: "github", account: "")
        XCTAssertEqual(key.account, "")
        XCTAssertEqual(key.service, "github")
        XCTAssertEqual(key.accessGroup, "")
    }

    func testServiceOf255BytesIsAcceptedAnd256Refused() throws {
        XCTAssertNoThrow(try GenericPasswordKey(service: String(repeating: "s", count: 255), account: "a"))
        assertNameTooLong(try GenericPasswordKey(service: String(repeating: "s", count: 256), account: "a"))
    }

    func testAccountOver255BytesIsRefused() throws {
        XCTAssertNoThrow(try GenericPasswordKey(service: "svc", account: String(repeating: "a", count: 255)))
        assertNameTooLong(try GenericPasswordKey(service: "svc", account: String(repeating: "a", count: 256)))
    }

    func testPercentTriplesInLengthWhenCountingTheLimit() throws {
        // 85 × "%25" = 255 bytes once escaped; 86 × "%" is only 86 bytes raw but 258 escaped.
        XCTAssertNoThrow(try GenericPasswordKey(service: String(repeating: "%", count: 85), account: "a"))
        assertNameTooLong(try GenericPasswordKey(service: String(repeating: "%", count: 86), account: "a"))
        assertNameTooLong(try GenericPasswordKey(service: "s", account: String(repeating: "/", count: 86)))
    }

    func testLimitCountsUTF8BytesNotCharacters() throws {
        // "é" is two bytes: 128 of them are 256 bytes.
        XCTAssertNoThrow(try GenericPasswordKey(service: String(repeating: "é", count: 127), account: "a"))
        assertNameTooLong(try GenericPasswordKey(service: String(repeating: "é", count: 128), account: "a"))
    }

    // MARK: internet passwords

    func testEmptyServerIsRefused() {
        assertInvalid(try InternetPasswordKey(server: "", account: "alice"))
    }

    func testEmptyAccountIsAllowedForInternetPassword() throws {
        let key = try InternetPasswordKey(server: "example.org", account: "")
        XCTAssertEqual(key.account, "")
    }

    func testServerOver255BytesIsRefused() {
        XCTAssertNoThrow(try InternetPasswordKey(server: String(repeating: "h", count: 255), account: "a"))
        assertNameTooLong(try InternetPasswordKey(server: String(repeating: "h", count: 256), account: "a"))
    }

    func testPathSegmentOver255BytesIsRefused() {
        XCTAssertNoThrow(try InternetPasswordKey(server: "h", path: "a/" + String(repeating: "p", count: 255), account: "a"))
        assertNameTooLong(try InternetPasswordKey(server: "h", path: "a/" + String(repeating: "p", count: 256), account: "a"))
        assertNameTooLong(try InternetPasswordKey(server: "h", path: String(repeating: "%", count: 86), account: "a"))
    }

    /// Each part fits NAME_MAX, but the item's whole path in the tree would pass PATH_MAX.
    func testAnInternetItemDeeperThanPathMaxIsRefused() throws {
        let segment = String(repeating: "s", count: 250)
        let fits = Array(repeating: segment, count: 15).joined(separator: "/")
        let key = try InternetPasswordKey(server: "example.org", path: fits, account: "alice")
        XCTAssertLessThanOrEqual(InternetTreePath.path(of: key).utf8.count, InternetTreePath.maxBytes)
        XCTAssertEqual(InternetTreePath.path(of: key), "/internet/example.org/443/" + fits + "/alice")
        let deeper = fits + "/" + segment + "/" + segment
        XCTAssertThrowsError(try InternetPasswordKey(server: "example.org", path: deeper, account: "alice")) { error in
            guard case ModelError.nameTooLong(let m) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(m.contains("PATH_MAX"), m)
        }
        // Escaping counts: each % triples.
        let escaped = Array(repeating: String(repeating: "%", count: 80), count: 18).joined(separator: "/")
        XCTAssertThrowsError(try InternetPasswordKey(server: "example.org", path: escaped, account: "alice"))
    }

    func testAccountLimitIncludesTheVariantSuffix() {
        let account = String(repeating: "a", count: 255)
        // Canonical variant: the file name is the account alone.
        XCTAssertNoThrow(try InternetPasswordKey(server: "h", account: account))
        // Any other variant adds "%~ssh", which no longer fits.
        assertNameTooLong(try InternetPasswordKey(server: "h", port: 443, protocol: .ssh, account: account))
    }

    func testPortZeroBecomesTheProtocolsWellKnownPort() throws {
        XCTAssertEqual(try InternetPasswordKey(server: "h", port: 0, protocol: .https, account: "a").port, 443)
        XCTAssertEqual(try InternetPasswordKey(server: "h", port: 0, protocol: .ssh, account: "a").port, 22)
        XCTAssertEqual(try InternetPasswordKey(server: "h", protocol: .http, account: "a").port, 80)
        XCTAssertEqual(try InternetPasswordKey(server: "h", port: 0, protocol: InternetProtocol(parsing: "imaps"), account: "a").port, 993)
    }

    /// Port 0 could not be reached through the tree (a port directory is 1–65535).
    func testPortZeroIsRefusedForAProtocolWithoutWellKnownPort() throws {
        let proto = try InternetProtocol(parsing: "appletalk")
        XCTAssertNil(proto.wellKnownPort)
        XCTAssertThrowsError(try InternetPasswordKey(server: "h", port: 0, protocol: proto, account: "a"))
        XCTAssertEqual(try InternetPasswordKey(server: "h", port: 201, protocol: proto, account: "a").port, 201)
    }

    func testFourCharCodesCannotHoldVariantNameSeparators() {
        for text in ["a/bc", "a%bc", "a,bc"] { XCTAssertThrowsError(try FourCharCode(text), text) }
    }

    func testExplicitPortIsKept() throws {
        XCTAssertEqual(try InternetPasswordKey(server: "h", port: 8443, protocol: .https, account: "a").port, 8443)
    }

    func testPathIsNormalised() throws {
        XCTAssertEqual(InternetPath.normalize("/a//b/"), "a/b")
        XCTAssertEqual(InternetPath.normalize("a/b"), "a/b")
        XCTAssertEqual(InternetPath.normalize("///"), "")
        XCTAssertEqual(InternetPath.normalize(""), "")
        XCTAssertEqual(InternetPath.segments("/a//b/"), ["a", "b"])
        let k1 = try InternetPasswordKey(server: "h", path: "/a//b/", account: "x")
        let k2 = try InternetPasswordKey(server: "h", path: "a/b", account: "x")
        XCTAssertEqual(k1.path, "a/b")
        XCTAssertEqual(k1, k2)
        XCTAssertEqual(ItemKey.internet(k1).canonicalBytes, ItemKey.internet(k2).canonicalBytes)
    }

    // MARK: canonical bytes

    func testCanonicalBytesDoNotDependOnFieldBoundaries() throws {
        let a = ItemKey.generic(try GenericPasswordKey(service: "ab", account: "c"))
        let b = ItemKey.generic(try GenericPasswordKey(service: "a", account: "bc"))
        XCTAssertNotEqual(a.canonicalBytes, b.canonicalBytes)

        let g1 = ItemKey.generic(try GenericPasswordKey(service: "s", account: "a", accessGroup: "gx"))
        let g2 = ItemKey.generic(try GenericPasswordKey(service: "xs", account: "a", accessGroup: "g"))
        XCTAssertNotEqual(g1.canonicalBytes, g2.canonicalBytes)

        let i1 = ItemKey.internet(try InternetPasswordKey(server: "h", path: "p", securityDomain: "d", account: "ab"))
        let i2 = ItemKey.internet(try InternetPasswordKey(server: "h", path: "p", securityDomain: "da", account: "b"))
        XCTAssertNotEqual(i1.canonicalBytes, i2.canonicalBytes)
    }

    func testCanonicalBytesDifferForEveryField() throws {
        let base = try InternetPasswordKey(server: "h", port: 443, path: "p", protocol: .https,
                                           authenticationType: .default, securityDomain: "d", account: "a", accessGroup: "g")
        var variants: [InternetPasswordKey] = []
        variants.append(try InternetPasswordKey(server: "h2", port: 443, path: "p", securityDomain: "d", account: "a", accessGroup: "g"))
        variants.append(try InternetPasswordKey(server: "h", port: 444, path: "p", securityDomain: "d", account: "a", accessGroup: "g"))
        variants.append(try InternetPasswordKey(server: "h", port: 443, path: "q", securityDomain: "d", account: "a", accessGroup: "g"))
        variants.append(try InternetPasswordKey(server: "h", port: 443, path: "p", protocol: .http, securityDomain: "d", account: "a", accessGroup: "g"))
        variants.append(try InternetPasswordKey(server: "h", port: 443, path: "p", authenticationType: AuthenticationType(parsing: "ntlm"),
                                                securityDomain: "d", account: "a", accessGroup: "g"))
        variants.append(try InternetPasswordKey(server: "h", port: 443, path: "p", securityDomain: "e", account: "a", accessGroup: "g"))
        variants.append(try InternetPasswordKey(server: "h", port: 443, path: "p", securityDomain: "d", account: "b", accessGroup: "g"))
        variants.append(try InternetPasswordKey(server: "h", port: 443, path: "p", securityDomain: "d", account: "a", accessGroup: "G"))
        let all = ([base] + variants).map { ItemKey.internet($0).canonicalBytes }
        XCTAssertEqual(Set(all).count, all.count)
    }

    func testCanonicalBytesDistinguishGenericFromInternet() throws {
        let g = ItemKey.generic(try GenericPasswordKey(service: "example.org", account: "a"))
        let i = ItemKey.internet(try InternetPasswordKey(server: "example.org", account: "a"))
        XCTAssertNotEqual(g.canonicalBytes, i.canonicalBytes)
        XCTAssertNotEqual(g.groupBytes, i.groupBytes)
    }

    func testEqualKeysHaveEqualCanonicalBytes() throws {
        let a = ItemKey.generic(try GenericPasswordKey(service: "s", account: "a"))
        let b = ItemKey.generic(try GenericPasswordKey(service: "s", account: "a"))
        XCTAssertEqual(a.canonicalBytes, b.canonicalBytes)
    }

    func testGroupBytesIgnoreAccountAndAccessGroup() throws {
        let a = ItemKey.generic(try GenericPasswordKey(service: "s", account: "a", accessGroup: "g1"))
        let b = ItemKey.generic(try GenericPasswordKey(service: "s", account: "b", accessGroup: "g2"))
        XCTAssertEqual(a.groupBytes, b.groupBytes)
        XCTAssertEqual(a.groupBytes, ItemKey.groupBytes(kind: .generic, name: "s"))
    }
}
