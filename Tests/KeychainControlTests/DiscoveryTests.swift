import Foundation
import XCTest
@testable import KeychainClient
@testable import KeychainControlProtocol
import KeychainModel

final class DiscoveryTests: XCTestCase {
    private var directory = ""

    override func setUpWithError() throws {
        directory = NSTemporaryDirectory() + "kcfs-discovery-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        XCTAssertEqual(mkdir(directory, 0o700), 0)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    private func makeStore(_ name: String = "k.db") -> String {
        let path = directory + "/" + name
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data("store".utf8)))
        return path
    }

    private func writeRecord(_ text: String, for store: String, mode: mode_t = 0o600) {
        let path = store + ".daemon"
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(text.utf8)))
        chmod(path, mode)
    }

    // MARK: Trust

    func testOnlyADirectoryOfThisUserThatNoOneElseCanWriteIsTrusted() throws {
        XCTAssertTrue(PrivateFile.isPrivateDirectory(directory))
        for (mode, trusted) in [(0o700, true), (0o755, true), (0o770, false), (0o777, false), (0o1777, false), (0o702, false)] {
            let d = directory + "/d\(mode)"
            mkdir(d, 0o700)
            chmod(d, mode_t(mode))
            XCTAssertEqual(PrivateFile.isPrivateDirectory(d), trusted, String(mode, radix: 8))
        }
        symlink(directory, directory + "/link")
        XCTAssertFalse(PrivateFile.isPrivateDirectory(directory + "/link"), "a symlink, even to a trusted directory")
        XCTAssertFalse(PrivateFile.isPrivateDirectory(directory + "/missing"))
    }

    func testAnotherUsersDirectoryOrRecordIsNotTrusted() throws {
        try XCTSkipIf(getuid() != 0, "needs root to give files to another user")
        let d = directory + "/theirs"
        mkdir(d, 0o700)
        chown(d, 65534, 65534)
        XCTAssertFalse(PrivateFile.isPrivateDirectory(d))
        let store = makeStore()
        writeRecord(#"{"pid":1,"storePath":"\#(store)","mountpoint":"/m","socketPath":"/s"}"#, for: store)
        XCTAssertNotNil(MountRegistry.record(forStore: store))
        chown(store + ".daemon", 65534, 65534)
        XCTAssertNil(MountRegistry.record(forStore: store))
    }

    func testARecordIsReadOnlyWhenItIsTrustedAndAboutThisStore() throws {
        let store = makeStore()
        XCTAssertNil(MountRegistry.record(forStore: store))
        let text = #"{"pid":42,"storePath":"\#(store)","mountpoint":"/m","socketPath":"/s","version":"9","protocol":7,"new":1}"#
        writeRecord(text, for: store)
        let record = try XCTUnwrap(MountRegistry.record(forStore: store))
        XCTAssertEqual(record, MountRecord(pid: 42, storePath: store, mountpoint: "/m", socketPath: "/s", version: "9",
                                           protocolVersion: 7))
        writeRecord(text, for: store, mode: 0o620)
        XCTAssertNil(MountRegistry.record(forStore: store), "group-writable")
        writeRecord(#"{"pid":42,"storePath":"/elsewhere.db","mountpoint":"/m","socketPath":"/s"}"#, for: store)
        XCTAssertNil(MountRegistry.record(forStore: store), "about another store")
        writeRecord("not json", for: store)
        XCTAssertNil(MountRegistry.record(forStore: store))
        unlink(store + ".daemon")
        symlink(directory + "/elsewhere", store + ".daemon")
        writeRecord(text, for: directory + "/elsewhere")
        XCTAssertNil(MountRegistry.record(forStore: store), "a symlink")
    }

    func testARecordReadsBackWhateverItsPathsHold() throws {
        // Quotes, backslashes, control characters, non-ASCII and a character beyond the BMP, which
        // JSONEncoder writes escaped or as raw UTF-8.
        let odd = "/a \"quoted\" \\ back/slash\nline\ttab\u{01}/é/𝄞/日本"
        let record = MountRecord(pid: 123_456, storePath: odd + ".db", mountpoint: odd, socketPath: "/s",
                                 version: "1.2.3", protocolVersion: 65535)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        XCTAssertEqual(MountRecord(json: Array(try encoder.encode(record))), record)
        encoder.outputFormatting = [.prettyPrinted]
        XCTAssertEqual(MountRecord(json: Array(try encoder.encode(record))), record)
        let escaped = #"{"pid":1,"storePath":"\u00e9\ud834\udd1e\/\b\f\r","mountpoint":"/m","socketPath":"/s"}"#
        XCTAssertEqual(MountRecord(json: Array(escaped.utf8))?.storePath, "é𝄞/\u{08}\u{0c}\r")
    }

    func testARecordSkipsUnknownKeysAndDefaultsTheOptionalOnes() throws {
        let text = #" { "future" : {"a": [1, "]}", {"b": null}], "c": true}, "pid": 7, "list": [], "#
            + #""storePath": "/k.db", "n": -1.5e3, "mountpoint": "/m", "flag": false, "socketPath": "/s" } "#
        let record = try XCTUnwrap(MountRecord(json: Array(text.utf8)))
        XCTAssertEqual(record, MountRecord(pid: 7, storePath: "/k.db", mountpoint: "/m", socketPath: "/s",
                                           version: "unknown", protocolVersion: 0))
    }

    func testAMalformedRecordIsRefused() {
        let valid = #"{"pid":7,"storePath":"/k.db","mountpoint":"/m","socketPath":"/s"}"#
        XCTAssertNotNil(MountRecord(json: Array(valid.utf8)))
        let refused = [
            "", "not json", "[]", #"{"pid":7}"#,
            #"{"pid":7,"storePath":"/k.db","mountpoint":"/m","socketPath":"/s"} trailing"#,
            #"{"pid":7,"storePath":"/k.db","mountpoint":"/m","socketPath":"/s",}"#,
            #"{"pid":"7","storePath":"/k.db","mountpoint":"/m","socketPath":"/s"}"#,
            #"{"pid":7.5,"storePath":"/k.db","mountpoint":"/m","socketPath":"/s"}"#,
            #"{"pid":4294967296,"storePath":"/k.db","mountpoint":"/m","socketPath":"/s"}"#,
            #"{"pid":7,"storePath":"/k.db","mountpoint":"/m","socketPath":"/s","protocol":65536}"#,
            #"{"pid":7,"storePath":"/k.db","mountpoint":"/m","socketPath":"/s","version":1}"#,
            #"{"pid":7,"storePath":"/k\x.db","mountpoint":"/m","socketPath":"/s"}"#,
            #"{"pid":7,"storePath":"/k\ud834.db","mountpoint":"/m","socketPath":"/s"}"#,
            #"{"pid":7,"storePath":"/k.db","mountpoint":"/m","socketPath":"/s""#,
            #"{"pid":7,"storePath":"/k.db","mountpoint":"/m","socketPath":"/s","x":[1,2}"#,
            #"{"pid":7,"storePath":"/k.db","mountpoint":"/m","socketPath":"/s","x":}"#,
            "{\"pid\":7,\"storePath\":\"/k\n.db\",\"mountpoint\":\"/m\",\"socketPath\":\"/s\"}",
        ]
        for text in refused {
            XCTAssertNil(MountRecord(json: Array(text.utf8)), text)
        }
        // Not UTF-8.
        XCTAssertNil(MountRecord(json: Array(#"{"pid":7,"storePath":"/k"#.utf8) + [0xff]
            + Array(#".db","mountpoint":"/m","socketPath":"/s"}"#.utf8)))
    }

    func testRegisterWritesARecordThatReadsBack() throws {
        let store = makeStore()
        let record = MountRecord(pid: getpid(), storePath: store, mountpoint: "/m", socketPath: store + ".sock")
        try MountRegistry.register(record)
        XCTAssertEqual(MountRegistry.record(forStore: store), record)
        var st = stat()
        XCTAssertEqual(stat(store + ".daemon", &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600)
        MountRegistry.unregister(MountRecord(pid: 1, storePath: store, mountpoint: "/m", socketPath: "/x"))
        XCTAssertNotNil(MountRegistry.record(forStore: store), "another daemon's record is left alone")
        MountRegistry.unregister(record)
        XCTAssertNil(MountRegistry.record(forStore: store))
    }

    func testTheSocketSitsBesideTheStoreOnlyInATrustedDirectoryAndWhenItFits() throws {
        let store = makeStore()
        XCTAssertEqual(MountRegistry.socketPath(forStore: store), store + ".sock")
        let shared = directory + "/shared"
        mkdir(shared, 0o700)
        chmod(shared, 0o1777)
        let sharedStore = shared + "/k.db"
        XCTAssertEqual((MountRegistry.socketPath(forStore: sharedStore) as NSString).deletingLastPathComponent,
                       KeychainLocations.runtimeDirectory)
        let deep = directory + "/" + String(repeating: "d", count: 120)
        mkdir(deep, 0o700)
        XCTAssertEqual((MountRegistry.socketPath(forStore: deep + "/k.db") as NSString).deletingLastPathComponent,
                       KeychainLocations.runtimeDirectory)
    }

    func testMountTableEscapes() {
        XCTAssertEqual(MountTable.unescape(ArraySlice(#"/a\040b\134c\011d\012e"#.utf8)), "/a b\\c\td\ne")
        XCTAssertEqual(MountTable.unescape(ArraySlice(#"/a\04"#.utf8)), #"/a\04"#)
        XCTAssertEqual(MountTable.unescape(ArraySlice(#"/a\9999"#.utf8)), #"/a\9999"#)
    }

    // MARK: The store's lock decides

    func testNoHolderMeansTheStoreIsOpenedHere() throws {
        let store = makeStore()
        guard case .direct = try DaemonLocator.route(forStore: store) else { return XCTFail("expected the direct route") }
        XCTAssertFalse(StoreLock.isHeld(store))
        XCTAssertThrowsError(try DaemonLocator.route(forStore: directory + "/missing.db")) {
            XCTAssertEqual(($0 as? KeychainError)?.exitCode, 50)
        }
    }

    func testACommandsSharedLockDoesNotLookLikeADaemon() throws {
        let store = makeStore()
        guard case .direct(let lease) = try DaemonLocator.route(forStore: store) else { return XCTFail("direct") }
        XCTAssertFalse(StoreLock.isHeld(store))
        guard case .direct = try DaemonLocator.route(forStore: store) else { return XCTFail("a second command too") }
        withExtendedLifetime(lease) {}
    }

    /// Holds the store as a daemon does, from another open file description.
    private func holdExclusively(_ store: String) -> Int32 {
        let fd = open(store, O_RDONLY | O_CLOEXEC)
        XCTAssertEqual(flock(fd, LOCK_EX | LOCK_NB), 0)
        return fd
    }

    func testAHolderThatDoesNotAnswerIsARefusalNamingIt() throws {
        let store = makeStore()
        let fd = holdExclusively(store)
        defer { close(fd) }
        XCTAssertTrue(StoreLock.isHeld(store))
        XCTAssertTrue(StoreLock.holders(of: fd).contains { $0.pid == getpid() && $0.exclusive })
        // A record of the holder whose socket is gone: refused at once.
        try MountRegistry.register(MountRecord(pid: getpid(), storePath: MountRegistry.canonicalPath(store),
                                               mountpoint: "/m", socketPath: directory + "/gone.sock"))
        let started = Date()
        XCTAssertThrowsError(try DaemonLocator.route(forStore: store)) { error in
            let e = error as? KeychainError
            XCTAssertEqual(e?.exitCode, 75)
            XCTAssertTrue(e?.description.contains("process \(getpid())") ?? false, "\(String(describing: e))")
            XCTAssertTrue(e?.description.contains("nothing was read or written") ?? false)
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 2)
    }

    func testAHolderWithoutARecordIsWaitedForThenRefused() throws {
        let store = makeStore()
        let fd = holdExclusively(store)
        defer { close(fd) }
        let started = Date()
        XCTAssertThrowsError(try DaemonLocator.route(forStore: store)) {
            XCTAssertEqual(($0 as? KeychainError)?.exitCode, 75)
            XCTAssertTrue("\($0)".contains("process \(getpid())"), "\($0)")
        }
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), DaemonLocator.startupGrace - 0.5)
    }

    func testARecordOfAnotherProtocolIsAVersionMismatch() throws {
        let store = makeStore()
        let fd = holdExclusively(store)
        defer { close(fd) }
        try MountRegistry.register(MountRecord(pid: getpid(), storePath: MountRegistry.canonicalPath(store),
                                               mountpoint: "/m", socketPath: "/s", version: "7.0.0", protocolVersion: 99))
        XCTAssertThrowsError(try DaemonLocator.route(forStore: store)) {
            XCTAssertEqual($0 as? KeychainError, .daemonVersionMismatch(running: "7.0.0"))
            XCTAssertEqual(($0 as? KeychainError)?.exitCode, 76)
        }
    }

    func testARecordOfADeadDaemonIsIgnored() throws {
        let store = makeStore()
        let gone = Process()
        gone.executableURL = URL(fileURLWithPath: "/bin/true")
        try gone.run()
        gone.waitUntilExit()
        XCTAssertFalse(ProcessState.isRunning(gone.processIdentifier))
        try MountRegistry.register(MountRecord(pid: gone.processIdentifier, storePath: MountRegistry.canonicalPath(store),
                                               mountpoint: "/m", socketPath: "/s"))
        guard case .direct = try DaemonLocator.route(forStore: store) else { return XCTFail("direct") }
    }

    /// `unmount` waits for a daemon that is slow to close its store (a sync on a busy disk), saying
    /// so, instead of returning while the store is still held; one that never exits is an error.
    func testAwaitDaemonExitWaitsPastASecondAndSaysWhy() throws {
        let slow = Process()
        slow.executableURL = URL(fileURLWithPath: "/bin/sleep")
        slow.arguments = ["2.5"]
        try slow.run()
        var notes: [String] = []
        let start = Deadline.now
        try ProcessState.awaitDaemonExit(slow.processIdentifier, limit: 30) { notes.append($0) }
        XCTAssertFalse(ProcessState.isRunning(slow.processIdentifier))
        XCTAssertGreaterThan(Deadline.now.nanoseconds - start.nanoseconds, 2_000_000_000)
        XCTAssertEqual(notes.count, 1)
        XCTAssertTrue(notes.first?.contains("waiting for the daemon (process \(slow.processIdentifier)") == true, "\(notes)")
        slow.waitUntilExit()

        let stuck = Process()
        stuck.executableURL = URL(fileURLWithPath: "/bin/sleep")
        stuck.arguments = ["30"]
        try stuck.run()
        defer { stuck.terminate(); stuck.waitUntilExit() }
        XCTAssertThrowsError(try ProcessState.awaitDaemonExit(stuck.processIdentifier, limit: 1.5) { _ in }) {
            guard case .storeBusy(let message)? = $0 as? KeychainError else { return XCTFail("\($0)") }
            XCTAssertTrue(message.contains("has not exited after 1 s"), message)
        }
    }

    func testProcessState() {
        XCTAssertTrue(ProcessState.isRunning(getpid()))
        XCTAssertFalse(ProcessState.isRunning(0))
        XCTAssertFalse(ProcessState.isRunning(-1))
        XCTAssertTrue(ProcessState.describe(getpid()).hasPrefix("process \(getpid()) ("))
    }
}
