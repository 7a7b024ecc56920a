import XCTest
@testable import KeychainFileSystem
import KeychainCrypto
import KeychainModel

final class OpenFileTests: XCTestCase {
    func file(_ text: String, flags: Int32) -> OpenFile {
        OpenFile(itemID: 1, accessible: .whenUnlocked, mode: OpenMode(flags: flags), contents: SecureBytes(copying: Array(text.utf8)))
    }

    func contents(_ f: OpenFile) -> String { f.buffer.withUnsafeBytes { String(decoding: $0, as: UTF8.self) } }

    func write(_ f: OpenFile, _ text: String, at offset: Int) throws {
        let bytes = Array(text.utf8)
        _ = try bytes.withUnsafeBytes { try f.write($0, offset: offset) }
    }

    func read(_ f: OpenFile, at offset: Int, count: Int) throws -> String {
        var buf = [UInt8](repeating: 0, count: count)
        let n = try buf.withUnsafeMutableBytes { try f.read(offset: offset, count: count, into: $0.baseAddress!) }
        return String(decoding: buf[0..<n], as: UTF8.self)
    }

    func testOpenModes() {
        func bits(_ m: OpenMode) -> [Bool] { [m.readable, m.writable, m.append, m.truncate] }
        XCTAssertEqual(bits(OpenMode(flags: O_RDONLY)), [true, false, false, false])
        XCTAssertEqual(bits(OpenMode(flags: O_WRONLY | O_TRUNC)), [false, true, false, true])
        XCTAssertEqual(bits(OpenMode(flags: O_RDWR | O_APPEND)), [true, true, true, false])
        // O_TRUNC on a read-only open truncates nothing.
        XCTAssertFalse(OpenMode(flags: O_RDONLY | O_TRUNC).truncate)
    }

    func testTruncateOnOpenEmptiesAndMarksDirty() {
        let f = file("old", flags: O_WRONLY | O_TRUNC)
        XCTAssertEqual(f.buffer.count, 0)
        XCTAssertTrue(f.isDirty)
    }

    func testWriteAtOffsetsZeroFillsGaps() throws {
        let f = file("abc", flags: O_RDWR)
        try write(f, "Z", at: 1)
        XCTAssertEqual(contents(f), "aZc")
        try write(f, "!", at: 5)
        XCTAssertEqual(Array(f.buffer.unprotectedArray), Array("aZc".utf8) + [0, 0] + Array("!".utf8))
        XCTAssertTrue(f.isDirty)
    }

    func testAppendIgnoresOffset() throws {
        let f = file("abc", flags: O_WRONLY | O_APPEND)
        try write(f, "de", at: 0)
        XCTAssertEqual(contents(f), "abcde")
    }

    func testReadsSlicesAndEOF() throws {
        let f = file("secret", flags: O_RDONLY)
        XCTAssertEqual(try read(f, at: 0, count: 3), "sec")
        XCTAssertEqual(try read(f, at: 3, count: 100), "ret")
        XCTAssertEqual(try read(f, at: 6, count: 10), "")
        XCTAssertFalse(f.isDirty)
    }

    func testWrongDirectionIsEBADF() {
        let r = file("x", flags: O_RDONLY)
        XCTAssertThrowsError(try write(r, "y", at: 0)) { XCTAssertEqual($0 as? FileSystemError, .badHandle) }
        let w = file("x", flags: O_WRONLY)
        XCTAssertThrowsError(try read(w, at: 0, count: 1)) { XCTAssertEqual($0 as? FileSystemError, .badHandle) }
    }

    func testTruncateGrowsAndShrinks() throws {
        let f = file("abcdef", flags: O_RDWR)
        try f.truncate(to: 2)
        XCTAssertEqual(contents(f), "ab")
        try f.truncate(to: 4)
        XCTAssertEqual(f.buffer.unprotectedArray, Array("ab".utf8) + [0, 0])
    }

    func testSixteenMebibyteLimitIsEFBIG() throws {
        let f = file("", flags: O_WRONLY)
        XCTAssertThrowsError(try f.truncate(to: maxSecretBytes + 1)) { XCTAssertEqual($0 as? FileSystemError, .tooLarge) }
        XCTAssertThrowsError(try write(f, "x", at: maxSecretBytes)) { XCTAssertEqual($0 as? FileSystemError, .tooLarge) }
        try f.truncate(to: maxSecretBytes)
        XCTAssertEqual(f.buffer.count, maxSecretBytes)
    }

    func testRevokedHandleFailsWithENOKEYAndIsWiped() {
        let f = file("secret", flags: O_RDWR)
        f.revoke()
        XCTAssertEqual(f.buffer.count, 0)
        XCTAssertThrowsError(try read(f, at: 0, count: 1)) { XCTAssertEqual($0 as? FileSystemError, .keyUnavailable) }
        XCTAssertThrowsError(try write(f, "x", at: 0)) { XCTAssertEqual($0 as? FileSystemError, .keyUnavailable) }
    }
}
