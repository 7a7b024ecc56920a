import Foundation
import Synchronization
import XCTest
@testable import KeychainClient
@testable import KeychainControlProtocol
import KeychainAccess
import KeychainBatch
import KeychainControlServer
import KeychainCrypto
import KeychainModel

/// A keychain held in memory, to drive the server and the client end to end over a real socket.
private final class MemoryKeychain: KeychainService {
    private struct Entry { var record: ItemRecord; var secret: SecureBytes; var extras: SecureBytes? }
    private let state = Mutex<(items: [Int64: Entry], next: Int64, locked: Bool, lockAfter: Int?, calls: [String])>(
        ([:], 1, false, nil, []))

    var calls: [String] { state.withLock { $0.calls } }

    func save(key: ItemKey, secret: SecureBytes, extras: SecureBytes?, changes: AttributeChanges, updateExisting: Bool) throws -> ItemRecord {
        try state.withLock { s in
            s.calls.append("save")
            let existing = s.items.first { $0.value.record.key == key }
            if existing != nil && !updateExisting { throw KeychainError.duplicateItem }
            let record = ItemRecord(key: key, attributes: changes.applied(to: existing?.value.record.attributes ?? ItemAttributes()))
            let id = existing?.key ?? s.next
            if existing == nil { s.next += 1 }
            // As the store does: nil keeps the extras, empty removes them.
            let kept = extras.map { $0.count == 0 ? nil : $0.copy() } ?? existing?.value.extras
            s.items[id] = Entry(record: record, secret: secret.copy(), extras: kept)
            return record
        }
    }

    func find(query: ItemQuery, withSecrets: Bool, limit: Int?) throws -> [FoundItem] {
        try state.withLock { s in
            s.calls.append("find")
            let found = s.items.filter { query.matches($0.value.record) }.sorted { $0.key < $1.key }
            if withSecrets && s.locked && !found.isEmpty { throw KeychainError.unavailable(.whenUnlocked) }
            return found.prefix(limit ?? .max).map {
                FoundItem(itemID: $0.key, record: $0.value.record, secret: withSecrets ? .value($0.value.secret.copy()) : nil,
                          extras: withSecrets ? $0.value.extras?.copy() : nil)
            }
        }
    }

    func delete(query: ItemQuery, all: Bool) throws -> [ItemRecord] {
        try state.withLock { s in
            s.calls.append("delete")
            var ids = s.items.filter { query.matches($0.value.record) }.map(\.key).sorted()
            guard !ids.isEmpty else { throw KeychainError.itemNotFound }
            if !all { ids = [ids[0]] }
            defer { for id in ids { s.items[id] = nil } }
            return ids.map { s.items[$0]!.record }
        }
    }

    func dump(withSecrets: Bool) throws -> [FoundItem] {
        state.withLock { s in
            s.calls.append("dump")
            return s.items.sorted { $0.key < $1.key }.map {
                FoundItem(itemID: $0.key, record: $0.value.record,
                          secret: withSecrets ? (s.locked ? .unavailable(.whenUnlocked) : .value($0.value.secret.copy())) : nil)
            }
        }
    }

    func verify() throws -> VerifyReport {
        state.withLock { s in
            s.calls.append("verify")
            return VerifyReport(checked: s.items.count, problems: [])
        }
    }

    func status() throws -> KeychainStatus {
        state.withLock { s in
            s.calls.append("status")
            return KeychainStatus(state: s.locked ? .locked : .unlocked, storePath: "/memory", mountpoint: "/mnt",
                                  lockAfter: s.lockAfter, itemCounts: [.whenUnlocked: s.items.count], hasPassphrase: true)
        }
    }

    func lock() throws { state.withLock { $0.locked = true; $0.calls.append("lock") } }

    func unlock(passphrase: SecureBytes?) throws {
        try state.withLock { s in
            s.calls.append("unlock")
            guard passphrase?.unprotectedArray == Array("right".utf8) else { throw KeychainError.wrongPassphrase }
            s.locked = false
        }
    }

    func unmount() throws { state.withLock { $0.calls.append("unmount") } }

    /// As the store: only the passphrase "right" vouches for the change.
    func setAccess(key: ItemKey, list: AccessList, repin: [AccessProgram], passphrase: SecureBytes) throws -> ItemRecord {
        try state.withLock { s in
            s.calls.append("setAccess")
            guard passphrase.unprotectedArray == Array("right".utf8) else { throw KeychainError.wrongPassphrase }
            guard let (id, entry) = s.items.first(where: { $0.value.record.key == key }) else { throw KeychainError.itemNotFound }
            s.items[id]?.record.attributes.values.access = list.isAnyProgram ? nil : list
            s.calls.append("repin " + repin.map(\.description).joined(separator: ","))
            return s.items[id]?.record ?? entry.record
        }
    }

    func setLockAfter(_ seconds: Int?) throws { state.withLock { $0.lockAfter = seconds; $0.calls.append("setLockAfter") } }
    /// Echoes what arrived: the folder, the passphrase's bytes as a refusal, the action and cost as counts.
    func sync(_ action: SyncAction, folder: String?, passphrase: SecureBytes?, scryptLogN: UInt8?) throws -> SyncOutcome {
        state.withLock { $0.calls.append("sync") }
        if action == .leave { throw KeychainError.notMounted("this keychain does not sync") }
        var o = SyncOutcome()
        o.folder = folder ?? "-"
        o.device = "d"
        o.published = Int(action.rawValue); o.applied = Int(scryptLogN ?? 0); o.deleted = 3; o.conflictCopies = 4; o.deferred = 5
        o.refusals = passphrase.map { [String(decoding: $0.unprotectedArray, as: UTF8.self), "second"] } ?? []
        return o
    }
    func importItems(_ batch: ItemBatch, overwrite: Bool) throws -> ImportReport {
        state.withLock { s in
            s.calls.append("import")
            var report = ImportReport()
            for entry in batch.entries {
                let existing = s.items.first { $0.value.record.key == entry.record.key }?.key
                if existing != nil && !overwrite {
                    report.skipped.append(entry.record.key)
                    continue
                }
                let id = existing ?? s.next
                if existing == nil { s.next += 1; report.added += 1 } else { report.replaced += 1 }
                s.items[id] = batch.withSecretAndExtras(entry) { secret, extras in
                    Entry(record: entry.record, secret: SecureBytes(copying: secret), extras: extras.map { SecureBytes(copying: $0) })
                }
            }
            return report
        }
    }

    func exportItems(afterID: Int64, limit: Int) throws -> ExportPage {
        state.withLock { s in
            s.calls.append("export")
            let ids = s.items.keys.filter { $0 > afterID }.sorted()
            var page = ExportPage(batch: ItemBatch(), damaged: [], next: nil)
            for id in ids.prefix(limit) { page.batch.append(s.items[id]!.record, secret: s.items[id]!.secret, extras: s.items[id]!.extras) }
            if ids.count > limit { page.next = ids[limit - 1] }
            return page
        }
    }
}

final class ControlServerTests: XCTestCase {
    private var directory = ""
    private var socketPath = ""
    private var server: ControlServer?
    private let keychain = MemoryKeychain()
    private lazy var client = RemoteKeychainService(socketPath: socketPath)

    override func setUpWithError() throws {
        directory = NSTemporaryDirectory() + "kcfs-control-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        XCTAssertEqual(mkdir(directory, 0o700), 0)
        socketPath = directory + "/s.sock"
        let server = try ControlServer(socketPath: socketPath, service: keychain)
        server.start()
        self.server = server
    }

    override func tearDown() {
        server?.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    private func key(_ account: String) throws -> ItemKey { .generic(try GenericPasswordKey(service: "svc", account: account)) }

    func testEveryCallThroughTheSocket() throws {
        let secret = SecureBytes(copying: [0, 1, 2, 200, 10])
        _ = try client.save(key: key("a"), secret: secret, changes: AttributeChanges { $0.label = "A" }, updateExisting: false)
        _ = try client.save(key: key("b"), secret: SecureBytes(copying: Array("bee".utf8)), changes: AttributeChanges(),
                            updateExisting: false)
        XCTAssertThrowsError(try client.save(key: key("a"), secret: secret, changes: AttributeChanges(), updateExisting: false)) {
            XCTAssertEqual($0 as? KeychainError, .duplicateItem)
        }
        let found = try client.find(query: ItemQuery(kind: .generic, account: "a", service: "svc"), withSecrets: true)
        XCTAssertEqual(found.count, 1)
        XCTAssertTrue(try found[0].secretBytes().isEqual(to: secret))
        XCTAssertEqual(found[0].record.attributes.label, "A")
        XCTAssertEqual(try client.find(query: ItemQuery(kind: .generic), withSecrets: false, limit: 1).count, 1)
        XCTAssertEqual(try client.dump(withSecrets: true).map(\.record.key.account), ["a", "b"])
        XCTAssertEqual(try client.verify(), VerifyReport(checked: 2, problems: []))
        XCTAssertEqual(try client.status().state, .unlocked)
        try client.lock()
        XCTAssertEqual(try client.status().state, .locked)
        XCTAssertThrowsError(try client.find(query: ItemQuery(kind: .generic), withSecrets: true)) {
            XCTAssertEqual($0 as? KeychainError, .unavailable(.whenUnlocked))
        }
        guard case .unavailable? = try client.dump(withSecrets: true).first?.secret else { return XCTFail("dump while locked") }
        XCTAssertThrowsError(try client.unlock(passphrase: SecureBytes(copying: Array("wrong".utf8)))) {
            XCTAssertEqual($0 as? KeychainError, .wrongPassphrase)
        }
        try client.unlock(passphrase: SecureBytes(copying: Array("right".utf8)))
        try client.setLockAfter(45)
        XCTAssertEqual(try client.status().lockAfter, 45)
        try client.setLockAfter(nil)
        XCTAssertNil(try client.status().lockAfter)
        // The attribute filters cross the socket: only "a" has the label "A".
        XCTAssertEqual(try client.find(query: ItemQuery(kind: .generic, attributes: AttributeValues { $0.label = "A" }), withSecrets: false).map(\.record.key.account),
                       ["a"])
        XCTAssertThrowsError(try client.delete(query: ItemQuery(kind: .generic, attributes: AttributeValues { $0.label = "none" }), all: true)) {
            XCTAssertEqual($0 as? KeychainError, .itemNotFound)
        }
        // The first match, then every other one, each with its record.
        XCTAssertEqual(try client.delete(query: ItemQuery(kind: .generic, service: "svc"), all: false).map(\.key.account), ["a"])
        _ = try client.save(key: key("c"), secret: secret, changes: AttributeChanges(), updateExisting: false)
        let deleted = try client.delete(query: ItemQuery(kind: .generic, service: "svc"), all: true)
        XCTAssertEqual(deleted.map(\.key.account), ["b", "c"])
        XCTAssertThrowsError(try client.delete(query: ItemQuery(kind: .generic), all: true)) {
            XCTAssertEqual($0 as? KeychainError, .itemNotFound)
        }
        try client.unmount()
        XCTAssertEqual(keychain.calls.last, "unmount")
    }

    /// git's sealed extras go to the daemon with a save and come back with a find that asks for
    /// secrets; a save without them keeps them, an empty one removes them.
    func testExtrasCrossTheSocketBothWays() throws {
        let extras = SecureBytes(copying: Array("password_expiry_utc=1700000000\n".utf8) + [0, 255])
        _ = try client.save(key: key("git"), secret: SecureBytes(copying: Array("pw".utf8)), extras: extras,
                            changes: AttributeChanges(), updateExisting: false)
        let query = ItemQuery.exactly(try key("git"))
        XCTAssertTrue(try XCTUnwrap(try client.find(query: query, withSecrets: true).first?.extras).isEqual(to: extras))
        XCTAssertNil(try client.find(query: query, withSecrets: false).first?.extras, "no extras without secrets")
        _ = try client.save(key: key("git"), secret: SecureBytes(copying: Array("pw2".utf8)), changes: AttributeChanges(),
                            updateExisting: true)
        XCTAssertTrue(try XCTUnwrap(try client.find(query: query, withSecrets: true).first?.extras).isEqual(to: extras),
                      "a save without extras keeps them")
        _ = try client.save(key: key("git"), secret: SecureBytes(copying: Array("pw3".utf8)), extras: SecureBytes(),
                            changes: AttributeChanges(), updateExisting: true)
        XCTAssertNil(try client.find(query: query, withSecrets: true).first?.extras, "empty extras remove them")
    }

    func testALargeSecretAndManyItemsStream() throws {
        let big = SecureBytes(count: maxSecretBytes)
        big.withUnsafeMutableBytes { raw in for i in stride(from: 0, to: raw.count, by: 4093) { raw[i] = UInt8(i & 0xff) } }
        _ = try client.save(key: key("big"), secret: big, changes: AttributeChanges(), updateExisting: false)
        for i in 0..<50 {
            _ = try client.save(key: key("n\(i)"), secret: SecureBytes(copying: [UInt8(i)]), changes: AttributeChanges(),
                                updateExisting: false)
        }
        let all = try client.dump(withSecrets: true)
        XCTAssertEqual(all.count, 51)
        XCTAssertTrue(try all[0].secretBytes().isEqual(to: big))
    }

    /// Every item of `batch` as (account, secret, extras) text.
    private func contents(_ batch: ItemBatch) -> [String] {
        batch.entries.map { e in
            batch.withSecretAndExtras(e) { secret, extras in
                e.record.key.account + "=" + String(decoding: secret, as: UTF8.self) + (extras.map { "+" + String(decoding: $0, as: UTF8.self) } ?? "")
            }
        }
    }

    func testImportAndExportThroughTheSocketKeepSecretsAndExtras() throws {
        var batch = ItemBatch()
        for i in 0..<1_200 {
            let record = ItemRecord(key: try key("n\(i)"), attributes: ItemAttributes(AttributeValues { $0.label = "L\(i)" }, accessible: .afterFirstUnlock))
            batch.append(record, secret: SecureBytes(copying: Array("pw\(i)".utf8)),
                         extras: i % 3 == 0 ? SecureBytes(copying: Array("x\(i)".utf8)) : nil)
        }
        XCTAssertEqual(try client.importItems(batch, overwrite: false), ImportReport(added: 1_200))
        // Pages larger than one reply frame (500 items) arrive whole, extras with their items.
        let first = try client.exportItems(afterID: 0, limit: 1_000)
        XCTAssertEqual(first.batch.count, 1_000)
        XCTAssertEqual(first.next, 1_000)
        let second = try client.exportItems(afterID: try XCTUnwrap(first.next), limit: 1_000)
        XCTAssertNil(second.next)
        XCTAssertEqual(contents(first.batch) + contents(second.batch), contents(batch))
        XCTAssertEqual(second.batch.entries.last?.record.attributes.label, "L1199")

        var again = ItemBatch()
        again.append(ItemRecord(key: try key("n0"), attributes: ItemAttributes()), secret: SecureBytes(copying: Array("new".utf8)))
        again.append(ItemRecord(key: try key("fresh"), attributes: ItemAttributes()), secret: SecureBytes(copying: Array("f".utf8)))
        XCTAssertEqual(try client.importItems(again, overwrite: false), ImportReport(added: 1, skipped: [try key("n0")]))
        XCTAssertEqual(try client.importItems(again, overwrite: true), ImportReport(replaced: 2))
    }

    func testSyncActionsGoThroughTheSocketWithTheirPassphraseAndOutcome() throws {
        let o = try client.sync(.join, folder: "/f", passphrase: SecureBytes(copying: Array("pass".utf8)), scryptLogN: 11)
        XCTAssertEqual(o.folder, "/f"); XCTAssertEqual(o.device, "d")
        XCTAssertEqual([o.published, o.applied, o.deleted, o.conflictCopies, o.deferred], [3, 11, 3, 4, 5])
        XCTAssertEqual(o.refusals, ["pass", "second"])
        XCTAssertEqual(try client.sync(.exchange, folder: nil, passphrase: nil, scryptLogN: nil).folder, "-")
        XCTAssertThrowsError(try client.sync(.leave, folder: nil, passphrase: nil, scryptLogN: nil)) {
            XCTAssertEqual(($0 as? KeychainError)?.exitCode, 69)
        }
        let bad = try ControlFrame.encode(kind: ControlRequest.Kind.sync.rawValue) { $0.field(.syncAction, UInt8(9)) }
        guard case .failed(let e)? = try exchange(bad.unprotectedArray) else { return XCTFail("an unknown action is refused") }
        XCTAssertEqual(e.exitCode, 65)
    }

    func testAnAccessListChangeCarriesItsPassphraseAndPinnedProgramsThroughTheSocket() throws {
        let k = try key("guarded")
        _ = try client.save(key: k, secret: SecureBytes(copying: Array("s".utf8)), changes: AttributeChanges(), updateExisting: false)
        let list = try AccessList.anyProgram.setting([try AccessProgram(parsing: "/bin/sh")])
        XCTAssertThrowsError(try client.setAccess(key: k, list: list, repin: [], passphrase: SecureBytes(copying: Array("wrong".utf8)))) {
            XCTAssertEqual($0 as? KeychainError, .wrongPassphrase)
        }
        let record = try client.setAccess(key: k, list: list, repin: [], passphrase: SecureBytes(copying: Array("right".utf8)))
        // The rule arrives as the client pinned it: its file's identity too.
        XCTAssertEqual(record.attributes.values.access, list)
        XCTAssertEqual(try client.setAccess(key: k, list: .anyProgram, repin: [], passphrase: SecureBytes(copying: Array("right".utf8)))
            .attributes.values.access, nil)
        XCTAssertThrowsError(try client.setAccess(key: try key("absent"), list: list, repin: [], passphrase: SecureBytes(copying: Array("right".utf8)))) {
            XCTAssertEqual($0 as? KeychainError, .itemNotFound)
        }
        // A request with no passphrase is refused by the daemon before the keychain sees it.
        let bare = try ControlFrame.encode(kind: ControlRequest.Kind.setAccess.rawValue) { w in
            w.nested(.key) { WireItem.write(k, to: $0) }
            w.nested(.changes) { WireItem.write(AttributeChanges { $0.access = list }, to: $0) }
        }
        guard case .failed(let e)? = try exchange(bare.unprotectedArray) else { return XCTFail("no passphrase is refused") }
        XCTAssertEqual(e, .wrongPassphrase)
        XCTAssertEqual(keychain.calls.filter { $0 == "setAccess" }.count, 4)
        _ = try client.setAccess(key: k, list: list, repin: [.executable("/bin/sh")], passphrase: SecureBytes(copying: Array("right".utf8)))
        XCTAssertEqual(keychain.calls.last, "repin /bin/sh", "the programs to pin anew arrive")
    }

    func testAnImportTooLargeForOneFrameIsSentInParts() throws {
        var batch = ItemBatch()
        let big = SecureBytes(count: 7 << 20)
        for i in 0..<3 { batch.append(ItemRecord(key: try key("big\(i)"), attributes: ItemAttributes()), secret: big) }
        XCTAssertEqual(try client.importItems(batch, overwrite: false), ImportReport(added: 3))
        XCTAssertEqual(keychain.calls.filter { $0 == "import" }.count, 2)
        XCTAssertEqual(try client.exportItems(afterID: 0, limit: 10).batch.secretBytes, 3 * (7 << 20))
    }

    func testAnImportedKeyIsValidatedByTheDaemon() throws {
        // Built by hand: the client's own types would refuse the empty service first.
        let frame = try ControlFrame.encode(kind: ControlRequest.Kind.importItems.rawValue) { w in
            w.nested(.batchItem) { item in
                item.nested(.record) { r in
                    r.nested(.key) { k in k.field(.itemKind, UInt8(1)); k.field(.service, ""); k.field(.account, "a") }
                    r.field(.accessible, UInt8(AccessibilityClass.whenUnlocked.code))
                    r.field(.created, UInt64(0)); r.field(.modified, UInt64(0))
                }
                item.field(.secret, secret: SecureBytes(copying: Array("pw".utf8)))
            }
        }
        let reply = try exchange(frame.unprotectedArray)
        guard case .failed(let e)? = reply else { return XCTFail("\(String(describing: reply))") }
        XCTAssertEqual(e.exitCode, 65)
        XCTAssertFalse(keychain.calls.contains("import"))
    }

    func testARequestTheServerRefusesIsTheCLIsError() throws {
        // Built by hand: the client's own types would refuse the empty service first.
        let frame = try ControlFrame.encode(kind: ControlRequest.Kind.save.rawValue) { w in
            w.nested(.key) { k in k.field(.itemKind, UInt8(1)); k.field(.service, ""); k.field(.account, "a") }
        }
        let reply = try exchange(frame.unprotectedArray)
        guard case .failed(let e)? = reply else { return XCTFail("\(String(describing: reply))") }
        XCTAssertEqual(e.exitCode, 65)
        XCTAssertFalse(keychain.calls.contains("save"))
    }

    func testAnOversizeHeaderIsRefusedAtOnce() throws {
        var header = Array("KCFS".utf8) + [0, UInt8(ControlProtocol.version), 0, 1]
        header += [0x7f, 0xff, 0xff, 0xff]
        let reply = try exchange(header)
        guard case .failed(let e)? = reply else { return XCTFail("\(String(describing: reply))") }
        XCTAssertTrue(e.description.contains("over the limit"), e.description)
    }

    func testAnotherVersionGetsTheMismatchFrame() throws {
        let frame = try ControlFrame.encode(kind: ControlRequest.Kind.status.rawValue, version: 1) { _ in }
        XCTAssertThrowsError(try exchange(frame.unprotectedArray)) {
            XCTAssertEqual($0 as? KeychainError, .daemonVersionMismatch(
                running: "\(ControlProtocol.softwareVersion) (control protocol \(ControlProtocol.version))"))
        }
        XCTAssertFalse(keychain.calls.contains("status"))
    }

    func testGarbageIsRefused() throws {
        let reply = try exchange(Array("GET / HTTP/1.0\r\n\r\n".utf8))
        guard case .failed(let e)? = reply else { return XCTFail("\(String(describing: reply))") }
        XCTAssertTrue(e.description.contains("does not speak"), e.description)
    }

    /// Idle connections take no thread and are pushed out by new ones, so a lock gets through.
    func testALockGetsThroughPastManyIdleConnections() throws {
        var idle: [Int32] = []
        defer { idle.forEach { close($0) } }
        for _ in 0..<(ControlServer.maxPendingConnections * 3) {
            guard let fd = try UnixSocket.connect(path: socketPath) else { return XCTFail("connect") }
            idle.append(fd)
        }
        let started = Date()
        try client.lock()
        XCTAssertLessThan(Date().timeIntervalSince(started), 3)
        XCTAssertEqual(try client.status().state, .locked)
    }

    /// The deadline covers the whole request: a byte at a time does not keep a connection open.
    func testASlowClientIsDroppedAtTheRequestDeadline() throws {
        guard let fd = try UnixSocket.connect(path: socketPath) else { return XCTFail("connect") }
        defer { close(fd) }
        let frame = try ControlRequest.status.frame().unprotectedArray
        let started = Date()
        var closedAfter: TimeInterval?
        for byte in frame.prefix(frame.count - 1) {
            var b = byte
            if send(fd, &b, 1, Int32(MSG_NOSIGNAL)) < 0 { closedAfter = Date().timeIntervalSince(started); break }
            var probe: UInt8 = 0
            if recv(fd, &probe, 1, Int32(MSG_DONTWAIT)) == 0 { closedAfter = Date().timeIntervalSince(started); break }
            usleep(800_000)
        }
        let after = try XCTUnwrap(closedAfter, "the connection was still open after the whole trickle")
        XCTAssertGreaterThanOrEqual(after, ControlServer.requestDeadline - 1)
        XCTAssertLessThan(after, ControlServer.requestDeadline + 2)
        XCTAssertFalse(keychain.calls.contains("status"))
    }

    /// Protocol 6: the daemon's first frame, before any request, says it identified the peer;
    /// each request is answered by the service for that caller.
    func testEachConnectionIsIdentifiedAtAcceptBeforeItsRequest() throws {
        let path = directory + "/identified.sock"
        let access = AccessControl(settings: .none, log: nil)
        let seen = Mutex<[pid_t]>([])
        let keychain = self.keychain
        let server = try ControlServer(socketPath: path, serving: { caller in
            if case .peer(let peer) = caller { seen.withLock { $0.append(peer.pid) } }
            return keychain
        }, identify: { access.identifyPeer($0) })
        server.start()
        defer { server.stop() }
        guard let fd = try UnixSocket.connect(path: path) else { return XCTFail("connect") }
        defer { close(fd) }
        // Nothing sent yet: the first frame comes unasked.
        let first = try XCTUnwrap(try ControlFrame.receive(from: fd, deadline: .after(seconds: 5)))
        XCTAssertEqual(first.0.kind, ControlReply.Kind.identified.rawValue)
        XCTAssertEqual(first.0.version, ControlProtocol.version)
        _ = try RemoteKeychainService(socketPath: path).status()
        XCTAssertEqual(seen.withLock { $0 }, [getpid()], "the request was answered for this process")
    }

    /// Sends raw bytes on a fresh connection and reads the one reply, if any.
    private func exchange(_ bytes: [UInt8]) throws -> ControlReply? {
        guard let fd = try UnixSocket.connect(path: socketPath) else { throw KeychainError.io("connect") }
        defer { close(fd) }
        try RemoteKeychainService.awaitIdentified(fd, deadline: .after(seconds: 5))
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard let (header, payload) = try ControlFrame.receive(from: fd, deadline: .after(seconds: 5)) else { return nil }
        return try ControlReply(kind: header.kind, payload: payload)
    }
}
