import Foundation
import GRDB

/// The files record (`StoreFileState`, beside the counter) says which state of the store's
/// files this machine's keychainfs last left or checked, so that an open can skip reading every
/// row. Each commit on files in such a state leaves them in one too (the chain); a write by
/// anything else breaks it until the next check.
///
/// With the files watched (`StoreFileWatch`), a commit asks the watch whether anything else
/// wrote the files since this instance's last commit, and the state is recorded once commits
/// pause (`recordDelay` after the first unrecorded one), at close, and when the daemon's loop
/// ends, rather than read before and after every commit. A daemon killed in the meantime
/// leaves the record of an earlier state: the next open reads every row, as after any change
/// it cannot vouch for. Without a watch, every commit compares and records the files' times.
///
/// All of it runs under the database's write lock (GRDB's queue), as does the watch's read in
/// `checkRows`; that check's record is written after it, at open or unlock, so a commit racing
/// it can at worst leave an older state recorded (the next open reads every row).
/// `filesRecordDue` is a leaf lock.
extension Keychain {
    static let recordDelay: DispatchTimeInterval = .milliseconds(100)

    /// Whether the files are in the state this instance's last commit, check or record left
    /// them in. Called under the write lock, before the commit writes anything.
    func filesAsLeft() -> Bool {
        guard rowsChecked.withLock({ $0 }) else { return false }
        // The record is taken as this instance last wrote it (`recordedHere`), not read back.
        guard let watch = database.watch else {
            let before = StoreFileState(storePath: database.path)
            return before != nil && before == counter.recordedHere()
        }
        // Heard: the chain breaks now, whether or not this commit goes through (a failed one
        // never reaches `filesCommitted`, and the next commit would hear nothing).
        if watch.drain() {
            breakChain()
            return false
        }
        return filesRecordDue.withLock { $0.due } || counter.recordedHere() != nil
    }

    /// The files are in a state no commit or check of this instance vouches for.
    private func breakChain() {
        filesRecordDue.withLock { $0.due = false }
        counter.recordFiles(nil)
    }

    /// After a commit, under the write lock: its own writes are heard and dropped, and its
    /// state is due to be recorded, or else the record goes. Either way, the work left for when
    /// commits pause is scheduled (`settle`), unless this is `settle`'s own commit.
    func filesCommitted(intact: Bool, settling: Bool = false) {
        if !intact {
            breakChain()
        } else if let watch = database.watch {
            _ = watch.drain()
            filesRecordDue.withLock { $0.due = true }
        } else {
            counter.recordFiles(StoreFileState(storePath: database.path))
        }
        if settling { return }
        let schedule = filesRecordDue.withLock { d in
            defer { d.scheduled = true }
            return !d.scheduled
        }
        if schedule {
            DispatchQueue.global().asyncAfter(deadline: .now() + Self.recordDelay) { [weak self] in self?.settle() }
        }
    }

    /// What waits for commits to pause: the index entries of new rows moved into the index
    /// (`indexPendingTags`, a commit that schedules no other `settle`), then the files' state
    /// recorded. Called by the timer, at close, and by the daemon when its loop ends. A commit
    /// from the moment it starts schedules the next one. A failure to move the entries leaves
    /// them waiting, still found.
    package func settle() {
        filesRecordDue.withLock { $0.scheduled = false }
        try? indexPendingTags(settling: true)
        recordFilesState()
    }

    /// Records the files' state for the commits not yet recorded, unless something else wrote
    /// the files since the last of them; the record goes if it did, even with nothing due.
    /// Part of `settle` (the daemon exits without closing the store). Under the write lock, so
    /// no commit runs meanwhile: whatever the watch hears, until after the state is read, is
    /// someone else's.
    func recordFilesState() {
        try? database.queue.inDatabase { _ in
            let due = filesRecordDue.withLock { d in
                defer { d.due = false }
                return d.due
            }
            guard let watch = database.watch else { return }
            let state = due ? StoreFileState(storePath: database.path) : nil
            if watch.drain() { return breakChain() }
            if due { counter.recordFiles(state) }
        }
    }
}

/// Commits whose files state is not recorded yet (`Keychain+FilesRecord.swift`).
struct FilesRecordDue {
    /// Commits made on files in a vouched state since the record was last written.
    var due = false
    /// `settle` is scheduled.
    var scheduled = false
}
