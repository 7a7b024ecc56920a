import Foundation
import GRDBSQLite
import KeychainModel

/// What `status` and the `mount` preflight read of a store, read without changing any of its
/// files: no migration, no checkpoint, no reserve file, no counter or file-state record.
/// `Keychain(openingAt:)` does all of those, so these commands use this instead. The caller
/// holds the store's shared lease, so no daemon writes meanwhile.
package struct StoreProbe: Sendable {
    package let path: String
    package let hasPassphrase: Bool

    /// Reads the store at `path`: `noSuchStore`, `notAKeychain` or `io` when it cannot be read.
    package init(readingAt path: String) throws {
        self.path = path
        guard access(path, F_OK) == 0 else { throw KeychainError.noSuchStore(path) }
        var db: OpaquePointer?
        // Read-only, SQLite still makes an empty WAL and a shared-memory file beside a store
        // that has none, and leaves them. Without a WAL, or with an empty one, the database
        // file holds everything, and `immutable` reads it alone. A WAL with frames (a crash, or
        // another command writing now) is read as SQLite reads it, which changes neither file.
        let uri = "file:" + Self.uriEscaped(path) + (StoreFiles.walHoldsFrames(storePath: StoreFiles.resolved(path)) ? "?mode=ro" : "?mode=ro&immutable=1")
        let rc = sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nil)
        defer { sqlite3_close_v2(db) }
        guard rc == SQLITE_OK, let db else { throw Self.failure(path, db, rc) }
        sqlite3_busy_timeout(db, 10_000)
        func meta(_ name: String) throws -> [UInt8]? {
            var statement: OpaquePointer?
            let prepared = sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE name = ?", -1, &statement, nil)
            defer { sqlite3_finalize(statement) }
            guard prepared == SQLITE_OK else {
                // No `meta` table: some other SQLite database.
                if prepared == SQLITE_ERROR { throw KeychainError.notAKeychain("\(path) is not a keychainfs store") }
                throw Self.failure(path, db, prepared)
            }
            sqlite3_bind_text(statement, 1, name, -1, unsafeBitCast(-1, to: sqlite3_destructor_type.self))
            let step = sqlite3_step(statement)
            if step == SQLITE_DONE { return nil }
            guard step == SQLITE_ROW else { throw Self.failure(path, db, step) }
            let count = Int(sqlite3_column_bytes(statement, 0))
            guard count > 0, let bytes = sqlite3_column_blob(statement, 0) else { return [] }
            return [UInt8](UnsafeRawBufferPointer(start: bytes, count: count))
        }
        guard try meta("format") == Array(StoreDatabase.format.utf8) else {
            throw KeychainError.notAKeychain("\(path) is not a keychainfs store")
        }
        hasPassphrase = try meta("has_passphrase") != [0]
    }

    private static func failure(_ path: String, _ db: OpaquePointer?, _ rc: Int32) -> KeychainError {
        let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(rc))
        switch rc & 0xff {
        case SQLITE_NOTADB, SQLITE_CORRUPT: return .notAKeychain("\(path) is corrupt or not a keychainfs store: \(message)")
        default: return .io("cannot read \(path): \(message)")
        }
    }

    /// A path as the path of a `file:` URI: what URI syntax gives a meaning to is %-escaped.
    private static func uriEscaped(_ path: String) -> String {
        var out = ""
        for byte in path.utf8 {
            switch byte {
            case UInt8(ascii: "?"), UInt8(ascii: "#"), UInt8(ascii: "%"), 0..<0x21, 0x7f...:
                out += String(format: "%%%02X", byte)
            default:
                out.unicodeScalars.append(Unicode.Scalar(byte))
            }
        }
        return out
    }
}
