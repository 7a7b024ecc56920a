import Foundation
import Synchronization
import XCTest
@testable import KeychainDaemon
import KeychainControl
import KeychainCrypto
import KeychainFileSystem
import KeychainModel
import KeychainStore

/// A clock the test moves by hand.
final class ManualClock: MonotonicClock {
    let seconds = Atomic<Int64>(1000)
    var now: Int64 { seconds.load(ordering: .relaxed) }
    func advance(_ by: Int64) { seconds.add(by, ordering: .relaxed) }
}

/// The daemon's composition without FUSE: the owner it makes from its settings, the control
/// service over that owner, the idle lock, systemd's notification.
final class DaemonTests: XCTestCase {
    var dir: String!
    let passphrase = SecureBytes(copying: Array("correct horse".utf8))

    override func setUpWithError() throws {
        dir = NSTemporaryDirectory() + "kcfs-daemon-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        _ = try Keychain.create(at: dir + "/k.db", passphrase: passphrase, scrypt: ScryptParameters(logN: 10),
                                deviceKeyPath: dir + "/device.key")
    }

    override func tearDownWithError() throws { try? FileManager.default.removeItem(atPath: dir) }

    func settings(defaultClass: AccessibilityClass = .default, lockAfter: Int? = nil) -> MountSettings {
        MountSettings(storePath: dir + "/k.db", mountpoint: dir + "/mnt", startLocked: false, lockAfter: lockAfter,
                      defaultClass: defaultClass, allowRoot: true)
    }

    func owner(_ s: MountSettings, clock: any MonotonicClock = SystemMonotonicClock()) throws -> ServedKeychain {
        let owner = try MountDaemon.owner(s, clock: clock)
        try owner.unlock(passphrase: SecureBytes(copying: Array("correct horse".utf8)))
        return owner
    }

    func key(_ account: String) throws -> ItemKey { .generic(try GenericPasswordKey(service: "svc", account: account)) }

    func testTheControlServiceActsOnTheMountsOwner() throws {
        let owner = try self.owner(settings(defaultClass: .afterFirstUnlock))
        let unmounts = Atomic<Int>(0)
        let service = MountDaemon.controlService(owner, settings(defaultClass: .afterFirstUnlock)) {
            unmounts.add(1, ordering: .relaxed)
        }
        let record = try service.save(key: try key("a"), secret: SecureBytes(copying: [1]), changes: AttributeChanges(),
                                      updateExisting: false)
        XCTAssertEqual(record.attributes.accessible, .afterFirstUnlock, "the mount's default class")
        let status = try service.status()
        XCTAssertEqual(status.mountpoint, dir + "/mnt")
        XCTAssertEqual(status.daemonPID, getpid())
        XCTAssertEqual(status.allowRoot, true)
        XCTAssertNotNil(status.memory)
        try service.setLockAfter(30)
        XCTAssertEqual(owner.lockAfter, 30)
        XCTAssertThrowsError(try service.setLockAfter(0))
        try service.lock()
        XCTAssertEqual(owner.lockState, .locked)
        try service.unlock(passphrase: SecureBytes(copying: Array("correct horse".utf8)))
        XCTAssertEqual(owner.lockState, .unlocked)
        try service.unmount()
        XCTAssertEqual(unmounts.load(ordering: .relaxed), 1)
    }

    /// Without a mount, the same service refuses what only a mount does.
    func testWithoutAMountLockUnmountAndLockAfterAreRefused() throws {
        let service = ServedKeychainService(owner: try owner(settings()))
        for call in [{ try service.lock() }, { try service.unmount() }, { try service.setLockAfter(10) }] {
            XCTAssertThrowsError(try call()) { e in
                guard case KeychainError.notMounted = e else { return XCTFail("\(e)") }
            }
        }
        XCTAssertNil(try service.status().mountpoint)
        XCTAssertNil(try service.status().daemonPID)
    }

    /// The drift the issue found: a save with no class gives the same class through the
    /// mount's service and through a command's own, given the same default and neighbours.
    func testANewItemTakesTheSameClassMountedOrNot() throws {
        let s = settings(defaultClass: .afterFirstUnlock)
        let mounted = MountDaemon.controlService(try owner(s), s) {}
        let first = try mounted.save(key: try key("m"), secret: SecureBytes(copying: [1]), changes: AttributeChanges(),
                                     updateExisting: false)
        let direct = ServedKeychainService(owner: try owner(s))
        let second = try direct.save(key: try key("d"), secret: SecureBytes(copying: [1]), changes: AttributeChanges(),
                                     updateExisting: false)
        XCTAssertEqual(first.attributes.accessible, .afterFirstUnlock)
        XCTAssertEqual(second.attributes.accessible, first.attributes.accessible)
        // A neighbour counts for neither (only for a file made in the tree, which names no class).
        _ = try direct.save(key: try key("strict"), secret: SecureBytes(copying: [1]),
                            changes: AttributeChanges(accessible: .whenUnlocked), updateExisting: false)
        let third = try mounted.save(key: try key("n"), secret: SecureBytes(copying: [1]), changes: AttributeChanges(),
                                     updateExisting: false)
        let fourth = try direct.save(key: try key("o"), secret: SecureBytes(copying: [1]), changes: AttributeChanges(),
                                     updateExisting: false)
        XCTAssertEqual(third.attributes.accessible, .afterFirstUnlock)
        XCTAssertEqual(fourth.attributes.accessible, .afterFirstUnlock)
        // A class given is the class stored.
        let given = try direct.save(key: try key("g"), secret: SecureBytes(copying: [1]),
                                    changes: AttributeChanges(accessible: .always), updateExisting: false)
        XCTAssertEqual(given.attributes.accessible, .always)
    }

    /// The daemon's idle-lock thread asks the owner, whose clock says when: no sleep for the
    /// lock-after itself, only for the thread's next tick.
    func testTheIdleLockThreadLocksWhenTheClockSaysSo() throws {
        let clock = ManualClock()
        let owner = try self.owner(settings(lockAfter: 60), clock: clock)
        MountDaemon.startIdleLock(owner, interval: 10_000)
        usleep(100_000)
        XCTAssertEqual(owner.lockState, .unlocked)
        clock.advance(60)
        let deadline = Date().addingTimeInterval(10)
        while owner.lockState != .locked && Date() < deadline { usleep(10_000) }
        XCTAssertEqual(owner.lockState, .locked)
    }

    /// One daemon per store.
    func testTheStoreLockIsExclusive() throws {
        let fd = try MountDaemon.lockStore(dir + "/k.db")
        defer { close(fd) }
        XCTAssertThrowsError(try MountDaemon.lockStore(dir + "/k.db")) { e in
            guard case KeychainError.storeBusy = e else { return XCTFail("\(e)") }
        }
    }

    func testSystemdNotifySendsOneDatagramToNotifySocket() throws {
        let path = dir + "/notify"
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        XCTAssertEqual(bound, 0)
        setenv("NOTIFY_SOCKET", path, 1)
        defer { unsetenv("NOTIFY_SOCKET") }
        SystemdNotify.send("READY=1")
        var buffer = [UInt8](repeating: 0, count: 64)
        let n = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
        XCTAssertEqual(n, 7)
        XCTAssertEqual(String(decoding: buffer.prefix(max(n, 0)), as: UTF8.self), "READY=1")
    }
}

/// The log's timestamp, written without Foundation's formatters, is the ISO 8601 they wrote.
final class DaemonLogTests: XCTestCase {
    func testTimestampIsTheISO8601FormatterText() {
        for seconds: time_t in [0, 9, 951_782_400, 1_764_114_868, 1_798_761_599, 4_102_444_800] {
            XCTAssertEqual(FileLogHandler.timestamp(seconds),
                           ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: TimeInterval(seconds))))
        }
    }
}
