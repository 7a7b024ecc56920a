import Foundation
import CStoreVFS
import GRDB
import GRDBSQLite
import KeychainCrypto

/// The passphrase's key-derivation data: scrypt parameters, salt and the verifier (the index
/// key's passphrase wrapping). A checksum over the three tells damage from a wrong
/// passphrase, so damage is reported as such (exit 49) and does not feed the backoff.
/// (Someone who rewrites all of it, checksum included, only makes the passphrase fail, which
/// deleting the store would do as well.)
struct KDFRecord {
    var parameters: ScryptParameters
    var salt: [UInt8]

    static let saltBytes = 16

    static func checksum(_ p: ScryptParameters, salt: [UInt8], verifier: [UInt8]) -> [UInt8] {
        var bytes = Array("kcfs-kdf-v1|".utf8) + [p.logN]
        for v in [p.r, p.p] { bytes += [UInt8(v >> 24 & 0xff), UInt8(v >> 16 & 0xff), UInt8(v >> 8 & 0xff), UInt8(v & 0xff)] }
        return SHA256Digest.hash(bytes + salt + verifier)
    }

    private static func value(_ db: Database, _ name: String) throws -> Data? {
        try Data.fetchOne(db, sql: "SELECT value FROM meta WHERE name = ?", arguments: [name])
    }

    static func verifier(_ db: Database, generation: Int64) throws -> [UInt8]? {
        try Data.fetchOne(db, sql: "SELECT blob FROM wrapped_keys WHERE name = ? AND wrapping = 'p' AND generation = ?",
                          arguments: [Keybag.indexKeyName, generation]).map { [UInt8]($0) }
    }

    /// The record, or `notAKeychain` if any part of it is damaged or out of range.
    static func load(_ db: Database, generation: Int64, path: String) throws -> KDFRecord {
        func damaged(_ what: String) -> KeychainError {
            .notAKeychain("\(path): the store's key-derivation data is damaged (\(what)); it was not used, and no attempt was counted")
        }
        guard let p = try value(db, "scrypt"), let params = try? JSONDecoder().decode(ScryptParameters.self, from: p)
        else { throw damaged("unreadable scrypt parameters") }
        guard params.isAcceptable else { throw damaged("scrypt parameters that keychainfs never writes") }
        guard let salt = try value(db, "salt"), salt.count == saltBytes else { throw damaged("salt") }
        guard let verifier = try verifier(db, generation: generation) else { throw damaged("no verifier") }
        guard let check = try value(db, "kdf_check"), [UInt8](check) == checksum(params, salt: [UInt8](salt), verifier: verifier)
        else { throw damaged("the parameters, salt or verifier do not match their checksum") }
        return KDFRecord(parameters: params, salt: [UInt8](salt))
    }

    /// Writes the record; call after the verifier row of `generation` is written.
    static func save(_ db: Database, parameters: ScryptParameters, salt: [UInt8], generation: Int64) throws {
        guard let verifier = try verifier(db, generation: generation) else {
            throw KeychainError.io("the keybag has no passphrase entry to check")
        }
        try db.execute(sql: "INSERT OR REPLACE INTO meta (name, value) VALUES ('scrypt', ?), ('salt', ?), ('kdf_check', ?)",
                       arguments: [try JSONEncoder().encode(parameters), Data(salt),
                                   Data(checksum(parameters, salt: salt, verifier: verifier))])
    }

    /// Migration: a store made before the checksum gets one for what it holds now.
    static func sealLegacy(_ db: Database) throws {
        guard try value(db, "has_passphrase") != Data([0]), try value(db, "kdf_check") == nil,
              let p = try value(db, "scrypt"), let params = try? JSONDecoder().decode(ScryptParameters.self, from: p),
              let salt = try value(db, "salt"), let verifier = try verifier(db, generation: 0) else { return }
        try db.execute(sql: "INSERT INTO meta (name, value) VALUES ('kdf_check', ?)",
                       arguments: [Data(checksum(params, salt: [UInt8](salt), verifier: verifier))])
    }
}

/// The store's own record of its rows, for rollback and replay: a counter of commits, the
/// number of rows and the keyed digest of their (id, version) set, under a tag. Both are keyed
/// from the index key, so only someone who can open it (the device key or the passphrase)
/// can forge them. Each commit updates it in the same transaction; an open compares it with
/// the rows and with the counter kept outside the store (`StoreCounter`).
struct RowLedger: Equatable {
    var counter: UInt64
    var count: Int64
    var digest: RowSetDigest

    struct Keys {
        let digest: SecureBytes
        let tag: SecureBytes

        init(indexKey: SecureBytes) throws {
            digest = try HKDF.deriveKey(from: indexKey, info: "keychainfs row digest")
            tag = try HKDF.deriveKey(from: indexKey, info: "keychainfs row ledger tag")
        }
    }

    static func be(_ v: UInt64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: v >> UInt64(56 - 8 * $0)) } }
    static func fromBE(_ b: ArraySlice<UInt8>) -> UInt64 { b.reduce(0) { $0 << 8 | UInt64($1) } }

    private func body() -> [UInt8] { Self.be(counter) + Self.be(UInt64(bitPattern: count)) + digest.bytes }

    private func tag(_ keys: Keys, storeID: [UInt8]) -> [UInt8] {
        HMACSHA256.authenticate(Array("kcfs-rows-v1|".utf8) + storeID + body(), key: keys.tag)
    }

    /// The stored ledger; nil if there is none; an integrity failure if its tag does not match.
    static func load(_ db: Database, keys: Keys, storeID: [UInt8]) throws -> RowLedger? {
        try load(db, keys: keys, storeID: storeID, written: nil)?.ledger
    }

    /// `load`, and the bytes stored. Bytes equal to `written`, those this instance itself
    /// saved last, are taken without checking their tag again: nobody wrote the ledger since,
    /// and another's bytes (a forgery, an older ledger put back) differ from them.
    static func load(_ db: Database, keys: Keys, storeID: [UInt8], written: [UInt8]?) throws -> (ledger: RowLedger, bytes: [UInt8])? {
        guard let b = try StoreDatabase.metaBytes(db, sql: "SELECT value FROM meta WHERE name = 'rows_state'") else { return nil }
        guard b.count == 48 + 32, let digest = RowSetDigest(bytes: Array(b[16..<48])) else {
            throw KeychainError.integrityFailure("the store's record of its items is malformed")
        }
        let ledger = RowLedger(counter: fromBE(b[0..<8]), count: Int64(bitPattern: fromBE(b[8..<16])), digest: digest)
        guard b == written || ledger.tag(keys, storeID: storeID) == Array(b[48...]) else {
            throw KeychainError.integrityFailure("the store's record of its items fails authentication")
        }
        return (ledger, b)
    }

    /// Saves the ledger; returns the bytes stored.
    @discardableResult
    func save(_ db: Database, keys: Keys, storeID: [UInt8]) throws -> [UInt8] {
        let bytes = body() + tag(keys, storeID: storeID)
        try StoreDatabase.setMeta(db, "rows_state", bytes: bytes)
        return bytes
    }

    /// The ledger the rows as they are now would have.
    static func scan(_ db: Database, keys: Keys, counter: UInt64) throws -> RowLedger {
        var digest = RowSetDigest()
        var count: Int64 = 0
        var pairs: [(id: Int64, version: Int64)] = []
        pairs.reserveCapacity(8192)
        // Straight from the statement: at 100,000 rows GRDB's Row is most of the cost of an open.
        let statement = try db.makeStatement(sql: "SELECT id, version FROM items")
        let raw = statement.sqliteStatement
        while true {
            let rc = sqlite3_step(raw)
            if rc == SQLITE_DONE { break }
            guard rc == SQLITE_ROW else { throw DatabaseError(resultCode: ResultCode(rawValue: rc)) }
            pairs.append((sqlite3_column_int64(raw, 0), sqlite3_column_int64(raw, 1)))
            if pairs.count == 8192 {
                try digest.toggle(pairs, key: keys.digest)
                count += Int64(pairs.count)
                pairs.removeAll(keepingCapacity: true)
            }
        }
        try digest.toggle(pairs, key: keys.digest)
        return RowLedger(counter: counter, count: count + Int64(pairs.count), digest: digest)
    }
}

/// The (id, version) pairs a transaction removed and added, for the ledger.
struct RowChanges {
    private(set) var toggled: [(id: Int64, version: Int64)] = []
    private(set) var delta: Int64 = 0

    mutating func added(_ id: Int64, _ version: Int64) { toggled.append((id, version)); delta += 1 }
    mutating func removed(_ id: Int64, _ version: Int64) { toggled.append((id, version)); delta -= 1 }
}

/// The newest commit counter this machine has seen for a store, kept beside the device key,
/// outside the store: a whole store put back to an older copy has a smaller counter. Keyed
/// by the store's id and path, so a copy used elsewhere is a store of its own.
/// Written after each commit without fsync: after a crash it may lag, which only makes it
/// accept more, never refuse a store that is as it should be.
struct StoreCounter {
    let path: String
    let recorded = RecordedFiles()

    init(stateDirectory: String, storeID: [UInt8], storePath: String) {
        var canonical = storePath
        if let resolved = realpath(storePath, nil) {
            canonical = String(cString: resolved)
            free(resolved)
        }
        let name = SHA256Digest.hash(storeID + Array(canonical.utf8)).prefix(16).map { String(format: "%02x", $0) }.joined()
        path = stateDirectory + "/stores/" + name
    }

    func read() -> UInt64? {
        Self.line(path).flatMap { UInt64($0) }
    }

    /// Raises the counter to `value`; never lowers it unless `force` (an accepted rollback).
    /// Read and written through one descriptor, kept open (`RecordedFiles.counter`): every
    /// commit calls this.
    func record(_ value: UInt64, force: Bool = false) {
        let digits = Array(String(value).utf8)
        let bytes = Array(repeating: UInt8(ascii: "0"), count: max(0, 20 - digits.count)) + digits + [10]
        recorded.counter.withDescriptor(path, readable: true) { fd, size in
            if !force, let current = Self.line(fd: fd).flatMap({ UInt64($0) }), current >= value { return }
            Self.overwrite(fd, size: size, with: bytes)
        }
    }

    // Every commit reads and writes the counter: plain system calls, not Foundation's
    // file and string machinery, which was a tenth of the daemon's time in a loop of creates.

    /// The file's text without surrounding white space; nil if it cannot be read.
    static func line(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        return line(fd: fd)
    }

    /// The text of the open file `fd` from its start, as `line(_:)`.
    static func line(fd: Int32) -> String? {
        var buffer = [UInt8](repeating: 0, count: 1024)
        let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard n >= 0 else { return nil }
        let isSpace = { (b: UInt8) in b == 10 || b == 13 || b == 32 || b == 9 }
        let text = buffer.prefix(n)
        guard let first = text.firstIndex(where: { !isSpace($0) }), let last = text.lastIndex(where: { !isSpace($0) }) else { return "" }
        return String(decoding: text[first...last], as: UTF8.self)
    }

    /// Writes `bytes` over the file in place, making it (and its directory) if missing.
    static func overwrite(_ path: String, with bytes: [UInt8]) {
        guard let fd = openForWriting(path, readable: false) else { return }
        defer { close(fd) }
        overwrite(fd, with: bytes)
    }

    /// Opens the file for writing, making it (and its directory) if missing; nil if it cannot.
    static func openForWriting(_ path: String, readable: Bool) -> Int32? {
        let flags = (readable ? O_RDWR : O_WRONLY) | O_CREAT | O_CLOEXEC
        var fd = open(path, flags, 0o600)
        if fd < 0 && errno == ENOENT {
            try? KeychainLocations.makeDirectory(PathText.parent(path))
            fd = open(path, flags, 0o600)
        }
        return fd >= 0 ? fd : nil
    }

    /// Writes `bytes` over the open file `fd` from its start; `size`, the file's size before,
    /// if known (else it is asked for).
    static func overwrite(_ fd: Int32, size: off_t? = nil, with bytes: [UInt8]) {
        _ = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        // Only when the file was longer: an ftruncate is a journalled change of the inode
        // even to the same size, and every commit rewrites the counter (two ftruncates of
        // the eight system calls that touch metadata in a durable update, when both records were
        // rewritten). The size is asked for without the times (store_files.c says why).
        var before = size ?? -1
        if size == nil {
            var links: UInt64 = 0, bytes: Int64 = 0
            before = kcfs_file_links_and_size(fd, &links, &bytes) == 0 ? off_t(bytes) : off_t.max
        }
        if before > off_t(bytes.count) { _ = ftruncate(fd, off_t(bytes.count)) }
    }
}
