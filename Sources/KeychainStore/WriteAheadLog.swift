import Foundation
import GRDB
import GRDBSQLite
import Synchronization
import CStoreVFS

/// Keeps the store's files free of earlier sealed values.
///
/// With `secure_delete` on, SQLite zeroes a deleted value in the pages it writes, but in WAL
/// mode the pages as they were stay in the `-wal` file until it is overwritten: a copy of it
/// would give back deleted and replaced secrets. So after every commit that removes a sealed
/// value, the WAL is checkpointed and emptied (`wal_checkpoint(TRUNCATE)`, which syncs the
/// database file first, so durability is kept): every frame it held is overwritten with
/// zeros, the file keeping its blocks (the store's VFS, CStoreVFS), so that the next commits
/// write over them instead of growing the file, whose sync then also commits ext4's journal.
/// A checkpoint that could not finish (a full disk, another process reading) is retried after
/// the next commit and at the next open.
///
/// Durability, with as few syncs as that needs: a write that erases (`StoreDatabase.write`)
/// commits with `synchronous = NORMAL`, which writes the WAL without syncing it, and then makes the commit
/// durable itself before it returns. After an erasing commit the checkpoint does it: it syncs
/// the WAL, copies it into the database and syncs that (two syncs, where `FULL` took three:
/// the commit, then the same two); should the checkpoint not finish, one `fdatasync` of the
/// WAL (`syncFrames`). A commit that only adds, with no checkpoint pending, stays at `FULL`,
/// whose commit is one `fdatasync` of the WAL. The first commit into an emptied WAL costs one
/// more: SQLite syncs the new WAL's header before its frames. Every other write transaction
/// commits at `FULL` (`StoreDatabase.durable`), but the one whose loss loses nothing
/// (`StoreDatabase.unsynced`, the move of new rows' index entries). The level is switched only
/// when a commit needs the other one, so a run of updates, or of creates, switches it no more.
///
/// An empty WAL needs new disk blocks for the next commit, so a full disk would refuse even a
/// delete. A small reserve file beside the store is given up for a delete that meets a full
/// disk, and made again once there is room. A checkpoint that must grow the database may take
/// it too (else a replaced value would wait in the database file for space), but only half
/// unless it is a delete's (`ReserveUse`). Its need is bounded: the pages a checkpoint adds to
/// the database are those the commits since the last one added, and on a nearly full disk
/// every commit is folded in at once (`isNearlyFull`), and while the last fold found no room
/// only deletes are taken (`lacksRoom`). So the keychain's own writes cannot fill the disk
/// with pages no delete can fold.
final class WriteAheadLog: Sendable {
    static let reserveBytes = 512 * 1024
    /// Below this much free space, every commit is folded into the database at once.
    static let nearlyFullBytes = 32 * 1024 * 1024
    let walPath: String
    let reservePath: String
    private let directory: String
    private let pending = Mutex(false)
    /// The last checkpoint failed for want of room, with the reserve it may take given up.
    private let roomLacking = Mutex(false)
    /// The bytes of header and frames the last checkpoint emptied: what the commits since the
    /// one before wrote.
    private let checkpointedBytes = Mutex(0)

    init(storePath: String) {
        walPath = storePath + "-wal"
        reservePath = storePath + "-reserve"
        directory = (storePath as NSString).deletingLastPathComponent
    }

    var isPending: Bool { pending.withLock { $0 } }
    var lacksRoom: Bool { roomLacking.withLock { $0 } }

    /// How much of the reserve a checkpoint may give up on a full disk: a delete's, all of it;
    /// any other's, half, so that the rest is left for a delete.
    enum ReserveUse { case half, whole }

    /// Whether the store's file system has less than `nearlyFullBytes` free (for this user).
    func isNearlyFull() -> Bool {
        var fs = statvfs()
        guard statvfs(directory.isEmpty ? "." : directory, &fs) == 0 else { return false }
        return UInt64(fs.f_bavail) * UInt64(fs.f_frsize) < UInt64(Self.nearlyFullBytes)
    }

    /// Whether the writer's connection is at `synchronous = NORMAL` (it opens at `FULL`). The
    /// level is switched only when a commit needs the other one: switched there and back at
    /// every erasing commit, the two pragmas (each compiled again at every run, as a change of
    /// level expires them) were a twentieth of a durable update's instructions.
    private let relaxed = Mutex(false)

    /// Puts the writer's connection at `NORMAL` or at `FULL`, outside any transaction. Every
    /// write transaction says which it needs first: `StoreDatabase.write`, and `durable` for the rest.
    func setSynchronous(_ db: Database, normal: Bool) throws {
        guard relaxed.withLock({ $0 }) != normal else { return }
        let rc = sqlite3_exec(db.sqliteConnection, normal ? "PRAGMA synchronous = NORMAL" : "PRAGMA synchronous = FULL", nil, nil, nil)
        guard rc == SQLITE_OK else { throw DatabaseError(resultCode: ResultCode(rawValue: rc)) }
        relaxed.withLock { $0 = normal }
    }

    var bytesAtLastCheckpoint: Int { checkpointedBytes.withLock { $0 } }

    /// Folds the WAL into the database and empties it; false if it could not. Never throws:
    /// the commit before it stands.
    @discardableResult
    func truncate(_ db: Database, reserve use: ReserveUse = .half) -> Bool {
        truncateReportingSync(db, reserve: use).done
    }

    /// `truncate`, and whether a sync of the WAL failed on the way (then its frames, the last
    /// commit's included, may not be on disk, whatever a later sync says).
    func truncateReportingSync(_ db: Database, reserve use: ReserveUse) -> (done: Bool, syncFailed: Bool) {
        _ = kcfs_store_vfs_take_wal_sync_failed()
        let done = checkpoint(db, reserve: use)
        return (done, kcfs_store_vfs_take_wal_sync_failed() != 0)
    }

    private func checkpoint(_ db: Database, reserve use: ReserveUse) -> Bool {
        // As `PRAGMA wal_checkpoint(TRUNCATE)`, without a statement to prepare at every commit:
        // SQLITE_BUSY when a reader or writer kept it from finishing. The store's VFS
        // (CStoreVFS) does the truncation as an overwrite of the WAL's frames with zeros, so
        // the WAL keeps its blocks and the next commits' syncs write over them.
        _ = kcfs_store_vfs_take_emptied()
        var rc = sqlite3_wal_checkpoint_v2(db.sqliteConnection, nil, SQLITE_CHECKPOINT_TRUNCATE, nil, nil)
        // A commit may fit in the WAL's kept blocks on a full disk, and its checkpoint then find
        // no room to grow the database (a new row's page): the reserve is given up for it (half
        // of it, but for a delete's), so that no replaced or deleted value waits for space.
        if rc & 0xff == SQLITE_FULL && releaseReserve(use) {
            rc = sqlite3_wal_checkpoint_v2(db.sqliteConnection, nil, SQLITE_CHECKPOINT_TRUNCATE, nil, nil)
        }
        let done = rc == SQLITE_OK
        let emptied = Int(kcfs_store_vfs_take_emptied())
        checkpointedBytes.withLock { $0 = emptied }
        pending.withLock { $0 = !done }
        roomLacking.withLock { $0 = rc & 0xff == SQLITE_FULL }
        if done { keepReserve() }
        return done
    }

    /// Makes the WAL's frames durable: an `fdatasync` of the file, which syncs it whoever
    /// opened it. A missing WAL holds nothing to sync.
    func syncFrames() throws {
        let fd = open(walPath, O_RDONLY | O_CLOEXEC)
        if fd < 0 && errno == ENOENT { return }
        guard fd >= 0 else { throw KeychainError.io("cannot open \(walPath) to sync it: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        guard fdatasync(fd) == 0 else { throw KeychainError.io("cannot sync \(walPath): \(String(cString: strerror(errno)))") }
    }

    /// Makes the reserve whole if it is not; on a full disk what is left of it stays as it is
    /// until there is room.
    func keepReserve() {
        var st = stat()
        let had = stat(reservePath, &st) == 0 ? Int(st.st_size) : 0
        if had >= Self.reserveBytes { return }
        // Never through a planted symlink, nor into a file that is not ours.
        guard let fd = StoreFiles.openPrivate(reservePath) else { return }
        defer { close(fd) }
        guard posix_fallocate(fd, 0, off_t(Self.reserveBytes)) != 0 else { return }
        // Whatever part of the blocks it took goes back.
        if had == 0 { unlink(reservePath) } else { _ = ftruncate(fd, off_t(had)) }
    }

    /// Frees the reserve's blocks (half of them, at most, for `.half`) for a write on a full
    /// disk; false if that frees nothing.
    func releaseReserve(_ use: ReserveUse = .whole) -> Bool {
        guard use == .half else { return unlink(reservePath) == 0 }
        let fd = open(reservePath, O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, StoreFiles.isOurs(st), Int(st.st_size) > Self.reserveBytes / 2 else { return false }
        return ftruncate(fd, off_t(Self.reserveBytes / 2)) == 0
    }
}

/// What a write transaction does to sealed values, which decides what must follow its commit.
enum WriteEffect {
    /// Only new rows (or no rows): nothing earlier to erase.
    case addsOnly
    /// Rows replaced or deleted: the WAL is truncated before the call returns.
    case removes
    /// Only deletes: as `removes`, and a full disk may use the reserve.
    case deletesOnly
}

extension StoreDatabase {
    /// Runs `body` in one immediate transaction, then erases what it removed from the WAL;
    /// `committed` runs after that, still under the write lock, if the commit succeeded.
    func write<T>(_ effect: WriteEffect, committed: () -> Void = {}, _ body: (Database) throws -> T) throws -> T {
        do {
            return try attempt(effect, committed, body)
        } catch let e as DatabaseError where e.resultCode == .SQLITE_FULL && effect == .deletesOnly && log.releaseReserve() {
            return try attempt(effect, committed, body)
        } catch let e as DatabaseError where e.resultCode == .SQLITE_FULL {
            // Frames of the failed transaction may sit in the WAL; they go too.
            try? queue.writeWithoutTransaction { db in log.truncate(db, reserve: effect == .deletesOnly ? .whole : .half) }
            throw e
        }
    }

    /// GRDB's `inTransaction`, with the BEGIN and COMMIT compiled once per connection instead
    /// of at every commit. A failure rolls back, as there.
    private static func immediateTransaction<T>(_ db: Database, _ body: () throws -> T) throws -> T {
        try db.cachedStatement(sql: "BEGIN IMMEDIATE TRANSACTION").execute()
        do {
            let result = try body()
            try db.cachedStatement(sql: "COMMIT TRANSACTION").execute()
            return result
        } catch {
            if !db.isInsideTransaction { throw error }
            try? db.rollback()
            throw error
        }
    }

    /// A write transaction outside `write`'s rules (no sealed value replaced), at `FULL`: its
    /// commit is durable when it returns.
    func durable<T>(_ body: (Database) throws -> T) throws -> T {
        try queue.writeWithoutTransaction { db in
            try log.setSynchronous(db, normal: false)
            return try Self.immediateTransaction(db) { try body(db) }
        }
    }

    /// A write transaction whose loss in a crash loses nothing, so it is not synced: committed
    /// at `NORMAL`, its frames are made durable by the next durable commit's sync of the WAL,
    /// or never, and then the store is as before it (`Keychain.indexPendingTags` moves index
    /// entries from one table to another). It must remove no sealed value.
    func unsynced<T>(committed: () -> Void, _ body: (Database) throws -> T) throws -> T {
        try queue.writeWithoutTransaction { db in
            try log.setSynchronous(db, normal: true)
            let result = try Self.immediateTransaction(db) { try body(db) }
            committed()
            return result
        }
    }

    /// The commit is durable when this returns: synced by the checkpoint, or else by
    /// `syncFrames` (see `WriteAheadLog`).
    private func attempt<T>(_ effect: WriteEffect, _ committed: () -> Void, _ body: (Database) throws -> T) throws -> T {
        try queue.writeWithoutTransaction { db in
            // A commit that only adds, into a WAL with nothing left to fold in, stays at `FULL`:
            // SQLite syncs the WAL's frames itself, on the descriptor it holds (an open, a sync
            // and a close of ours, and two switches of the level, fewer per create).
            // On a nearly full disk every commit is folded in at once, so that what a delete's
            // checkpoint must fold stays within the reserve; while the last fold found no room,
            // only deletes are taken (`WriteAheadLog`).
            let nearlyFull = effect != .deletesOnly && log.isNearlyFull()
            if nearlyFull && log.lacksRoom && !log.truncate(db, reserve: .half) {
                throw DatabaseError(resultCode: .SQLITE_FULL)
            }
            let checkpoints = effect != .addsOnly || log.isPending || nearlyFull
            try log.setSynchronous(db, normal: checkpoints)
            let result = try Self.immediateTransaction(db) { try body(db) }
            if checkpoints {
                let emptied = log.truncateReportingSync(db, reserve: effect == .deletesOnly ? .whole : .half)
                if emptied.syncFailed {
                    throw KeychainError.io("cannot sync \(log.walPath): the last commit may not be on disk")
                }
                if !emptied.done { try log.syncFrames() }
            }
            committed()
            return result
        }
    }
}
