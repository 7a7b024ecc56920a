import Foundation
import GRDB
import KeychainCrypto
import KeychainModel

extension Keychain {
    /// Compares the rows with the store's ledger and the ledger with this machine's counter,
    /// once the index key is held. Refuses (integrity failure) what does not match, unless the
    /// store was opened with `acceptRollback`, which takes the rows as they are.
    ///
    /// Comparing the rows reads every row's id and version. It is skipped when the store's
    /// files are in the state recorded beside the counter after this machine's last commit or
    /// check (`StoreFileState`): nothing has written them since, so the rows are those the
    /// ledger was made for. The ledger's tag and the counter are checked either way.
    func checkRows() throws {
        guard !rowsChecked.withLock({ $0 }), let indexKey = keybag.withLock({ $0.indexKey }) else { return }
        let keys = try RowLedger.Keys(indexKey: indexKey)
        let check = try rowProblems(keys, recorded: acceptsRollback ? nil : counter.readFiles(), vouching: true)
        let (problems, stored) = (check.problems, check.stored)
        if !problems.isEmpty {
            guard acceptsRollback else {
                throw KeychainError.integrityFailure(problems.joined(separator: "; ")
                    + ". If you restored this store on purpose, mount it once with --accept-rollback")
            }
            try rebaseLedger(keys, after: max(stored?.counter ?? 0, counter.read() ?? 0))
        } else if let stored {
            counter.record(stored.counter)
        } else {
            // A store from before the ledger (generation 0): its rows as they are now are its start.
            try rebaseLedger(keys, after: 0)
        }
        rowsChecked.withLock { $0 = true }
        checkReadRows.withLock { $0 = check.readRows }
        // The state the rows were checked in; a rebase above changed the files, so the next open reads them again.
        counter.recordFiles(problems.isEmpty && stored != nil ? check.state : nil)
    }

    /// What is wrong with the rows and the ledger. Every row is read unless the files are in
    /// the `recorded` state when the read transaction begins; that state is returned too.
    /// `vouching`: the state will be recorded as checked, so the files' watch is read first:
    /// whatever it heard since the open makes this check read every row.
    private func rowProblems(_ keys: RowLedger.Keys, recorded: StoreFileState? = nil, vouching: Bool = false)
        throws -> (problems: [String], stored: RowLedger?, state: StoreFileState?, readRows: Bool) {
        try read { db in
            // The first read pins this transaction's view; the files are looked at after it.
            _ = try Int.fetchOne(db, sql: "SELECT 1 FROM meta LIMIT 1")
            let heard = vouching && database.watch?.drain() == true
            let state = StoreFileState(storePath: database.path)
            let readRows = recorded == nil || heard || state != recorded
            var problems: [String] = []
            var stored: RowLedger?
            do { stored = try RowLedger.load(db, keys: keys, storeID: storeID) } catch let e as KeychainError {
                problems.append(e.description)
            }
            let actual = readRows ? try RowLedger.scan(db, keys: keys, counter: 0) : nil
            if let stored {
                if let actual, stored.count != actual.count || stored.digest != actual.digest {
                    problems.append("the items are not those the store recorded at its last commit: a row was removed, put back after deletion, or replaced by an older copy of itself")
                }
                if let seen = counter.read(), seen > stored.counter {
                    problems.append("the store is older than the one this machine last used (commit \(stored.counter), seen \(seen)): it was rolled back to an earlier copy")
                }
            } else if problems.isEmpty && keyGeneration > 0 {
                problems.append("the store's record of its items is missing")
            }
            return (problems, stored, state, readRows)
        }
    }

    /// Records the rows as they are now, with a counter above every one seen before.
    private func rebaseLedger(_ keys: RowLedger.Keys, after seen: UInt64) throws {
        let value = try Self.mappingDatabaseErrors {
            try database.write(.addsOnly) { db in
                let ledger = try RowLedger.scan(db, keys: keys, counter: seen + 1)
                try ledger.save(db, keys: keys, storeID: storeID)
                return ledger.counter
            }
        }
        counter.record(value, force: true)
    }

    /// What is wrong with the store as a whole: its key-derivation data, its keybag (every
    /// class's keys with exactly the wrappings its rules ask for, `has_passphrase` agreeing
    /// with them, and the older generations items still use), and its rows against the ledger.
    func storeProblems() throws -> [String] {
        var out: [String] = []
        if hasPassphrase {
            do { _ = try read { db in try KDFRecord.load(db, generation: self.keyGeneration, path: self.path) } }
            catch let e as KeychainError { out.append(e.description) }
        }
        let rows = try wrappedKeys()
        let itemKeys = try read { db in
            try Row.fetchAll(db, sql: "SELECT DISTINCT class, generation FROM items").compactMap { row -> ClassKeyID? in
                // A mistyped row is its own item's problem (`allItems` names it), not a trap here.
                guard let code = Int.fromDatabaseValue(row[0]), let generation = Int64.fromDatabaseValue(row[1]) else { return nil }
                return AccessibilityClass(code: code).map { ClassKeyID(accessible: $0, generation: generation) }
            }
        }
        out += Keybag.audit(rows, generation: keyGeneration, hasPassphrase: hasPassphrase, itemKeys: Set(itemKeys))
        if let indexKey = keybag.withLock({ $0.indexKey }) {
            out += try rowProblems(try RowLedger.Keys(indexKey: indexKey)).problems
        }
        return out
    }

    /// Opens every item it can, secrets and extras included, and checks the store as a whole
    /// (`storeProblems`, reported with item id 0). It reads the rows `pageRows` at a time, so
    /// that its memory does not grow with the store; `progress` is told the number of rows
    /// read after each page.
    public func verify(pageRows: Int = 5_000, progress: (Int) -> Void = { _ in }) throws
        -> (checked: Int, problems: [IntegrityProblem]) {
        var all: [IntegrityProblem] = [], checked = 0, rowsRead = 0
        var after: Int64? = .min
        while let from = after {
            let page = try itemPage(afterID: from, limit: pageRows)
            all += page.problems
            checked += page.problems.count
            for item in page.items where keybag.withLock({ $0.classKey(item.accessible, generation: item.sealed.generation) != nil }) {
                checked += 1
                do {
                    _ = try secret(of: item)
                    _ = try extras(of: item)
                } catch let e as KeychainError {
                    all.append(IntegrityProblem(itemID: item.id, reason: e.description))
                }
            }
            rowsRead += page.rows
            progress(rowsRead)
            after = page.next
        }
        all += try storeProblems().map { IntegrityProblem(itemID: 0, reason: $0) }
        return (checked, all.sorted { $0.itemID < $1.itemID })
    }
}
