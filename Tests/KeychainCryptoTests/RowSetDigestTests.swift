import KeychainCrypto
import XCTest

final class RowSetDigestTests: XCTestCase {
    let key = SecureBytes(copying: [UInt8](repeating: 7, count: 32))

    func digest(_ pairs: [(id: Int64, version: Int64)], key: SecureBytes? = nil) throws -> RowSetDigest {
        var d = RowSetDigest()
        try d.toggle(pairs, key: key ?? self.key)
        return d
    }

    func testTheDigestOfASetDoesNotDependOnOrderOrBatching() throws {
        let pairs: [(id: Int64, version: Int64)] = (1...50).map { ($0, $0 % 3 + 1) }
        var batched = RowSetDigest()
        try batched.toggle(Array(pairs[25...]), key: key)
        try batched.toggle(Array(pairs[..<25]), key: key)
        XCTAssertEqual(try digest(pairs), try digest(pairs.reversed()))
        XCTAssertEqual(try digest(pairs), batched)
    }

    func testRemovingWhatWasAddedGivesTheEmptySet() throws {
        var d = try digest([(1, 1), (2, 5)])
        XCTAssertNotEqual(d, RowSetDigest())
        try d.toggle([(2, 5), (1, 1)], key: key)
        XCTAssertEqual(d, RowSetDigest())
    }

    func testEveryChangeOfIdVersionOrKeyChangesIt() throws {
        let base = try digest([(1, 1), (2, 1)])
        XCTAssertNotEqual(base, try digest([(1, 1), (2, 2)]), "a replayed older version")
        XCTAssertNotEqual(base, try digest([(1, 1)]), "a removed row")
        XCTAssertNotEqual(base, try digest([(1, 1), (2, 1), (3, 1)]), "a row put back")
        XCTAssertNotEqual(base, try digest([(1, 1), (2, 1)], key: SecureBytes(copying: [UInt8](repeating: 8, count: 32))))
        XCTAssertNotEqual(try digest([(1, 2)]), try digest([(2, 1)]), "id and version are not interchangeable")
    }
}
