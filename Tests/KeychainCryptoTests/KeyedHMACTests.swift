import KeychainCrypto
import XCTest

final class KeyedHMACTests: XCTestCase {
    /// RFC 4231 cases 1 and 2 again, one after the other on one keyed instance each, and the
    /// same answers as the one-shot form for messages of every length around a block.
    func testKeyedMatchesTheRFCAndTheOneShotForm() throws {
        let one = try HMACSHA256.Keyed(key: secure([UInt8](repeating: 0x0b, count: 20)))
        XCTAssertEqual(one.authenticate(Array("Hi There".utf8)), hex("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"))
        XCTAssertEqual(one.authenticate(Array("Hi There".utf8)), hex("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
                       "each message starts afresh")
        let jefe = try HMACSHA256.Keyed(key: secure("Jefe"))
        XCTAssertEqual(jefe.authenticate(Array("what do ya want for nothing?".utf8)),
                       hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"))
        let key = secure([UInt8](repeating: 0x5a, count: 32))
        let keyed = try HMACSHA256.Keyed(key: key)
        for n in [0, 1, 31, 63, 64, 65, 200] {
            let message = (0..<n).map { UInt8(truncatingIfNeeded: $0 * 7) }
            XCTAssertEqual(keyed.authenticate(message), HMACSHA256.authenticate(message, key: key), "length \(n)")
        }
    }
}
