import Glibc
import KeychainCrypto
import XCTest
@testable import KeychainAccess

/// The Assuan client both prompts speak through: data lines into locked memory, unescaped,
/// and everything else parsed as before.
final class AssuanSessionTests: XCTestCase {
    private var fds: [Int32] = [-1, -1]

    override func setUp() {
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
    }

    override func tearDown() { fds.forEach { close($0) } }

    /// What the other end says, all at once, before the session reads.
    private func peer(_ text: String) {
        let bytes = Array(text.utf8)
        XCTAssertEqual(bytes.withUnsafeBytes { write(fds[1], $0.baseAddress, $0.count) }, bytes.count)
    }

    private func session() -> AssuanSession { AssuanSession(fd: fds[0], deadline: .now + .seconds(5)) }

    func testDataLinesGoUnescapedIntoTheCallersBuffer() throws {
        peer("OK hello\nS status\n# comment\nD pass%25word%0A\nD  two\nOK\n")
        var s = session()
        try s.expectOK()
        let pin = SecureBytes()
        XCTAssertNil(try s.command("GETPIN", data: pin))
        XCTAssertEqual(pin.unprotectedArray, Array("pass%word\n two".utf8))
        XCTAssertTrue(pin.isLocked || !SecureBytes.allLocked)
    }

    func testDataIsDroppedWhenNotAskedFor() throws {
        peer("OK\nD secret\nOK\nERR 83886179 Operation cancelled <Pinentry>\n")
        var s = session()
        try s.expectOK()
        XCTAssertNil(try s.command("CONFIRM"))
        let error = try XCTUnwrap(try s.command("GETPIN"))
        XCTAssertEqual(error.code, 83886179)
        XCTAssertEqual(error.text, "Operation cancelled <Pinentry>")
    }

    func testLinesSplitAcrossReadsAndAnOverlongLine() throws {
        var s = session()
        peer("OK")
        let writer = Thread { [fd = fds[1]] in
            usleep(50_000)
            _ = "\nD ab".withCString { write(fd, $0, 5) }
            usleep(50_000)
            _ = "c\nOK\n".withCString { write(fd, $0, 5) }
        }
        writer.start()
        try s.expectOK()
        let data = SecureBytes()
        XCTAssertNil(try s.command("GETPIN", data: data))
        XCTAssertEqual(data.unprotectedArray, Array("abc".utf8))
        peer(String(repeating: "x", count: 5000))
        XCTAssertThrowsError(try s.command("GETPIN")) { error in
            guard case AssuanFailure.protocolError = error else { return XCTFail("\(error)") }
        }
    }

    func testInquireIsCancelledAndABadErrorLineRefused() throws {
        peer("OK\nINQUIRE PINENTRY_LAUNCHED 1\nOK\nERR nonsense\n")
        var s = session()
        try s.expectOK()
        XCTAssertNil(try s.command("GETINFO"))
        var sent = [UInt8](repeating: 0, count: 64)
        let n = read(fds[1], &sent, sent.count)
        XCTAssertEqual(String(decoding: sent[..<max(n, 0)], as: UTF8.self), "GETINFO\nCAN\n")
        XCTAssertThrowsError(try s.command("CONFIRM")) { error in
            guard case AssuanFailure.protocolError = error else { return XCTFail("\(error)") }
        }
    }

    func testTheEndingDescriptorEndsTheWait() throws {
        var ending: [Int32] = [-1, -1]
        XCTAssertEqual(pipe(&ending), 0)
        defer { ending.forEach { close($0) } }
        var s = AssuanSession(fd: fds[0], deadline: .now + .seconds(5), ending: ending[0])
        _ = write(ending[1], "x", 1)
        XCTAssertThrowsError(try s.expectOK()) { error in
            guard case AssuanFailure.ended = error else { return XCTFail("\(error)") }
        }
    }

    func testAClosedPeerAndTheDeadline() throws {
        var late = AssuanSession(fd: fds[0], deadline: .now + .milliseconds(100))
        XCTAssertThrowsError(try late.expectOK()) { error in
            guard case AssuanFailure.timedOut = error else { return XCTFail("\(error)") }
        }
        close(fds[1]); fds[1] = -1
        var s = session()
        XCTAssertThrowsError(try s.expectOK()) { error in
            guard case AssuanFailure.closed = error else { return XCTFail("\(error)") }
        }
    }
}
