import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStore
import XCTest
@testable import KeychainBackup

private func secure(_ text: String) -> SecureBytes { SecureBytes(copying: Array(text.utf8)) }
private let cheap = ScryptParameters(logN: 10)
private let passphrase = secure("backup passphrase")

private func generic(_ service: String, _ account: String, group: String = "") throws -> ItemKey {
    .generic(try GenericPasswordKey(service: service, account: account, accessGroup: group))
}

private func assertError<T>(_ matches: (KeychainError) -> Bool, _ what: String, _ body: @autoclosure () throws -> T,
                            file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertThrowsError(try body(), file: file, line: line) { error in
        guard let e = error as? KeychainError, matches(e) else {
            return XCTFail("expected \(what), got \(error)", file: file, line: line)
        }
    }
}

private func isIntegrity(_ e: KeychainError) -> Bool { if case .integrityFailure = e { true } else { false } }
private func isInvalid(_ e: KeychainError) -> Bool { if case .invalidInput = e { true } else { false } }
private func isWrongPassphrase(_ e: KeychainError) -> Bool { e == .wrongPassphrase }

final class BackupFileTests: XCTestCase {

    /// Two generic items (one with every attribute and a binary secret, one with none and an
    /// empty secret) and an internet item with a path, variant and access group.
    private func sample() throws -> (BackupPayload, [(ItemRecord, [UInt8])]) {
        let full = ItemAttributes(try AttributeValues {
            $0.label = "Label ü"; $0.comment = "a\ncomment"; $0.description = "desc"
            $0.generic = Data([0, 1, 255]); $0.creator = try FourCharCode("abcd"); $0.type = try FourCharCode("wxyz")
        }, accessible: .always,
           created: Date(timeIntervalSinceReferenceDate: 12345.678901234), modified: Date(timeIntervalSinceReferenceDate: 99999.000001))
        let web = try InternetPasswordKey(server: "example.org", port: 8443, path: "a/b", protocol: .http,
                                          authenticationType: AuthenticationType(parsing: "html-form"),
                                          securityDomain: "realm", account: "carol", accessGroup: "team")
        let items: [(ItemRecord, [UInt8])] = [
            (ItemRecord(key: try generic("github", "alice"), attributes: full), [0, 0x0a, 0xff, 0x00, 0x41]),
            (ItemRecord(key: try generic("%/.", ""), attributes: ItemAttributes(accessible: .afterFirstUnlock)), []),
            (ItemRecord(key: .internet(web), attributes: ItemAttributes(accessible: .whenUnlocked)), Array("hunter2".utf8)),
        ]
        var payload = BackupPayload()
        for (r, s) in items { payload.append(r, secret: SecureBytes(copying: s)) }
        return (payload, items)
    }

    private func sealedSample(chunkBytes: Int = BackupFile.defaultChunkBytes) throws -> [UInt8] {
        try BackupFile.seal(try sample().0, passphrase: passphrase, scrypt: cheap, chunkBytes: chunkBytes)
    }

    func testRoundTripKeepsEveryFieldAndSecretExactly() throws {
        let (payload, items) = try sample()
        XCTAssertEqual(payload.count, 3)
        let file = try BackupFile.seal(payload, passphrase: passphrase, scrypt: cheap)
        let batch = try BackupFile.open(file, named: "f", passphrase: secure("backup passphrase"))
        XCTAssertEqual(batch.count, items.count)
        for (entry, (record, secret)) in zip(batch.entries, items) {
            XCTAssertEqual(entry.record, record)
            batch.withSecret(entry) { XCTAssertEqual(Array($0), secret) }
        }
    }

    /// A backup made by an earlier version may hold an internet item deeper than PATH_MAX, which
    /// the tree could not open: import refuses it as too long, as the CLI, the tree and git do.
    func testAnItemDeeperThanPathMaxIsRefusedAsTooLong() throws {
        let deep = Array(repeating: String(repeating: "s", count: 250), count: 17).joined(separator: "/")
        let key = InternetPasswordKey(storedServer: "example.org", port: 443, path: deep, protocol: .https,
                                      authenticationType: .default, securityDomain: "", account: "alice", accessGroup: "")
        var payload = BackupPayload()
        payload.append(ItemRecord(key: .internet(key), attributes: ItemAttributes()), secret: secure("pw"))
        let file = try BackupFile.seal(payload, passphrase: passphrase, scrypt: cheap)
        assertError({ if case .nameTooLong(let m) = $0 { m.contains("PATH_MAX") } else { false } }, "nameTooLong",
                    try BackupFile.open(file, named: "f", passphrase: passphrase))
    }

    func testGitsExtrasRoundTripWithTheirItem() throws {
        var payload = BackupPayload()
        let record = ItemRecord(key: try generic("git", "u"), attributes: ItemAttributes(accessible: .afterFirstUnlock))
        payload.append(record, secret: secure("pw"), extras: secure("password_expiry_utc=1900000000\noauth_refresh_token=rt"))
        payload.append(record, secret: secure("pw2"))
        let file = try BackupFile.seal(payload, passphrase: passphrase, scrypt: cheap)
        XCTAssertNil(String(decoding: file, as: UTF8.self).range(of: "oauth_refresh_token"))
        let batch = try BackupFile.open(file, named: "f", passphrase: passphrase)
        let found = batch.entries.map { e in
            batch.withSecretAndExtras(e) { s, x in [String(decoding: s, as: UTF8.self), x.map { String(decoding: $0, as: UTF8.self) } ?? "-"] }
        }
        XCTAssertEqual(found, [["pw", "password_expiry_utc=1900000000\noauth_refresh_token=rt"], ["pw2", "-"]])
    }

    func testRoundTripAcrossManySmallChunks() throws {
        var payload = BackupPayload()
        for i in 0..<200 {
            let r = ItemRecord(key: try generic("svc", "acct\(i)"), attributes: ItemAttributes(accessible: .whenUnlocked))
            payload.append(r, secret: secure(String(repeating: "s", count: i)))
        }
        let file = try BackupFile.seal(payload, passphrase: passphrase, scrypt: cheap, chunkBytes: 100)
        let batch = try BackupFile.open(file, named: "f", passphrase: passphrase)
        XCTAssertEqual(batch.count, 200)
        batch.withSecret(batch.entries[199]) { XCTAssertEqual($0.count, 199) }
        XCTAssertEqual(batch.entries[123].record.key, try generic("svc", "acct123"))
    }

    /// The streaming writer export uses: any split of the items into appends, and any chunk
    /// size (the count's chunk first, chunks exactly full, a last chunk of one byte), gives a
    /// file `open` reads whole, of the size `seal` gives, and a truncated one still fails.
    func testWriterMatchesSealForEverySplitAndChunkSize() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("kcfs-writer-\(getpid())").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var records: [(ItemRecord, SecureBytes)] = []
        for i in 0..<40 {
            records.append((ItemRecord(key: try generic("svc", "acct\(i)"), attributes: ItemAttributes(accessible: .whenUnlocked)),
                            secure(String(repeating: "s", count: i))))
        }
        var whole = BackupPayload()
        for (r, s) in records { whole.append(r, secret: s) }
        let payloadBytes = whole.buffer.count
        for chunkBytes in [16, 17, 100, payloadBytes - 1, payloadBytes, payloadBytes + 1, 1 << 20] {
            for itemsPerAppend in [0, 1, 7, 40] {
                let path = "\(dir)/b.kcb"
                let writer = try BackupFile.Writer(path: path, passphrase: passphrase, scrypt: cheap, chunkBytes: chunkBytes)
                if itemsPerAppend > 0 {
                    for start in stride(from: 0, to: records.count, by: itemsPerAppend) {
                        var part = BackupPayload()
                        for (r, s) in records[start..<min(start + itemsPerAppend, records.count)] { part.append(r, secret: s) }
                        try writer.append(part)
                    }
                }
                try writer.finish()
                let file = try BackupFile.read(from: path)
                let want = itemsPerAppend > 0 ? records.count : 0
                let sealed = try BackupFile.seal(itemsPerAppend > 0 ? whole : BackupPayload(), passphrase: passphrase,
                                                 scrypt: cheap, chunkBytes: chunkBytes)
                XCTAssertEqual(file.count, sealed.count, "chunks of \(chunkBytes), appends of \(itemsPerAppend)")
                let batch = try BackupFile.open(file, named: "f", passphrase: passphrase)
                XCTAssertEqual(batch.count, want, "chunks of \(chunkBytes), appends of \(itemsPerAppend)")
                if want > 0 {
                    XCTAssertEqual(batch.entries[39].record.key, try generic("svc", "acct39"))
                    batch.withSecret(batch.entries[39]) { XCTAssertEqual(Array($0), Array(repeating: UInt8(ascii: "s"), count: 39)) }
                }
                assertError(isIntegrity, "integrityFailure",
                            try BackupFile.open(Array(file.dropLast()), named: "f", passphrase: passphrase))
                let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
                XCTAssertEqual(mode, 0o600)
            }
        }
        // Dropped before finish: nothing is left, not even the temporary file.
        _ = try BackupFile.Writer(path: "\(dir)/dropped.kcb", passphrase: passphrase, scrypt: cheap)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir), ["b.kcb"])
    }

    /// `export` without --force looks before it asks for passphrases; a file that appears after
    /// the look is not replaced either: the writer's rename refuses it and leaves it as it was.
    func testAWriterNotReplacingLeavesAFileThatAppearedMeanwhile() throws {
        let dir = NSTemporaryDirectory() + "kcfs-noreplace-\(getpid())"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = "\(dir)/b.kcb"
        let writer = try BackupFile.Writer(path: path, passphrase: passphrase, scrypt: cheap, replacing: false)
        try writer.append(try sample().0)
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data("theirs".utf8)))
        assertError({ if case .fileExists(let m) = $0 { m.contains(path) && m.contains("--force") } else { false } },
                    "fileExists naming the file and --force", try writer.finish())
        XCTAssertEqual(FileManager.default.contents(atPath: path), Data("theirs".utf8))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir), ["b.kcb"], "no temporary file is left")
        // Where nothing is, it is put in place.
        let fresh = try BackupFile.Writer(path: "\(dir)/c.kcb", passphrase: passphrase, scrypt: cheap, replacing: false)
        try fresh.append(try sample().0)
        try fresh.finish()
        let file = try BackupFile.read(from: "\(dir)/c.kcb")
        XCTAssertEqual(try BackupFile.open(file, named: "c", passphrase: passphrase).count, try sample().0.count)
    }

    func testAnEmptyBackupRoundTrips() throws {
        let file = try BackupFile.seal(BackupPayload(), passphrase: passphrase, scrypt: cheap)
        XCTAssertEqual(try BackupFile.open(file, named: "f", passphrase: passphrase).count, 0)
    }

    func testHeaderLayout() throws {
        let file = try BackupFile.seal(try sample().0, passphrase: passphrase, scrypt: ScryptParameters(logN: 11))
        XCTAssertEqual(Array(file[0..<8]), Array("KCFSBKUP".utf8))
        XCTAssertEqual(Array(file[8..<10]), [0, 2], "format version 2")
        XCTAssertEqual(file[10], 11, "log2(N)")
        XCTAssertEqual(Array(file[11..<19]), [0, 0, 0, 8, 0, 0, 0, 1], "r and p")
        XCTAssertEqual(Array(file[35..<39]), [0, 0x10, 0, 0], "1 MiB chunks")
        let again = try BackupFile.seal(try sample().0, passphrase: passphrase, scrypt: ScryptParameters(logN: 11))
        XCTAssertNotEqual(Array(file[19..<35]), Array(again[19..<35]), "each file has its own salt")
    }

    func testNoPlaintextInTheFile() throws {
        let file = try sealedSample()
        for needle in ["github", "alice", "hunter2", "example.org", "Label", "realm"] {
            let n = Array(needle.utf8)
            let found = (0...(file.count - n.count)).contains { Array(file[$0..<$0 + n.count]) == n }
            XCTAssertFalse(found, "\(needle) appears in the file")
        }
    }

    func testWrongPassphraseIsToldApart() throws {
        assertError(isWrongPassphrase, "wrong passphrase",
                    try BackupFile.open(try sealedSample(), named: "f", passphrase: secure("backup passphrasE")))
        assertError(isWrongPassphrase, "wrong passphrase",
                    try BackupFile.open(try sealedSample(), named: "f", passphrase: SecureBytes(count: 0)))
    }

    func testTruncationAnywhereIsRefused() throws {
        let file = try sealedSample(chunkBytes: 64)
        XCTAssertGreaterThan(file.count, 71 + 3 * (64 + 28), "several chunks")
        for length in [0, 5, 8, 40, 70, 71, 98, file.count - 1, file.count - 28, 71 + 92, 71 + 2 * 92] {
            let cut = Array(file[0..<length])
            XCTAssertThrowsError(try BackupFile.open(cut, named: "f", passphrase: passphrase), "cut to \(length)") { error in
                guard let e = error as? KeychainError else { return XCTFail("\(error)") }
                switch e {
                case .integrityFailure: XCTAssertGreaterThanOrEqual(length, 8, "\(e)")
                case .invalidInput: XCTAssertLessThan(length, 8, "\(e)")
                default: XCTFail("cut to \(length): \(e)")
                }
            }
        }
    }

    func testCutBetweenChunksIsRefused() throws {
        let file = try sealedSample(chunkBytes: 64)
        // Whole chunks only: each remaining chunk authenticates, but the last was not sealed as the last.
        let cut = Array(file[0..<(71 + 2 * (64 + 28))])
        assertError(isIntegrity, "integrity failure", try BackupFile.open(cut, named: "f", passphrase: passphrase))
    }

    func testEveryChangedByteIsRefused() throws {
        let file = try sealedSample(chunkBytes: 64)
        for i in 0..<file.count {
            var tampered = file
            tampered[i] ^= 0x20
            XCTAssertThrowsError(try BackupFile.open(tampered, named: "f", passphrase: passphrase), "byte \(i)") { error in
                guard let e = error as? KeychainError else { return XCTFail("byte \(i): \(error)") }
                switch e {
                case .integrityFailure, .wrongPassphrase, .invalidInput: break
                default: XCTFail("byte \(i): \(e)")
                }
                if i >= 71 { XCTAssertTrue(isIntegrity(e), "byte \(i) in a chunk: \(e)") }
            }
        }
    }

    func testAppendedBytesAndSwappedChunksAreRefused() throws {
        let file = try sealedSample(chunkBytes: 64)
        assertError(isIntegrity, "integrity failure", try BackupFile.open(file + [0], named: "f", passphrase: passphrase))
        let c = 64 + 28
        var swapped = Array(file[0..<71])
        swapped += file[(71 + c)..<(71 + 2 * c)]
        swapped += file[71..<(71 + c)]
        swapped += file[(71 + 2 * c)...]
        assertError(isIntegrity, "integrity failure", try BackupFile.open(swapped, named: "f", passphrase: passphrase))
    }

    func testForeignFilesAndNewerVersionsAreRefusedWithAClearMessage() throws {
        var file = try sealedSample()
        assertError(isInvalid, "not a backup", try BackupFile.open(Array("SQLite format 3\0 and more".utf8), named: "f", passphrase: passphrase))
        file[9] = 3
        XCTAssertThrowsError(try BackupFile.open(file, named: "b.kcb", passphrase: passphrase)) { error in
            XCTAssertEqual((error as? KeychainError)?.description,
                           "b.kcb is a backup of format version 3; this keychainfs reads versions 1 to 2")
        }
    }

    func testParametersOutsideWhatExportWritesAreRefusedBeforeAnyKeyDerivation() throws {
        for (offset, value) in [(10, UInt8(30)), (10, 9), (14, 16), (18, 2), (36, 0)] {
            var file = try sealedSample()
            file[offset] = value
            assertError(isIntegrity, "damaged header", try BackupFile.open(file, named: "f", passphrase: passphrase))
        }
        assertError(isInvalid, "bad cost",
                    try BackupFile.seal(BackupPayload(), passphrase: passphrase, scrypt: ScryptParameters(logN: 23)))
    }

    func testMalformedPayloadsAreRefused() throws {
        // Written by hand in format version 1 (a one-byte presence mask); version 2 below.
        func decode(_ bytes: [UInt8]) throws -> ItemBatch { try BackupPayload.decode(SecureBytes(copying: bytes), formatVersion: 1) }
        let count1: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 1]
        func str(_ s: String) -> [UInt8] { let b = Array(s.utf8); return [0, 0, 0, UInt8(b.count)] + b }
        let tail: [UInt8] = [0] + Array(repeating: 0, count: 16) + [0, 0, 0, 1, 0x41]
        let good = count1 + [1, 1] + str("") + str("svc") + str("acct") + tail
        XCTAssertEqual(try decode(good).entries.first?.record.key, try generic("svc", "acct"))
        assertError(isIntegrity, "cut short", try decode(Array(good.dropLast())))
        assertError(isIntegrity, "trailing bytes", try decode(good + [0]))
        assertError(isIntegrity, "impossible count", try decode([0, 0, 0, 0, 0xff, 0, 0, 0] + Array(good.dropFirst(8))))
        assertError(isIntegrity, "unknown kind", try decode(count1 + [9, 1] + Array(good.dropFirst(10))))
        assertError(isIntegrity, "unknown class", try decode(count1 + [1, 99] + Array(good.dropFirst(10))))
        assertError(isInvalid, "empty service", try decode(count1 + [1, 1] + str("") + str("") + str("acct") + tail))
        assertError(isIntegrity, "not UTF-8", try decode(count1 + [1, 1] + str("") + [0, 0, 0, 1, 0xff] + str("acct") + tail))
        assertError(isIntegrity, "unknown attributes",
                    try decode(count1 + [1, 1] + str("") + str("svc") + str("acct") + [0x80] + Array(tail.dropFirst())))
        func decode2(_ bytes: [UInt8]) throws -> ItemBatch { try BackupPayload.decode(SecureBytes(copying: bytes)) }
        let good2 = count1 + [1, 1] + str("") + str("svc") + str("acct") + [0] + tail
        XCTAssertEqual(try decode2(good2).entries.first?.record.key, try generic("svc", "acct"))
        assertError(isIntegrity, "unknown attributes (version 2)",
                    try decode2(count1 + [1, 1] + str("") + str("svc") + str("acct") + [0x80, 0] + Array(tail.dropFirst())))
        assertError(isIntegrity, "a flag neither 0 nor 1",
                    try decode2(count1 + [1, 1] + str("") + str("svc") + str("acct") + [0x01, 0, 2] + Array(tail.dropFirst())))
    }
}
