import XCTest
@testable import KeychainFileSystem
import KeychainCrypto
import KeychainModel
import KeychainStore

/// The tree's semantics against a real store, without a mount.
final class KeychainTreeTests: XCTestCase {
    var dir: String!
    var keychain: Keychain!
    var tree: KeychainTree!
    let passphrase = SecureBytes(copying: Array("correct horse".utf8))

    override func setUpWithError() throws {
        (dir, keychain) = try makeTemporaryKeychain("kcfs-tree", passphrase: passphrase)
        tree = try KeychainTree(keychain: keychain)
    }

    override func tearDownWithError() throws { try? FileManager.default.removeItem(atPath: dir) }

    func names(_ path: String) throws -> [String] { try tree.list(path).map(\.name) }

    func testAFileCreatedBesideAThisDeviceOnlyItemIsThisDeviceOnlyFromTheStart() throws {
        try keychain.add(ItemRecord(key: .generic(try GenericPasswordKey(service: "vault", account: "key")),
                                    attributes: ItemAttributes(accessible: .whenUnlockedThisDeviceOnly)),
                         secret: SecureBytes(copying: Array("v".utf8)))
        try keychain.add(ItemRecord(key: .internet(try InternetPasswordKey(server: "h.example", port: 443, path: "a",
                                                                           account: "k")),
                                    attributes: ItemAttributes(accessible: .alwaysThisDeviceOnly)),
                         secret: SecureBytes())
        let h = try tree.create("/vault/sedXYZ", flags: O_WRONLY)
        XCTAssertEqual(String(decoding: try tree.attribute("/vault/sedXYZ", name: "user.keychain.accessible"), as: UTF8.self),
                       "when-unlocked-this-device-only", "pending, it shows the stricter class already")
        try tree.release(h)
        XCTAssertEqual(try keychain.item(for: .generic(try GenericPasswordKey(service: "vault", account: "sedXYZ")))?.accessible,
                       .whenUnlockedThisDeviceOnly, "and is stored under it")
        try tree.release(try tree.create("/internet/h.example/443/a/tmp", flags: O_WRONLY))
        XCTAssertEqual(String(decoding: try tree.attribute("/internet/h.example/443/a/tmp", name: "user.keychain.accessible"),
                              as: UTF8.self), "when-unlocked-this-device-only")
        try tree.makeDirectory("/plain")
        try tree.release(try tree.create("/plain/x", flags: O_WRONLY))
        XCTAssertEqual(String(decoding: try tree.attribute("/plain/x", name: "user.keychain.accessible"), as: UTF8.self),
                       "when-unlocked", "an empty directory takes the mount's default")
    }

    /// A pending sibling (created, not yet written) counts for the class rule and is listed.
    func testAPendingSiblingCountsForTheClassRuleAndIsListed() throws {
        try tree.makeDirectory("/vault")
        let first = try tree.create("/vault/first", flags: O_WRONLY)
        XCTAssertEqual(try tree.listPage(.service("vault"), after: 0, listedPending: [], limit: 10)?.map(\.entry.name),
                       [".", "..", "first"], "pending, it is listed")
        XCTAssertEqual(try tree.listPage(.service("vault"), after: 0, listedPending: ["first"], limit: 10)?.count, 3,
                       "as pending, whatever was listed before")
        try tree.setAttribute("/vault/first", name: "user.keychain.accessible", value: Array("always-this-device-only".utf8))
        let second = try tree.create("/vault/second", flags: O_WRONLY)
        XCTAssertTrue(String(decoding: try tree.attribute("/vault/second", name: "user.keychain.accessible"), as: UTF8.self)
            .hasSuffix("-this-device-only"), "a new item is never weaker than a pending sibling")
        try tree.release(second)
        try tree.release(first)
    }

    func testCreateWriteReadAndStat() throws {
        try tree.makeDirectory("/github")
        try tree.put("/github/alice", "s3cret")
        XCTAssertEqual(try tree.get("/github/alice"), "s3cret")
        XCTAssertEqual(try tree.stat("/github/alice").size, 6)
        XCTAssertEqual(try tree.stat("/github/alice").mode, 0o100600)
        XCTAssertEqual(try tree.stat("/github").mode, 0o040700)
        XCTAssertEqual(try names("/").sorted(), ["github", "internet"])
        XCTAssertEqual(try names("/github"), ["alice"])
        // The store has it too, under the blind index.
        let item = try keychain.item(for: .generic(GenericPasswordKey(service: "github", account: "alice")))
        XCTAssertEqual(try item.map { try keychain.secret(of: $0).unprotectedArray }, Array("s3cret".utf8))
    }

    func testFilesInRootAndInternetLevelsArePermissionErrors() throws {
        XCTAssertThrowsError(try tree.create("/file", flags: O_WRONLY)) { XCTAssertEqual($0 as? FileSystemError, .notPermitted) }
        XCTAssertThrowsError(try tree.create("/internet/h", flags: O_WRONLY)) { XCTAssertEqual($0 as? FileSystemError, .notPermitted) }
        try tree.makeDirectory("/internet/h")
        XCTAssertThrowsError(try tree.create("/internet/h/443", flags: O_WRONLY)) { XCTAssertEqual($0 as? FileSystemError, .notPermitted) }
        XCTAssertThrowsError(try tree.makeDirectory("/internet/h/99999")) { XCTAssertEqual($0 as? FileSystemError, .invalid) }
    }

    func testRmdirNonEmptyAndDirectoriesOutliveTheirItems() throws {
        try tree.makeDirectory("/svc")
        try tree.put("/svc/a", "1")
        XCTAssertThrowsError(try tree.removeDirectory("/svc")) { XCTAssertEqual($0 as? FileSystemError, .notEmpty) }
        try tree.remove("/svc/a")
        XCTAssertEqual(try names("/svc"), [])
        try tree.removeDirectory("/svc")
        XCTAssertThrowsError(try tree.stat("/svc")) { XCTAssertEqual($0 as? FileSystemError, .notFound) }
    }

    func testRenameReplacesAtomicallyAndHonoursNoReplace() throws {
        try tree.makeDirectory("/svc")
        try tree.put("/svc/acct", "old")
        try tree.put("/svc/tmp", "new")
        XCTAssertThrowsError(try tree.rename("/svc/tmp", to: "/svc/acct", noReplace: true, exchange: false)) {
            XCTAssertEqual($0 as? FileSystemError, .exists)
        }
        XCTAssertThrowsError(try tree.rename("/svc/tmp", to: "/svc/acct", noReplace: false, exchange: true)) {
            XCTAssertEqual($0 as? FileSystemError, .invalid)
        }
        try tree.rename("/svc/tmp", to: "/svc/acct", noReplace: false, exchange: false)
        XCTAssertEqual(try names("/svc"), ["acct"])
        XCTAssertEqual(try tree.get("/svc/acct"), "new")
        XCTAssertEqual(try keychain.allItems().items.count, 1)
        // The replaced item's class and attributes stay; only the secret moved.
        try tree.setAttribute("/svc/acct", name: "user.keychain.accessible", value: Array("always".utf8))
        try tree.put("/svc/tmp2", "newer")
        try tree.rename("/svc/tmp2", to: "/svc/acct", noReplace: false, exchange: false)
        XCTAssertEqual(try tree.attribute("/svc/acct", name: "user.keychain.accessible"), Array("always".utf8))
        XCTAssertEqual(try tree.get("/svc/acct"), "newer")
        try tree.makeDirectory("/other")
        try tree.rename("/svc/acct", to: "/other/moved", noReplace: false, exchange: false)
        XCTAssertEqual(try tree.get("/other/moved"), "newer")
    }

    func testInternetVariantsStayReachable() throws {
        try tree.makeDirectory("/internet/h")
        try tree.makeDirectory("/internet/h/443")
        try tree.put("/internet/h/443/alice", "web")
        try tree.put("/internet/h/443/alice%~ssh", "shell")
        XCTAssertEqual(try names("/internet/h/443"), ["alice", "alice%~ssh"])
        XCTAssertEqual(try tree.get("/internet/h/443/alice"), "web")
        XCTAssertEqual(try tree.get("/internet/h/443/alice%~ssh"), "shell")
        // Changing the protocol renames; onto an existing variant it is refused.
        XCTAssertThrowsError(try tree.setAttribute("/internet/h/443/alice", name: "user.keychain.protocol", value: Array("ssh".utf8))) {
            XCTAssertEqual($0 as? FileSystemError, .exists)
        }
        try tree.setAttribute("/internet/h/443/alice", name: "user.keychain.protocol", value: Array("http".utf8))
        XCTAssertEqual(try names("/internet/h/443"), ["alice%~http", "alice%~ssh"])
        // A path directory wins the plain name; the item keeps its tagged one.
        try tree.makeDirectory("/internet/h/443/docs")
        XCTAssertThrowsError(try tree.create("/internet/h/443/docs", flags: O_WRONLY)) {
            XCTAssertEqual($0 as? FileSystemError, .exists)
        }
        try tree.put("/internet/h/443/docs%~https", "file")
        XCTAssertEqual(try names("/internet/h/443"), ["alice%~http", "alice%~ssh", "docs", "docs%~https"])
        XCTAssertEqual(try tree.get("/internet/h/443/docs%~https"), "file")
        XCTAssertTrue(try tree.stat("/internet/h/443/docs").isDirectory)
    }

    func testLockRevokesOpenHandlesAndRefusesOpen() throws {
        try tree.makeDirectory("/svc")
        try tree.put("/svc/wu", "locked-away")
        try tree.put("/svc/afu", "stays")
        try tree.setAttribute("/svc/afu", name: "user.keychain.accessible", value: Array("after-first-unlock".utf8))
        let h = try tree.open("/svc/wu", flags: O_RDONLY)
        tree.lock()
        var buf = [UInt8](repeating: 0, count: 16)
        XCTAssertThrowsError(try buf.withUnsafeMutableBytes { try tree.read(h, offset: 0, count: 16, into: $0.baseAddress!) }) {
            XCTAssertEqual($0 as? FileSystemError, .keyUnavailable)
        }
        XCTAssertThrowsError(try tree.open("/svc/wu", flags: O_RDONLY)) { XCTAssertEqual($0 as? FileSystemError, .keyUnavailable) }
        XCTAssertEqual(try tree.get("/svc/afu"), "stays")
        XCTAssertEqual(try names("/svc"), ["afu", "wu"])
        try tree.unlock(passphrase: passphrase)
        XCTAssertEqual(try tree.get("/svc/wu"), "locked-away")
    }

    func testXattrs() throws {
        try tree.makeDirectory("/svc")
        try tree.put("/svc/a", "x")
        try tree.setAttribute("/svc/a", name: "user.keychain.label", value: Array("My label".utf8))
        XCTAssertEqual(try tree.attribute("/svc/a", name: "user.keychain.label"), Array("My label".utf8))
        XCTAssertTrue(try tree.listAttributes("/svc/a").contains("user.keychain.label"))
        XCTAssertThrowsError(try tree.attribute("/svc/a", name: "security.selinux")) { XCTAssertEqual($0 as? FileSystemError, .noData) }
        XCTAssertThrowsError(try tree.attribute("/svc/a", name: "user.other")) { XCTAssertEqual($0 as? FileSystemError, .noData) }
        XCTAssertThrowsError(try tree.setAttribute("/svc/a", name: "user.keychain.created", value: [49])) {
            XCTAssertEqual($0 as? FileSystemError, FileSystemError(EOPNOTSUPP))
        }
        XCTAssertThrowsError(try tree.setAttribute("/svc/a", name: "user.keychain.accessible", value: Array("sometimes".utf8))) {
            XCTAssertEqual($0 as? FileSystemError, .invalid)
        }
        XCTAssertEqual(try tree.attribute("/", name: "user.keychain.state"), Array("unlocked".utf8))
    }

    func testLockAfterChangesAtRunTime() throws {
        XCTAssertEqual(try tree.attribute("/", name: "user.keychain.lock-after"), Array("off".utf8))
        try tree.setAttribute("/", name: "user.keychain.lock-after", value: Array("300".utf8))
        XCTAssertEqual(tree.lockAfter, 300)
        XCTAssertEqual(try tree.attribute("/", name: "user.keychain.lock-after"), Array("300".utf8))
        for bad in ["0", "-5", "5s", "", " 5", "1234567890", "never"] {
            XCTAssertThrowsError(try tree.setAttribute("/", name: "user.keychain.lock-after", value: Array(bad.utf8)), bad) {
                XCTAssertEqual($0 as? FileSystemError, .invalid)
            }
        }
        XCTAssertEqual(tree.lockAfter, 300, "a refused value changes nothing")
        try tree.setAttribute("/", name: "user.keychain.lock-after", value: Array("off".utf8))
        XCTAssertNil(tree.lockAfter)
        XCTAssertThrowsError(try tree.setAttribute("/", name: "user.keychain.state", value: Array("locked".utf8))) {
            XCTAssertEqual($0 as? FileSystemError, .notPermitted)
        }
        // The idle lock itself runs on an injected clock: ItemChangeTests.testTheIdleLockFollowsTheClock.
    }

    func testModeAndOwnerChanges() throws {
        try tree.makeDirectory("/svc")
        try tree.put("/svc/a", "x")
        XCTAssertNoThrow(try tree.setMode("/svc/a", mode: 0o600))
        XCTAssertNoThrow(try tree.setMode("/svc/a", mode: 0o400))
        XCTAssertThrowsError(try tree.setMode("/svc/a", mode: 0o644)) { XCTAssertEqual($0 as? FileSystemError, .notPermitted) }
        XCTAssertNoThrow(try tree.setMode("/svc", mode: 0o700))
        XCTAssertThrowsError(try tree.setMode("/svc", mode: 0o755)) { XCTAssertEqual($0 as? FileSystemError, .notPermitted) }
        XCTAssertNoThrow(try tree.setOwner("/svc/a", uid: getuid(), gid: UInt32.max))
        XCTAssertThrowsError(try tree.setOwner("/svc/a", uid: getuid() + 1, gid: UInt32.max)) {
            XCTAssertEqual($0 as? FileSystemError, .notPermitted)
        }
    }
}

/// Regressions found in review.
extension KeychainTreeTests {
    func testAReaderKeepsTheValueItOpenedAcrossACommit() throws {
        try tree.makeDirectory("/svc")
        try tree.put("/svc/a", "old")
        let reader = try tree.open("/svc/a", flags: O_RDONLY)
        try tree.put("/svc/a", "new")
        var buf = [UInt8](repeating: 0, count: 16)
        let n = try buf.withUnsafeMutableBytes { try tree.read(reader, offset: 0, count: 16, into: $0.baseAddress!) }
        XCTAssertEqual(String(decoding: buf[0..<n], as: UTF8.self), "old")
        try tree.release(reader)
        XCTAssertEqual(try tree.get("/svc/a"), "new")
    }

    func testTruncatingOpenWithoutWritesEmptiesTheValue() throws {
        try tree.makeDirectory("/svc")
        try tree.put("/svc/a", "old")
        try tree.release(try tree.open("/svc/a", flags: O_WRONLY | O_TRUNC))
        XCTAssertEqual(try tree.get("/svc/a"), "")
    }

    func testLockRevokesAHandleWhoseItemChangedClass() throws {
        try tree.makeDirectory("/svc")
        try tree.put("/svc/a", "secret")
        try tree.setAttribute("/svc/a", name: "user.keychain.accessible", value: Array("after-first-unlock".utf8))
        let h = try tree.open("/svc/a", flags: O_RDWR)
        _ = try Array("!".utf8).withUnsafeBytes { try tree.write(h, offset: 6, data: $0) }
        try tree.setAttribute("/svc/a", name: "user.keychain.accessible", value: Array("when-unlocked".utf8))
        tree.lock()
        var buf = [UInt8](repeating: 0, count: 16)
        XCTAssertThrowsError(try buf.withUnsafeMutableBytes { try tree.read(h, offset: 0, count: 16, into: $0.baseAddress!) }) {
            XCTAssertEqual($0 as? FileSystemError, .keyUnavailable)
        }
    }

    func testSegmentsWithSlashesAreRefused() throws {
        try tree.makeDirectory("/internet/h")
        try tree.makeDirectory("/internet/h/443")
        XCTAssertThrowsError(try tree.makeDirectory("/internet/h/443/a%2Fb")) { XCTAssertEqual($0 as? FileSystemError, .invalid) }
    }

    func testBinaryGenericAttribute() throws {
        try tree.makeDirectory("/svc")
        try tree.put("/svc/a", "x")
        try tree.setAttribute("/svc/a", name: "user.keychain.generic", value: [0xff, 0x00, 0xfe])
        XCTAssertEqual(try tree.attribute("/svc/a", name: "user.keychain.generic"), [0xff, 0x00, 0xfe])
    }
}
