import KeychainCrypto
import XCTest

final class SecureBytesTests: XCTestCase {
    func testNewBufferIsZeroed() {
        let b = SecureBytes(count: 100)
        XCTAssertEqual(b.count, 100)
        XCTAssertEqual(b.unprotectedArray, [UInt8](repeating: 0, count: 100))
    }

    func testCopyingInitialisers() {
        XCTAssertEqual(SecureBytes(copying: [1, 2, 3]).unprotectedArray, [1, 2, 3])
        let raw: [UInt8] = [9, 8, 7]
        XCTAssertEqual(raw.withUnsafeBytes { SecureBytes(copying: $0) }.unprotectedArray, [9, 8, 7])
        XCTAssertEqual(SecureBytes(copying: [UInt8]()).count, 0)
    }

    func testGrowKeepsContentAndZeroFillsNewBytes() {
        let b = secure([1, 2, 3])
        b.resize(to: 6)
        XCTAssertEqual(b.unprotectedArray, [1, 2, 3, 0, 0, 0])
    }

    func testGrowPastAPageKeepsContent() {
        let content = (0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let b = secure(content)
        b.resize(to: 3 * 4096 + 5)
        XCTAssertEqual(b.count, 3 * 4096 + 5)
        XCTAssertEqual(Array(b.unprotectedArray.prefix(5000)), content)
        XCTAssertTrue(b.unprotectedArray.dropFirst(5000).allSatisfy { $0 == 0 })
    }

    func testShrinkWipesDroppedBytes() {
        let b = secure([1, 2, 3, 4, 5, 6, 7, 8])
        b.resize(to: 3)
        XCTAssertEqual(b.unprotectedArray, [1, 2, 3])
        // Growing back within the same pages must not bring the old bytes back.
        b.resize(to: 8)
        XCTAssertEqual(b.unprotectedArray, [1, 2, 3, 0, 0, 0, 0, 0])
    }

    func testGrowFromEmpty() {
        let b = SecureBytes()
        b.resize(to: 4)
        b.withUnsafeMutableBytes { $0[3] = 42 }
        XCTAssertEqual(b.unprotectedArray, [0, 0, 0, 42])
    }

    func testWipeEmptiesTheBuffer() {
        let b = secure("secret")
        b.wipe()
        XCTAssertEqual(b.count, 0)
        XCTAssertEqual(b.unprotectedArray, [])
        b.withUnsafeBytes { XCTAssertEqual($0.count, 0) }
        // The buffer is still usable afterwards.
        b.resize(to: 2)
        XCTAssertEqual(b.unprotectedArray, [0, 0])
    }

    func testCopyIsIndependent() {
        let a = secure([1, 2, 3])
        let c = a.copy()
        XCTAssertTrue(a.isEqual(to: c))
        c.withUnsafeMutableBytes { $0[0] = 99 }
        XCTAssertEqual(a.unprotectedArray, [1, 2, 3])
        XCTAssertEqual(c.unprotectedArray, [99, 2, 3])
        a.wipe()
        XCTAssertEqual(c.count, 3)
    }

    func testIsEqual() {
        XCTAssertTrue(secure([1, 2, 3]).isEqual(to: secure([1, 2, 3])))
        XCTAssertFalse(secure([1, 2, 3]).isEqual(to: secure([1, 2, 4])))
        XCTAssertFalse(secure([1, 2, 3]).isEqual(to: secure([1, 2])))
        XCTAssertFalse(secure([UInt8]()).isEqual(to: secure([0])))
        XCTAssertTrue(SecureBytes().isEqual(to: SecureBytes()))
    }

    func testRandomBytes() {
        let a = SecureRandom.bytes(32), b = SecureRandom.bytes(32)
        XCTAssertEqual(a.count, 32)
        XCTAssertFalse(a.isEqual(to: b))
        XCTAssertEqual(SecureRandom.bytes(0).count, 0)
        XCTAssertEqual(SecureRandom.array(16).count, 16)
    }
}
