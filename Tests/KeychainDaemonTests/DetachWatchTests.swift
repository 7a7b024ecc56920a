import Foundation
import Glibc
import XCTest
@testable import KeychainDaemon

/// What the detach watch takes for a detach: only a mount table read whole without its mount.
final class DetachWatchTests: XCTestCase {
    private func table(_ text: String) throws -> Int32 {
        let path = NSTemporaryDirectory() + "kcfs-mountinfo-\(getpid())-\(UUID().uuidString)"
        try text.write(toFile: path, atomically: false, encoding: .utf8)
        defer { unlink(path) }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(fd, 0)
        return fd
    }

    private let entries = """
        22 1 0:21 / / rw,relatime - ext4 /dev/sda1 rw
        97 22 0:55 / /home/u/keychain rw,nosuid,nodev,relatime - fuse.keychainfs /home/u/.local/share/keychainfs/keychain.db rw,user_id=1000,group_id=1000

        """

    func testItsMountListedIsMounted() throws {
        let fd = try table(entries)
        defer { close(fd) }
        XCTAssertTrue(DetachWatch.isMounted(97, table: fd))
        XCTAssertTrue(DetachWatch.isMounted(97, table: fd), "read again from its start")
    }

    func testATableWithoutItIsADetach() throws {
        let fd = try table(entries)
        defer { close(fd) }
        XCTAssertFalse(DetachWatch.isMounted(98, table: fd))
    }

    func testATableThatCannotBeReadIsNeverTakenForADetach() throws {
        let empty = try table("")
        defer { close(empty) }
        XCTAssertTrue(DetachWatch.isMounted(97, table: empty), "nothing read")
        var pipeEnds: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&pipeEnds), 0)
        defer { close(pipeEnds[0]); close(pipeEnds[1]) }
        XCTAssertTrue(DetachWatch.isMounted(97, table: pipeEnds[0]), "no seek to its start")
        XCTAssertTrue(DetachWatch.isMounted(97, table: -1), "a closed descriptor")
    }
}
