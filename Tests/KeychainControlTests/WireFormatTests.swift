import Foundation
import XCTest
import KeychainBatch
@testable import KeychainControlProtocol
import KeychainCrypto
import KeychainModel

final class WireFormatTests: XCTestCase {
    // MARK: Helpers

    /// The header and payload of an encoded frame, as the other side reads them.
    private func split(_ frame: SecureBytes) throws -> (ControlFrame.Header, SecureBytes) {
        let bytes = frame.unprotectedArray
        let header = try ControlFrame.Header(parsing: Array(bytes[0..<ControlFrame.headerSize]))
        XCTAssertEqual(header.length, bytes.count - ControlFrame.headerSize)
        return (header, SecureBytes(copying: bytes[ControlFrame.headerSize...]))
    }

    private func roundTrip(_ request: ControlRequest) throws -> ControlRequest {
        let (header, payload) = try split(try request.frame())
        XCTAssertEqual(header.version, ControlProtocol.version)
        return try ControlRequest(kind: header.kind, payload: payload)
    }

    private func roundTrip(_ reply: ControlReply) throws -> ControlReply {
        let (header, payload) = try split(try reply.frame())
        return try ControlReply(kind: header.kind, payload: payload)
    }

    /// A save request written field by field, as a client that skips validation would send it.
    private func rawSave(_ key: (WireWriter) -> Void) throws -> SecureBytes {
        let frame = try ControlFrame.encode(kind: ControlRequest.Kind.save.rawValue) { w in
            w.nested(.key, key)
            w.field(.secret, secret: SecureBytes(copying: Array("pw".utf8)))
        }
        return try split(frame).1
    }

    private func assertRefused(_ payload: SecureBytes, exitCode: Int32, _ text: String, line: UInt = #line) {
        XCTAssertThrowsError(try ControlRequest(kind: ControlRequest.Kind.save.rawValue, payload: payload), line: line) { error in
            guard let e = error as? KeychainError else { return XCTFail("not a KeychainError: \(error)", line: line) }
            XCTAssertEqual(e.exitCode, exitCode, "\(e)", line: line)
            XCTAssertTrue(e.description.contains(text), "\(e.description)", line: line)
        }
    }

    private let generic = ItemKey.generic(try! GenericPasswordKey(service: "svc", account: "alice", accessGroup: "grp"))
    private let internet = ItemKey.internet(try! InternetPasswordKey(
        server: "example.com", port: 8443, path: "a/b", protocol: .https, authenticationType: .default,
        securityDomain: "realm", account: "bob"))

    private var record: ItemRecord {
        ItemRecord(key: internet, attributes: ItemAttributes(AttributeValues {
            $0.label = "Label"; $0.comment = "c"; $0.description = "d"
            $0.generic = Data([0, 1, 2, 255]); $0.creator = try! FourCharCode("crtr"); $0.type = try! FourCharCode("type")
        }, accessible: .afterFirstUnlock,
           created: Date(timeIntervalSinceReferenceDate: 12345.678901), modified: Date(timeIntervalSinceReferenceDate: 99999.5)))
    }

    // MARK: Round trips

    func testSaveRoundTripKeepsTheSecretBytesExactly() throws {
        let secret = SecureBytes(copying: [0, 10, 13, 255, 0x80] + Array("tail".utf8))
        let changes = try AttributeChanges(accessible: .whenUnlockedThisDeviceOnly) { $0.label = "L"; $0.generic = Data([9, 0]); $0.creator = try FourCharCode("abcd") }
        for key in [generic, internet] {
            guard case .save(let k, let s, _, let c, let u) = try roundTrip(.save(key: key, secret: secret, extras: nil, changes: changes,
                                                                                updateExisting: true)) else {
                return XCTFail("not a save")
            }
            XCTAssertEqual(k, key)
            XCTAssertTrue(s.isEqual(to: secret))
            XCTAssertEqual(c, changes)
            XCTAssertTrue(u)
        }
    }

    func testSaveRoundTripCarriesTheExtrasOrTheirAbsence() throws {
        let extras = SecureBytes(copying: [0, 1, 255] + Array("oauth_refresh_token=r".utf8))
        for sent in [extras, SecureBytes(), nil] {
            guard case .save(_, _, let got, _, _) = try roundTrip(.save(key: internet, secret: SecureBytes(copying: [7]), extras: sent,
                                                                      changes: AttributeChanges(), updateExisting: true)) else {
                return XCTFail("not a save")
            }
            switch (sent, got) {
            case (let a?, let b?): XCTAssertTrue(a.isEqual(to: b))
            case (nil, nil): break
            default: XCTFail("\(String(describing: sent?.count)) extras came back as \(String(describing: got?.count))")
            }
        }
        guard case .item(let item) = try roundTrip(.item(FoundItem(itemID: 1, record: record, secret: .value(SecureBytes(copying: [1])),
                                                                   extras: extras))) else {
            return XCTFail("item")
        }
        XCTAssertTrue(try XCTUnwrap(item.extras).isEqual(to: extras))
    }

    /// Both branches added tags after 69; each keeps its own number (a tag is never renumbered).
    func testTheTagsAfterStatusAreDistinct() {
        let tags: [WireTag] = [.daemonPID, .daemonVersion, .memoryLocked, .allowRoot, .all, .extras]
        XCTAssertEqual(tags.map(\.rawValue), [70, 71, 72, 73, 74, 75])
    }

    func testEmptySecretAndNoChanges() throws {
        guard case .save(_, let s, _, let c, let u) = try roundTrip(.save(key: generic, secret: SecureBytes(), extras: nil,
                                                                        changes: AttributeChanges(), updateExisting: false)) else {
            return XCTFail("not a save")
        }
        XCTAssertEqual(s.count, 0)
        XCTAssertEqual(c, AttributeChanges())
        XCTAssertFalse(u)
    }

    func testQueriesRoundTripWithTheirUnsetFields() throws {
        let queries = [
            ItemQuery(kind: .generic),
            ItemQuery(kind: .generic, account: "", service: "svc"),
            ItemQuery(kind: .internet, account: "a", server: "s", port: 0, path: "/x//y/", protocol: .ssh,
                      authenticationType: try AuthenticationType(parsing: "html-form"), securityDomain: ""),
            .exactly(internet),
            ItemQuery(kind: .generic, service: "svc", attributes: try AttributeValues {
                $0.label = "L"; $0.comment = ""; $0.description = "D"
                $0.generic = Data([0, 255]); $0.creator = try FourCharCode("abcd"); $0.type = try FourCharCode("t y ")
            }),
        ]
        for q in queries {
            guard case .find(let got, let withSecrets, let limit) = try roundTrip(.find(query: q, withSecrets: true, limit: 3)) else {
                return XCTFail("not a find")
            }
            XCTAssertEqual(got, q)
            XCTAssertTrue(withSecrets)
            XCTAssertEqual(limit, 3)
            for all in [false, true] {
                guard case .delete(let deleted, let gotAll) = try roundTrip(.delete(query: q, all: all)) else {
                    return XCTFail("not a delete")
                }
                XCTAssertEqual(deleted, q)
                XCTAssertEqual(gotAll, all)
            }
        }
        guard case .find(_, false, nil) = try roundTrip(.find(query: queries[0], withSecrets: false, limit: nil)) else {
            return XCTFail("limit and withSecrets")
        }
    }

    func testRequestsWithoutArguments() throws {
        guard case .dump(true) = try roundTrip(.dump(withSecrets: true)) else { return XCTFail("dump") }
        guard case .verify = try roundTrip(.verify) else { return XCTFail("verify") }
        guard case .status = try roundTrip(.status) else { return XCTFail("status") }
        guard case .lock = try roundTrip(.lock) else { return XCTFail("lock") }
        guard case .unmount = try roundTrip(.unmount) else { return XCTFail("unmount") }
        guard case .setLockAfter(nil) = try roundTrip(.setLockAfter(seconds: nil)) else { return XCTFail("lock-after never") }
        guard case .setLockAfter(90?) = try roundTrip(.setLockAfter(seconds: 90)) else { return XCTFail("lock-after 90") }
        guard case .unlock(nil) = try roundTrip(.unlock(passphrase: nil)) else { return XCTFail("unlock without") }
        guard case .unlock(let p?) = try roundTrip(.unlock(passphrase: SecureBytes(copying: Array("pass phrase".utf8)))) else {
            return XCTFail("unlock with")
        }
        XCTAssertEqual(p.unprotectedArray, Array("pass phrase".utf8))
    }

    func testRepliesRoundTrip() throws {
        guard case .saved(let r) = try roundTrip(.saved(record)) else { return XCTFail("saved") }
        XCTAssertEqual(r, record)
        guard case .end(7) = try roundTrip(.end(count: 7)) else { return XCTFail("end") }
        guard case .deleted(let d) = try roundTrip(.deleted(record)) else { return XCTFail("deleted") }
        XCTAssertEqual(d, record)
        guard case .done = try roundTrip(.done) else { return XCTFail("done") }
        let report = VerifyReport(checked: 5, problems: [IntegrityProblem(itemID: -3, reason: "bad seal"),
                                                         IntegrityProblem(itemID: 9, reason: "")])
        guard case .verified(let v) = try roundTrip(.verified(report)) else { return XCTFail("verified") }
        XCTAssertEqual(v, report)
        for status in [
            KeychainStatus(state: .locked, storePath: "/s", mountpoint: "/m", lockAfter: 30,
                           itemCounts: [.always: 2, .whenUnlocked: 5], hasPassphrase: true),
            KeychainStatus(state: .locked, storePath: "/s", itemCounts: [:], hasPassphrase: true, passphraseWait: 5),
            KeychainStatus(state: .beforeFirstUnlock, storePath: "/s", itemCounts: [:], hasPassphrase: false),
            KeychainStatus(state: .unlocked, storePath: "/s", mountpoint: "/m", itemCounts: [.whenUnlocked: 1], hasPassphrase: true,
                           memory: MemoryStatus(lockedBytes: 65536, unlockedBytes: 16384, limit: 1 << 20, refusals: 3,
                                                cachedSecrets: 12, cachedBytes: 768, cacheBudget: 262_144)),
            KeychainStatus(state: .unlocked, storePath: "/s", itemCounts: [:], hasPassphrase: true,
                           memory: MemoryStatus(lockedBytes: 0, unlockedBytes: 0, limit: nil, refusals: 0,
                                                cachedSecrets: 0, cachedBytes: 0, cacheBudget: 16 << 20)),
        ] {
            guard case .status(let s) = try roundTrip(.status(status)) else { return XCTFail("status") }
            XCTAssertEqual(s, status)
        }
    }

    func testFoundItemsRoundTripWithEachKindOfSecret() throws {
        let secrets: [FoundSecret?] = [.value(SecureBytes(copying: [1, 2, 3])), .value(SecureBytes()),
                                       .unavailable(.whenUnlocked), .damaged("tampered"), .refused("/s/a: not listed"), nil]
        for secret in secrets {
            guard case .item(let item) = try roundTrip(.item(FoundItem(itemID: 42, record: record, secret: secret))) else {
                return XCTFail("item")
            }
            XCTAssertEqual(item.itemID, 42)
            XCTAssertEqual(item.record, record)
            switch (secret, item.secret) {
            case (.value(let a)?, .value(let b)?): XCTAssertTrue(a.isEqual(to: b))
            case (.unavailable(let a)?, .unavailable(let b)?): XCTAssertEqual(a, b)
            case (.damaged(let a)?, .damaged(let b)?): XCTAssertEqual(a, b)
            case (.refused(let a)?, .refused(let b)?): XCTAssertEqual(a, b)
            case (nil, nil): break
            default: XCTFail("\(String(describing: secret)) came back as \(String(describing: item.secret))")
            }
        }
    }

    /// A key the store holds from before a rule existed still lists (replies are not re-validated).
    func testStoredKeysAreTakenAsTheyAre() throws {
        let old = ItemRecord(key: .generic(GenericPasswordKey(storedService: "", account: "a", accessGroup: "")),
                             attributes: ItemAttributes(created: Date(timeIntervalSinceReferenceDate: 0)))
        guard case .saved(let r) = try roundTrip(.saved(old)) else { return XCTFail("saved") }
        XCTAssertEqual(r, old)
    }

    func testEveryErrorCrossesWithItsExitCode() throws {
        let errors: [KeychainError] = [
            .itemNotFound, .duplicateItem, .wrongPassphrase, .tooManyAttempts(retryAfter: 20),
            .unavailable(className: "when-unlocked"), .integrityFailure("x"), .invalidInput("bad"), .nameTooLong("long"),
            .secretTooLarge(20_000_000), .noSuchStore("/s"), .notAKeychain("no"), .storeExists("/s"), .storeBusy("busy"),
            .notMounted("nm"), .daemonVersionMismatch(running: "9"), .mountFailed("mf"), .diskFull, .io("io"),
            .accessDenied("cat is not on the list"), .fileExists("/b.kcb exists"), .mountpointNotEmpty("/mnt is not empty"),
        ]
        for e in errors {
            guard case .failed(let got) = try roundTrip(.failed(e)) else { return XCTFail("failed") }
            XCTAssertEqual(got, e)
            XCTAssertEqual(got.exitCode, e.exitCode)
        }
    }

    func testAnErrorCaseFromANewerDaemonArrivesAsItsText() throws {
        let frame = try ControlFrame.encode(kind: ControlReply.Kind.failed.rawValue) { w in
            w.field(.errorCase, UInt16(999))
            w.field(.errorText, "something new went wrong")
        }
        let (header, payload) = try split(frame)
        guard case .failed(let e) = try ControlReply(kind: header.kind, payload: payload) else { return XCTFail("failed") }
        XCTAssertEqual(e, .io("something new went wrong"))
    }

    // MARK: Versions

    func testAFrameOfAnotherVersionIsAVersionMismatch() throws {
        let (a, b) = try socketPair()
        defer { close(a); close(b) }
        let frame = try ControlFrame.encode(kind: ControlReply.Kind.done.rawValue, version: 99) { _ in }
        try ControlFrame.send(frame, to: a, deadline: .after(seconds: 2))
        XCTAssertThrowsError(try ControlFrame.receive(from: b, deadline: .after(seconds: 2))) { error in
            XCTAssertEqual(error as? KeychainError, .daemonVersionMismatch(running: "unknown (control protocol 99)"))
            XCTAssertEqual((error as? KeychainError)?.exitCode, 76)
        }
    }

    func testAMismatchFrameNamesTheDaemonsVersionInOneLine() throws {
        let (a, b) = try socketPair()
        defer { close(a); close(b) }
        let frame = try ControlFrame.encode(kind: ControlFrame.versionMismatchKind, version: 7) { w in
            w.field(.softwareVersion, "9.9.9")
            w.field(.protocolVersion, UInt16(7))
        }
        try ControlFrame.send(frame, to: a, deadline: .after(seconds: 2))
        XCTAssertThrowsError(try ControlFrame.receive(from: b, deadline: .after(seconds: 2))) { error in
            let e = error as? KeychainError
            XCTAssertEqual(e, .daemonVersionMismatch(running: "9.9.9 (control protocol 7)"))
            XCTAssertEqual(e?.description, "the running daemon is version 9.9.9 (control protocol 7); unmount and mount again")
            XCTAssertFalse(e?.description.contains("\n") ?? true)
        }
        // What this version answers has the same frozen layout.
        let (header, payload) = try split(ControlFrame.versionMismatch())
        XCTAssertEqual(header.kind, ControlFrame.versionMismatchKind)
        XCTAssertEqual(ControlFrame.mismatchError(header, payload: payload),
                       .daemonVersionMismatch(running: "\(ControlProtocol.softwareVersion) (control protocol \(ControlProtocol.version))"))
    }

    func testImportAndExportRoundTrip() throws {
        var batch = ItemBatch()
        batch.append(record, secret: SecureBytes(copying: [0, 255, 10]), extras: SecureBytes(copying: Array("expiry=1".utf8)))
        batch.append(ItemRecord(key: generic, attributes: ItemAttributes()), secret: SecureBytes())
        guard case .importItems(let back, let overwrite) = try roundTrip(.importItems(batch: batch, overwrite: true)) else {
            return XCTFail("kind")
        }
        XCTAssertTrue(overwrite)
        XCTAssertEqual(back.entries.map(\.record), batch.entries.map(\.record))
        XCTAssertEqual(back.withSecretAndExtras(back.entries[0]) { [Array($0), $1.map { Array($0) } ?? []] },
                       [[0, 255, 10], Array("expiry=1".utf8)])
        XCTAssertEqual(back.entries[1].secret.count, 0)
        XCTAssertNil(back.entries[1].extras)
        guard case .exportItems(let after, let limit) = try roundTrip(.exportItems(afterID: 42, limit: 7)) else { return XCTFail("kind") }
        XCTAssertEqual(after, 42); XCTAssertEqual(limit, 7)

        let report = ImportReport(added: 3, replaced: 1, skipped: [generic, internet])
        guard case .imported(let r) = try roundTrip(.imported(report)) else { return XCTFail("kind") }
        XCTAssertEqual(r, report)
        guard case .exported(let part) = try roundTrip(.exported(batch)) else { return XCTFail("kind") }
        XCTAssertEqual(part.secretBytes, batch.secretBytes)
        let damaged = [IntegrityProblem(itemID: 9, reason: "bad")]
        guard case .exportEnd(let count, let d, let next) = try roundTrip(.exportEnd(count: 2, damaged: damaged, next: 77)) else {
            return XCTFail("kind")
        }
        XCTAssertEqual(count, 2); XCTAssertEqual(d, damaged); XCTAssertEqual(next, 77)
        guard case .exportEnd(_, _, nil) = try roundTrip(.exportEnd(count: 0, damaged: [], next: nil)) else { return XCTFail("last page") }
    }

    /// A sync's outcome: its counts, its refusals and, apart from them, the note that this
    /// device's own directory was written again (`sync git` tells the two apart by field).
    func testASyncOutcomeRoundTrips() throws {
        var o = SyncOutcome()
        o.folder = "/f"; o.device = "ab12"
        o.published = 1; o.applied = 2; o.deleted = 3; o.conflictCopies = 4; o.deferred = 5
        o.refusals = ["one", "two"]
        o.ownDirectoryRewritten = "written again"
        guard case .synced(let back) = try roundTrip(.synced(o)) else { return XCTFail("kind") }
        XCTAssertEqual(back, o)
        o.ownDirectoryRewritten = nil
        guard case .synced(let none) = try roundTrip(.synced(o)) else { return XCTFail("kind") }
        XCTAssertEqual(none, o)
    }

    func testTheBackupKindsAreNumberedAfterTheOthers() {
        XCTAssertEqual(ControlRequest.Kind.importItems.rawValue, 11)
        XCTAssertEqual(ControlRequest.Kind.exportItems.rawValue, 12)
        XCTAssertEqual(ControlReply.Kind.imported.rawValue, 0x8008)
        XCTAssertEqual(ControlReply.Kind.identified.rawValue, 0x800B)
        XCTAssertEqual(ControlProtocol.version, 10)
    }

    func testTheHeaderLayoutIsFrozen() throws {
        let frame = try ControlFrame.encode(kind: 0x0102, version: 0x0304) { w in w.field(.count, UInt64(1)) }
        let b = frame.unprotectedArray
        XCTAssertEqual(Array(b[0..<12]), Array("KCFS".utf8) + [3, 4, 1, 2, 0, 0, 0, 14])
        XCTAssertEqual(Array(b[12...]), [0, 62, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1])
    }

    // MARK: Truncated, malformed and oversize frames

    func testTruncatedFramesAreErrorsNotHangs() throws {
        let frame = try ControlReply.end(count: 3).frame().unprotectedArray
        for cut in [1, 5, ControlFrame.headerSize, frame.count - 1] {
            let (a, b) = try socketPair()
            defer { close(b) }
            _ = frame.prefix(cut).withUnsafeBytes { send(a, $0.baseAddress, $0.count, 0) }
            close(a)
            XCTAssertThrowsError(try ControlFrame.receive(from: b, deadline: .after(seconds: 2)), "cut at \(cut)") { error in
                XCTAssertTrue("\(error)".contains("closed in the middle"), "\(error)")
            }
        }
        // Nothing at all is a clean end.
        let (a, b) = try socketPair()
        close(a)
        XCTAssertNil(try ControlFrame.receive(from: b, deadline: .after(seconds: 2)))
        close(b)
    }

    func testASilentPeerTimesOutAtTheDeadline() throws {
        let (a, b) = try socketPair()
        defer { close(a); close(b) }
        let started = Date()
        XCTAssertThrowsError(try ControlFrame.receive(from: b, deadline: .after(seconds: 0.3)))
        XCTAssertLessThan(Date().timeIntervalSince(started), 2)
    }

    func testMalformedPayloads() throws {
        // A field that claims more bytes than the payload holds.
        XCTAssertThrowsError(try WireFields(SecureBytes(copying: [0, 13, 0, 0, 0, 9, 65]))) {
            XCTAssertTrue("\($0)".contains("malformed"))
        }
        // A field header cut short.
        XCTAssertThrowsError(try WireFields(SecureBytes(copying: [0, 13, 0])))
        // A single-valued field twice, a wrong width, text that is not UTF-8, a missing field.
        let twice = try split(ControlFrame.encode(kind: 1) { w in w.field(.count, UInt64(1)); w.field(.count, UInt64(2)) }).1
        XCTAssertThrowsError(try ControlReply(kind: ControlReply.Kind.end.rawValue, payload: twice))
        let narrow = try split(ControlFrame.encode(kind: 1) { w in w.field(.count, UInt16(1)) }).1
        XCTAssertThrowsError(try ControlReply(kind: ControlReply.Kind.end.rawValue, payload: narrow))
        let badText = try rawSave { w in
            w.field(.itemKind, UInt8(1))
            w.field(.service, bytes: [0xff, 0xfe])
            w.field(.account, "a")
        }
        assertRefused(badText, exitCode: 74, "not UTF-8")
        let noAccount = try rawSave { w in w.field(.itemKind, UInt8(1)); w.field(.service, "s") }
        assertRefused(noAccount, exitCode: 74, "missing")
        XCTAssertThrowsError(try ControlRequest(kind: 77, payload: SecureBytes()))
        XCTAssertThrowsError(try ControlReply(kind: 77, payload: SecureBytes()))
    }

    func testOversizeFrames() throws {
        var header = Array("KCFS".utf8) + [0, UInt8(ControlProtocol.version), 0, 1]
        let n = UInt32(ControlFrame.maxPayload + 1)
        header += [UInt8(n >> 24), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)]
        XCTAssertThrowsError(try ControlFrame.Header(parsing: header)) { XCTAssertTrue("\($0)".contains("over the limit")) }
        header[8...11] = [0xff, 0xff, 0xff, 0xff]
        XCTAssertThrowsError(try ControlFrame.Header(parsing: header))
        // The largest legal request fits: a 16 MiB secret and long names and attributes.
        let big = SecureBytes(count: maxSecretBytes)
        let long = String(repeating: "x", count: 255)
        let frame = try ControlRequest.save(key: .generic(try GenericPasswordKey(service: long, account: long, accessGroup: long)),
                                            secret: big, extras: nil, changes: AttributeChanges { $0.label = String(repeating: "l", count: 60_000); $0.generic = Data(count: 65_536) },
                                            updateExisting: true).frame()
        XCTAssertLessThanOrEqual(frame.count - ControlFrame.headerSize, ControlFrame.maxPayload)
        // One byte more of secret is refused before anything is sent.
        XCTAssertThrowsError(try ControlRequest.save(key: generic, secret: SecureBytes(count: maxSecretBytes + 1), extras: nil,
                                                     changes: AttributeChanges(), updateExisting: false).frame()) {
            XCTAssertEqual($0 as? KeychainError, .secretTooLarge(maxSecretBytes + 1))
        }
        // So is a payload over the cap made of attributes.
        XCTAssertThrowsError(try ControlRequest.save(key: generic, secret: big, extras: nil,
                                                     changes: AttributeChanges { $0.generic = Data(count: 2 << 20) },
                                                     updateExisting: false).frame()) {
            XCTAssertTrue("\($0)".contains("over the limit"))
        }
    }

    // MARK: Validation of requests by the CLI's and the tree's rules

    func testInvalidKeysAreRefusedWithTheCLIsErrors() throws {
        assertRefused(try rawSave { w in w.field(.itemKind, UInt8(1)); w.field(.service, ""); w.field(.account, "a") },
                      exitCode: 65, "service must not be empty")
        let long = String(repeating: "n", count: 256)
        assertRefused(try rawSave { w in w.field(.itemKind, UInt8(1)); w.field(.service, "s"); w.field(.account, long) },
                      exitCode: 66, "limit is 255")
        assertRefused(try rawSave { w in w.field(.itemKind, UInt8(1)); w.field(.service, long); w.field(.account, "a") },
                      exitCode: 66, "limit is 255")
        // Escaping counts: 100 `%` are 300 bytes as a file name.
        assertRefused(try rawSave { w in
            w.field(.itemKind, UInt8(1)); w.field(.service, "s"); w.field(.account, String(repeating: "%", count: 100))
        }, exitCode: 66, "once escaped")
        assertRefused(try rawSave { w in w.field(.itemKind, UInt8(9)); w.field(.service, "s"); w.field(.account, "a") },
                      exitCode: 65, "unknown item kind")

        func internetKey(server: String = "example.com", port: UInt16 = 0, proto: String? = "htps",
                         path: String = "") -> (WireWriter) -> Void {
            { w in
                w.field(.itemKind, UInt8(2)); w.field(.server, server); w.field(.account, "a"); w.field(.port, port)
                w.field(.path, path)
                if let proto { w.field(.internetProtocol, proto) }
            }
        }
        assertRefused(try rawSave(internetKey(server: "")), exitCode: 65, "server must not be empty")
        assertRefused(try rawSave(internetKey(proto: "ab")), exitCode: 65, "not a four-character code")
        assertRefused(try rawSave(internetKey(proto: "a/bc")), exitCode: 65, "not a four-character code")
        assertRefused(try rawSave(internetKey(proto: "ht\u{0}s")), exitCode: 65, "not a four-character code")
        assertRefused(try rawSave(internetKey(proto: "zzzz")), exitCode: 65, "no well-known port")
        assertRefused(try rawSave(internetKey(path: "a/" + long)), exitCode: 66, "path segment")
        assertRefused(try rawSave(internetKey(server: long)), exitCode: 66, "limit is 255")

        // The same keys are accepted where the CLI accepts them: port 0 means the protocol's port.
        let ok = try ControlRequest(kind: ControlRequest.Kind.save.rawValue, payload: try rawSave(internetKey(proto: "ssh ")))
        guard case .save(.internet(let key), _, _, _, _) = ok else { return XCTFail("save") }
        XCTAssertEqual(key.port, 22)
        XCTAssertEqual(key.protocol, .ssh)
    }

    func testInvalidAttributesAreRefused() throws {
        func save(_ changes: @escaping (WireWriter) -> Void) throws -> SecureBytes {
            try split(ControlFrame.encode(kind: ControlRequest.Kind.save.rawValue) { w in
                w.nested(.key) { k in k.field(.itemKind, UInt8(1)); k.field(.service, "s"); k.field(.account, "a") }
                w.nested(.changes, changes)
            }).1
        }
        assertRefused(try save { $0.field(.accessible, UInt8(99)) }, exitCode: 65, "accessibility class")
        assertRefused(try save { $0.field(row("creator"), bytes: Array("toolong".utf8)) }, exitCode: 65, "four-character code")
        assertRefused(try save { $0.field(row("type"), bytes: Array("a,bc".utf8)) }, exitCode: 65, "four-character code")
    }

    func testInvalidQueryFiltersAndLockAfterAreRefused() throws {
        func delete(_ filters: @escaping (WireWriter) -> Void) throws -> SecureBytes {
            try split(ControlFrame.encode(kind: ControlRequest.Kind.delete.rawValue) { w in
                w.nested(.query) { q in q.field(.itemKind, UInt8(1)); filters(q) }
                w.field(.all, true)
            }).1
        }
        for (filters, text) in [({ (w: WireWriter) in w.field(row("creator"), bytes: Array("toolong".utf8)) }, "four-character code"),
                                ({ (w: WireWriter) in w.field(row("type"), bytes: Array("a,bc".utf8)) }, "four-character code"),
                                ({ (w: WireWriter) in w.field(row("label"), bytes: [0xff]) }, "not UTF-8")] {
            XCTAssertThrowsError(try ControlRequest(kind: ControlRequest.Kind.delete.rawValue, payload: try delete(filters))) {
                XCTAssertTrue("\($0)".contains(text), "\($0)")
            }
        }
        let all2 = try split(ControlFrame.encode(kind: ControlRequest.Kind.delete.rawValue) { w in
            w.nested(.query) { q in q.field(.itemKind, UInt8(1)) }
            w.field(.all, UInt8(2))
        }).1
        XCTAssertThrowsError(try ControlRequest(kind: ControlRequest.Kind.delete.rawValue, payload: all2))
        let zero = try split(ControlFrame.encode(kind: ControlRequest.Kind.setLockAfter.rawValue) { w in
            w.field(.lockAfter, UInt64(0))
        }).1
        XCTAssertThrowsError(try ControlRequest(kind: ControlRequest.Kind.setLockAfter.rawValue, payload: zero)) {
            XCTAssertEqual(($0 as? KeychainError)?.exitCode, 65)
        }
    }

    private func socketPair() throws -> (Int32, Int32) {
        var fds: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0 else { throw KeychainError.io("socketpair") }
        for fd in fds { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        return (fds[0], fds[1])
    }
}

/// The table's row of that name.
func row(_ name: String) -> ItemAttribute { ItemAttribute.named(name)! }
