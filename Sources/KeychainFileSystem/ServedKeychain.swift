import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStore
import Logging
import Synchronization

/// The keychain as its daemon serves it: the one owner of the open store, the in-memory index
/// of its items, the cache of decrypted secrets and the open files. FUSE callbacks (through
/// `KeychainTree`) and control-socket requests both call it, so there is one path per change:
/// `change` commits to the store and then updates the index before anyone else may change
/// either, and readers see the index before or after a change, never between.
///
/// Lock order: a thread holding one of these may take only those after it.
///
///     unlocking → committing → state → (the store's own keybag mutex)
///
/// - `unlocking` runs passphrase attempts one at a time (key derivation, backoff record), so
///   the backoff holds however many arrive at once.
/// - `committing` is held across a change's seal and durable commit (fsync). Reads and opens do
///   not take it, so they go on while another item commits.
/// - `state` guards the index, the plaintext cache and the open files; it is held only for
///   in-memory work, never across SQL, fsync or the decryption of a secret.
/// - Below all of these, `LockedMemory`'s own mutex is a leaf: every `SecureBytes` made or
///   freed takes it (an eviction from the cache under `state`, a key under the keybag's), and
///   it calls nothing while held. Its exhaustion handler runs outside it, but may run under
///   any of the locks above, so it only logs.
///
/// The FUSE binding's own mutexes (its inode table, its directory listings, the nodes it has
/// read) are never held while it calls in here, so they take no place in this order.
package final class ServedKeychain: Sendable {
    package let keychain: Keychain
    private static let log = Logger(label: "keychainfs.daemon")
    private let unlocking = Mutex<Void>(())
    private let committing = Mutex<Void>(())
    let state: Mutex<State>
    /// Called between decrypting a secret and caching it; tests use it to force interleavings.
    private let afterDecrypt = Mutex<(@Sendable () -> Void)?>(nil)

    struct State {
        var index = ItemIndex()
        var files: [UInt64: OpenFile] = [:]
        var nextHandle: UInt64 = 1
        /// The id of the next pending item (a file created but not yet committed): they count
        /// down from -1, so they never meet a stored id.
        var nextPendingID: Int64 = -1
        /// Decrypted secrets by item id, so that opening a file costs no decryption; bounded
        /// (least recently used out). Dropped per item when it changes and per class at lock;
        /// open readers may still share a dropped copy, which `SecureBytes` wipes when the
        /// last one lets go.
        var plaintext: PlaintextCache

        mutating func saved(_ item: KeychainItem) {
            plaintext.remove(item.id)
            index.insert(item)
        }

        mutating func deleted(_ id: Int64) {
            plaintext.remove(id)
            index.remove(id: id)
        }

        /// A new item, in the index only until its first commit (`stored(pending:as:)`).
        mutating func addPending(_ record: ItemRecord) -> KeychainItem {
            let item = KeychainItem(pending: record, id: nextPendingID)
            nextPendingID -= 1
            index.insert(item)
            return item
        }

        /// The pending item `id` is in the store now, as `item`: its name and its open files
        /// follow.
        mutating func stored(pending id: Int64, as item: KeychainItem) {
            index.store(pending: id, as: item)
            for f in files.values where f.itemID == id { f.itemID = item.id }
        }
    }

    /// `cacheBudget`: the most locked memory cached secrets may take; by default a share of
    /// RLIMIT_MEMLOCK (`PlaintextCache.budget(forLimit:)`).
    package init(keychain: Keychain, cacheBudget: Int? = nil) throws {
        self.keychain = keychain
        state = Mutex(State(plaintext: PlaintextCache(
            budget: cacheBudget ?? PlaintextCache.budget(forLimit: LockedMemory.processLimit))))
        try reload()
    }

    package func setAfterDecrypt(_ hook: (@Sendable () -> Void)?) { afterDecrypt.withLock { $0 = hook } }

    /// Runs one change to the store and the index. Nothing else changes either meanwhile;
    /// the body takes `state` only for the short steps before and after the commit.
    func change<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        try committing.withLock { (_: inout Void) throws(E) -> T in try body() }
    }

    /// Rebuilds the index from the store: at start, and when the first unlock reveals the
    /// names of every class. Directories made by mkdir stay.
    func reload() throws {
        try change { () throws -> Void in
            let (items, _) = try keychain.allItems()
            state.withLock { s in
                let live = Set(items.map(\.id))
                for (id, item) in s.index.items where !item.isPending && !live.contains(id) { s.deleted(id) }
                for item in items { s.index.insert(item) }
            }
        }
    }

    // MARK: lock state

    package var lockState: LockState { keychain.state }

    /// Locks, then wipes every cached or open copy of a secret whose class key is gone. The
    /// keys go first: an open or a cache fill that checks availability under `state` after
    /// this point is refused, and one before it is undone by the pass below.
    package func lock() {
        if keychain.state == .unlocked { Self.log.notice("locked") }
        keychain.lock()
        state.withLock { s in
            // The class the item has now counts too: it may have changed while open.
            for f in s.files.values where !keychain.isAvailable(f.accessible)
                || !(s.index.item(f.itemID).map { keychain.isAvailable($0.accessible) } ?? true) {
                f.revoke()
            }
            s.plaintext.removeAll { id in !(s.index.item(id).map { keychain.isAvailable($0.accessible) } ?? false) }
        }
    }

    /// One attempt at a time: a wrong passphrase is recorded before the next attempt is judged.
    package func unlock(passphrase: SecureBytes?) throws {
        try unlocking.withLock { (_: inout Void) throws -> Void in
            let before = keychain.state
            do { try keychain.unlock(passphrase: passphrase) } catch {
                Self.log.warning("unlock refused: \((error as? KeychainError)?.description ?? "\(error)")")
                throw error
            }
            if before == .beforeFirstUnlock { try reload() }
            Self.log.notice("unlocked")
        }
    }

    /// Wipes every open copy and cached secret and forgets every key, as at unmount.
    package func forgetEverything() {
        state.withLock { s in
            for f in s.files.values { f.revoke() }
            s.files = [:]
            s.plaintext.removeAll()
            s.index.removeAll()
        }
        keychain.forgetKeys()
    }

    // MARK: secrets

    /// The item's secret: the cached copy, or one decrypted without holding `state` (a secret
    /// may be 16 MiB). A copy decrypted across a lock that took its class key is wiped, not
    /// returned. With `caching`, a fresh copy of the item's current version is kept.
    ///
    /// While locked memory is exhausted (RLIMIT_MEMLOCK), nothing new is cached and the cache
    /// gives back half its budget, so that the pages it frees can hold what must be held.
    package func secret(of item: KeychainItem, caching: Bool = true) throws -> SecureBytes {
        // Nothing is stored for it yet: what a new file holds is in its writer's open copy.
        if item.isPending { return SecureBytes() }
        if let hit = state.withLock({ $0.plaintext.secret(item.id) }) { return hit }
        let plain = try keychain.secret(of: item)
        afterDecrypt.withLock { $0 }?()
        return try state.withLock { s throws -> SecureBytes in
            guard keychain.isAvailable(item.accessible) else {
                plain.wipe()
                throw KeychainError.unavailable(item.accessible)
            }
            guard caching, s.index.item(item.id)?.sealed.version == item.sealed.version else { return plain }
            if let other = s.plaintext.secret(item.id) { return other }
            if LockedMemory.shared.isExhausted {
                s.plaintext.shrink(to: s.plaintext.budget / 2)
                return plain
            }
            s.plaintext.insert(plain, for: item.id)
            return plain
        }
    }

    // MARK: what the control socket asks

    /// Adds the item, or with `updateExisting` updates the one with the same key.
    package func save(_ key: ItemKey, secret: SecureBytes, extras: SecureBytes? = nil, changes: AttributeChanges,
                      defaultClass: AccessibilityClass, updateExisting: Bool) throws -> KeychainItem {
        try change { () throws -> KeychainItem in
            let item = try keychain.save(key, secret: secret, changes: changes, extras: extras, defaultClass: defaultClass,
                                         updateExisting: updateExisting)
            state.withLock { $0.saved(item) }
            return item
        }
    }

    /// Saves a batch in one transaction (`Keychain.save(batch:updateExisting:)`), then puts
    /// every saved item into the index, before any other change.
    package func save(batch: ItemBatch, updateExisting: Bool) throws -> BatchSaveResult {
        try change { () throws -> BatchSaveResult in
            let result = try keychain.save(batch: batch, updateExisting: updateExisting)
            state.withLock { s in for item in result.saved { s.saved(item) } }
            return result
        }
    }

    /// Matching items in `ItemOrder`. An exact key whose name cannot be read in this lock
    /// state answers as the store does (`unavailable`), not as missing.
    package func items(matching query: ItemQuery) throws -> [KeychainItem] {
        let found = state.withLock { $0.index.items(matching: query) }
        if found.isEmpty, let key = query.exactKey, keychain.state == .beforeFirstUnlock {
            return try keychain.item(for: key).map { query.matches($0.record) ? [$0] : [] } ?? []
        }
        return found
    }

    /// Deletes the first match, or every match with `all`, in one transaction; returns them.
    package func delete(matching query: ItemQuery, all: Bool) throws -> [KeychainItem] {
        try change { () throws -> [KeychainItem] in
            var items = try self.items(matching: query)
            guard !items.isEmpty else { throw KeychainError.itemNotFound }
            if !all { items = [items[0]] }
            try keychain.delete(items)
            state.withLock { s in for item in items { s.deleted(item.id) } }
            return items
        }
    }

    /// The cache of decrypted secrets: how many, the locked memory they take, and its budget.
    package var cacheUsage: (secrets: Int, bytes: Int, budget: Int) {
        state.withLock { ($0.plaintext.count, $0.plaintext.bytes, $0.plaintext.budget) }
    }

    /// Every stored item whose name can be read now, in `ItemOrder`.
    package func allItems() -> [KeychainItem] {
        state.withLock { $0.index.items.values.filter { !$0.isPending } }.sorted(by: ItemOrder.precedes)
    }
}
