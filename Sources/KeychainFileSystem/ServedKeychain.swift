import Foundation
import KeychainAccess
import KeychainCrypto
import KeychainModel
import KeychainStore
import Logging
import Synchronization

/// The keychain as its daemon serves it, and the one gate to it: the one owner of the open
/// store (held privately: nothing else can read or write it), the in-memory index of the items
/// looked up so far (a bounded cache: `ItemIndex`), the cache of decrypted secrets, the open
/// files, the lock state with its idle timer, and the observers of its changes. FUSE callbacks
/// (through `KeychainTree`, which keeps path semantics only) and control-socket requests
/// (`ServedKeychainService`) both call it.
///
/// Every change to the store is one of `ItemCommit`'s operations, and an `ItemCommit` exists
/// only inside `change`, which holds `committing`: so each operation writes the store, updates
/// the index and records its `ItemChange` in one place, and a caller cannot do one without the
/// others. `change` delivers what was recorded to the observers once every lock here is
/// released, before it returns. Readers see the index before or after a change, never between.
///
/// Lock order: a thread holding one of these may take only those after it.
///
///     unlocking → committing → state → (the store's own keybag mutex)
///                                  state → (the access gate's process table → a process's address-space slot)
///
/// - `unlocking` runs passphrase attempts one at a time (key derivation, backoff record), so
///   the backoff holds however many arrive at once.
/// - `committing` is held across a change's seal and durable commit (fsync). Reads and opens do
///   not take it, so they go on while another item commits. Nor does a fill of the index
///   (what a lookup finds missing, `covering`): it reads and decrypts with no lock, then puts
///   in what it read under `state` only if no change was put in meanwhile (a generation
///   count), so it never installs data older than a concurrent commit; a lookup waits for
///   a commit only when fills keep losing that race, and then fills under `committing`.
/// - `state` guards the index, the plaintext cache and the open files; it is held only for
///   in-memory work, never across SQL, fsync or the decryption of a secret.
/// - `observers`, `afterLock`, `beforeWaiting`, `notSynchronizableRows` and the test hooks are leaves: each is held only to copy out
///   or replace its value, and what it holds is called after it is released. Observers are
///   called with none of these locks held, so an observer may call back in here.
/// - Below all of these, `LockedMemory`'s own mutex is a leaf: every `SecureBytes` made or
///   freed takes it (an eviction from the cache under `state`, a key under the keybag's), and
///   it calls nothing while held. Its exhaustion handler runs outside it, but may run under
///   any of the locks above, so it only logs.
///
/// The FUSE binding's own mutexes (its inode table, its directory listings, the nodes it has
/// read) are never held while it calls in here, so they take no place in this order.
package final class ServedKeychain: Sendable {
    private let keychain: Keychain
    private static let log = Logger(label: "keychainfs.daemon")
    private let unlocking = Mutex<Void>(())
    private let committing = Mutex<Void>(())
    let state: Mutex<State>
    private let observers = Mutex<[any ItemChangeObserver]>([])
    /// The default access lists of directories read so far (nil: none set), so that a create
    /// costs no store read for it. A leaf: written only under `committing` (this owner is the
    /// store's only writer while it serves it), read anywhere.
    private let directoryAccessDefaults = Mutex<[DirectoryName: AccessList?]>([:])
    /// Run after every lock and after the keys are forgotten: the FUSE binding drops the
    /// kernel's cached pages of the files the lock revoked.
    private let afterLock = Mutex<Hook?>(nil)
    /// Run before anything that may wait long (`willWait`): the FUSE binding answers most
    /// requests on the thread that read them, and lets another thread read meanwhile.
    private let beforeWaiting = Mutex<Hook?>(nil)
    /// Called between decrypting a secret and caching it; tests use it to force interleavings.
    private let afterDecrypt = Mutex<Hook?>(nil)
    /// Called before a secret not cached is read from the store; tests use it likewise.
    private let beforeSecretRead = Mutex<Hook?>(nil)
    /// Called between a fill's read of the store and its install; tests use it likewise.
    private let afterFillRead = Mutex<Hook?>(nil)
    /// The class a new item takes before the rule of its neighbours (`newItemClass`): the
    /// mount's `--default-accessible`, else the configuration's, else `when-unlocked`.
    package let defaultClass: AccessibilityClass
    /// Whether a new item that does not say is synchronizable (config.toml's
    /// `default-synchronizable`; never for a this-device-only class).
    package let defaultSynchronizable: Bool
    /// Kept for the owner's life: the store's shared lease, when this owner is a command's
    /// own (no daemon), so that no daemon opens the store meanwhile.
    private let lease: (any Sendable)?
    private let clock: any MonotonicClock
    /// Seconds without file access before the keychain locks itself, 0 for never; changed at
    /// run time by `set-keychain-settings` or the root's `lock-after` attribute.
    private let lockAfterSeconds: Atomic<Int>
    private let lastAccess = Atomic<Int64>(0)
    /// Per-program access (issue 17): the decision for an item with a non-empty access list,
    /// made here for every channel (`authorize`). It holds its own locks, never one of these
    /// while it asks the user.
    package let access: AccessControl

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
        /// The most items the index holds before the least recently used go.
        let indexLimit: Int
        /// Counts the changes put into the index (and the first unlock): a fill read before
        /// one of them is not put in (`fill`).
        var generation: UInt64 = 0

        /// Only `ItemCommit` puts a stored item's new version in, beside its store write.
        fileprivate mutating func saved(_ item: KeychainItem) {
            generation += 1
            plaintext.remove(item.id)
            evict()
            insertStored(item)
        }

        /// A batch's items, with one eviction for the batch rather than one per item (an
        /// import of a million items spent a third of its main thread evicting).
        fileprivate mutating func saved(batch items: [KeychainItem]) {
            generation += 1
            for item in items {
                plaintext.remove(item.id)
                insertStored(item)
            }
            evict()
        }

        /// Puts a stored item's version in the index. A pending item of its name (a new file not
        /// yet committed through the mount, whose name another channel stored or renamed an
        /// item to) loses it: it leaves the index (neither listed nor found, whatever becomes of
        /// that item), and its files' first commit fails (`OpenFile.lostName`); the kernel is
        /// told by the stored item's `added`.
        private mutating func insertStored(_ item: KeychainItem) {
            let displaced = index.pending.isEmpty ? nil : index.ids[item.key].flatMap { id in
                id != item.id && index.pending.contains(id) ? id : nil
            }
            index.insert(item)
            guard let displaced else { return }
            index.remove(id: displaced)
            for f in files.values where f.itemID == displaced { f.lostName = true }
        }

        /// Values stored through another channel than the item's open files (the control
        /// socket's CLI and git, D-Bus, an import, a sync merge): what those files have not
        /// committed yet is older, and must not be committed over them at their close or fsync
        /// (`OpenFile.dropUncommitted`). Not for a file's own commit, nor for a change that
        /// keeps the secret (attributes, a rename, a class), which a pending write outlives.
        fileprivate mutating func storedElsewhere<Items: Sequence<KeychainItem>>(_ items: Items) {
            guard !files.isEmpty else { return }
            let ids = Set(items.lazy.map(\.id))
            for f in files.values where ids.contains(f.itemID) { f.dropUncommitted() }
        }

        /// Makes room in the index; items with open files stay.
        mutating func evict() {
            guard index.items.count > indexLimit else { return }
            index.evict(limit: indexLimit, pinned: Set(files.values.map(\.itemID)))
        }

        fileprivate mutating func deleted(_ id: Int64) {
            generation += 1
            plaintext.remove(id)
            index.remove(id: id)
        }

        /// A pending item is dropped: nothing of it was stored.
        mutating func discardPending(_ id: Int64) {
            guard index.item(id)?.isPending ?? false else { return }
            deleted(id)
        }

        /// A new item, in the index only until its first commit (`ItemCommit.store(pending:)`);
        /// never evicted. Its name is a change a fill must not undo, so it counts in `generation`.
        mutating func addPending(_ record: ItemRecord) -> KeychainItem {
            let item = KeychainItem(pending: record, id: nextPendingID)
            nextPendingID -= 1
            changedPending(item)
            return item
        }

        /// A pending item's record changed (renamed, or an attribute set) before its commit.
        mutating func changedPending(_ item: KeychainItem) {
            precondition(item.isPending)
            generation += 1
            evict()
            index.insert(item)
        }

        /// The pending item `id` is in the store now, as `item`: its name and its open files
        /// follow.
        fileprivate mutating func stored(pending id: Int64, as item: KeychainItem) {
            generation += 1
            plaintext.remove(item.id)
            evict()
            index.store(pending: id, as: item)
            for f in files.values where f.itemID == id { f.itemID = item.id }
        }
    }

    /// `cacheBudget`: the most locked memory cached secrets may take; by default a share of
    /// RLIMIT_MEMLOCK (`PlaintextCache.budget(forLimit:)`). `indexLimit`: the most items the
    /// index holds (a listed directory may hold more until the next fill). `lease`: kept until
    /// this owner goes. Nothing is read from the store here: the index fills as names are
    /// looked up.
    package init(keychain: Keychain, defaultClass: AccessibilityClass = .default, lockAfter: Int? = nil,
                 cacheBudget: Int? = nil, indexLimit: Int = ServedKeychain.defaultIndexLimit,
                 lease: (any Sendable)? = nil, clock: any MonotonicClock = SystemMonotonicClock(),
                 access: AccessControl = AccessControl(settings: .none, log: nil), defaultSynchronizable: Bool = false) throws {
        self.keychain = keychain
        self.defaultSynchronizable = defaultSynchronizable
        self.access = access
        self.defaultClass = defaultClass
        self.lease = lease
        self.clock = clock
        lockAfterSeconds = Atomic(max(lockAfter ?? 0, 0))
        state = Mutex(State(plaintext: PlaintextCache(
            budget: cacheBudget ?? PlaintextCache.budget(forLimit: LockedMemory.processLimit)), indexLimit: max(indexLimit, 1)))
        noteAccess()
    }

    /// Enough for `ls -l` of a directory of 16,384 items from memory, a few MiB of summaries.
    package static let defaultIndexLimit = 16_384

    package func setAfterDecrypt(_ hook: (@Sendable () -> Void)?) { afterDecrypt.withLock { $0 = hook.map(Hook.init) } }
    package func setBeforeSecretRead(_ hook: (@Sendable () -> Void)?) { beforeSecretRead.withLock { $0 = hook.map(Hook.init) } }
    package func setAfterFillRead(_ hook: (@Sendable () -> Void)?) { afterFillRead.withLock { $0 = hook.map(Hook.init) } }

    // MARK: observers

    /// `observer` hears every change committed from now on (`ItemChangeObserver`).
    package func addObserver(_ observer: any ItemChangeObserver) {
        observers.withLock { $0.append(observer) }
    }

    /// Called with no lock of this owner held (see the lock order).
    private func deliver(_ changes: [ItemChange], origin: ChangeOrigin) {
        guard !changes.isEmpty else { return }
        for observer in observers.withLock({ $0 }) { observer.keychainDidChange(changes, origin: origin) }
    }

    // MARK: changing

    /// Runs one change to the store and the index: `body` gets the only handle that writes
    /// either (`ItemCommit`), and nothing else changes them meanwhile. What it committed goes
    /// to the observers after `committing` is released, also when `body` throws after a write.
    func change<T, E: Error>(origin: ChangeOrigin, _ body: (ItemCommit) throws(E) -> T) throws(E) -> T {
        // Another commit may hold `committing`, and this one syncs the store.
        willWait()
        let (result, changes) = committing.withLock { (_: inout Void) -> (Result<T, E>, [ItemChange]) in
            let commit = ItemCommit(owner: self)
            let result: Result<T, E>
            do throws(E) { result = .success(try body(commit)) } catch { result = .failure(error) }
            return (result, commit.close())
        }
        deliver(changes, origin: origin)
        return try result.get()
    }

    /// The one place where the store is written. Each operation writes the store, puts the
    /// result in the index and records its change; it exists only for the length of one
    /// `change`, under `committing`.
    final class ItemCommit {
        fileprivate let owner: ServedKeychain
        private var changes: [ItemChange] = []
        private var isOpen = true
        private var keychain: Keychain { owner.keychain }

        fileprivate init(owner: ServedKeychain) { self.owner = owner }

        fileprivate func close() -> [ItemChange] {
            isOpen = false
            return changes
        }

        /// `addedClass`: the class of a create's new row (`ItemIndex.storedClassesChanged`).
        private func note(_ change: ItemChange, addedClass: AccessibilityClass? = nil) {
            precondition(isOpen, "an ItemCommit used after its change ended")
            changes.append(change)
            owner.state.withLock { $0.index.storedClassesChanged(change, added: addedClass) }
        }

        private func check() { precondition(isOpen, "an ItemCommit used after its change ended") }

        /// `covering`, inside the change: no change can come between the fill and `body`, nor
        /// a fill that evicts.
        func covering<T>(_ locations: TreeLocation..., listing: Bool = false,
                         _ body: (inout State) throws(FileSystemError) -> T) throws(FileSystemError) -> T {
            check()
            return try owner.coveringInChange(locations, listing: listing, body)
        }

        /// Whether the store may hold items of the service that the index does not: it holds
        /// the service whole only once it is complete.
        func mayHoldUnseen(_ service: String) -> Bool {
            check()
            return !owner.state.withLock { $0.index.complete.contains(ItemGroup(kind: .generic, name: service)) }
        }

        /// Whether the store holds an item of this key, readable now or not, or the index a
        /// pending one.
        func isTaken(_ key: ItemKey) throws -> Bool {
            check()
            let pending = owner.state.withLock { s in s.index.item(s.index.ids[key])?.isPending ?? false }
            return try pending || keychain.containsItem(for: key)
        }

        /// Create, committed: the pending item is stored as `record` with `secret`, its class
        /// made no weaker than its neighbours' now (`newItemClass`).
        func store(pending item: KeychainItem, as record: ItemRecord, secret: SecureBytes) throws -> KeychainItem {
            check()
            var record = record
            // A list set on the pending file is kept; with none, its directory's default.
            if record.attributes.values.access == nil { record.attributes.values.access = try owner.newItemAccess(for: record.key) }
            record.attributes.applyDefaultSynchronizable(owner.defaultSynchronizable)
            let stored: KeychainItem
            if case .generic = record.key {
                // The service's stored classes are read in the insert's own transaction.
                let base = record.attributes.accessible
                let pending = owner.pendingSiblingClasses(of: record.key)
                stored = try keychain.add(record, secret: secret) { classes in
                    AccessibilityClass.forNewItem(mountDefault: base, siblings: Array(classes) + pending)
                }
            } else {
                record.attributes.accessible = try owner.newItemClass(for: record.key, base: record.attributes.accessible)
                stored = try keychain.add(record, secret: secret)
            }
            owner.state.withLock { $0.stored(pending: item.id, as: stored) }
            note(.added(stored.key), addedClass: stored.accessible)
            return stored
        }

        /// Update: a new secret (and modification time) under the same name and attributes.
        func update(_ item: KeychainItem, secret: SecureBytes, modified: Date) throws -> KeychainItem {
            check()
            // A summary is completed in the update's own transaction.
            let updated = try keychain.update(item, to: item.record, secret: secret, modified: modified)
            owner.state.withLock { $0.saved(updated) }
            note(.updated(updated.key))
            return updated
        }

        /// Set attributes: `record` replaces the item's (a new key renames it, a new class
        /// re-seals it), and `extras` its extras (nil: kept). The secret is kept, so an open
        /// file's uncommitted change outlives this and is still committed.
        func setAttributes(_ item: KeychainItem, to record: ItemRecord, extras: SecureBytes? = nil) throws -> KeychainItem {
            check()
            let updated = try keychain.update(item, to: record, extras: extras)
            owner.state.withLock { $0.saved(updated) }
            note(updated.key == item.key ? .updated(updated.key) : .moved(from: item.key, to: updated.key))
            return updated
        }

        /// Move: the item takes `record` (its new name), replacing `replaced` in the same
        /// transaction.
        func move(_ item: KeychainItem, to record: ItemRecord, replacing replaced: KeychainItem?) throws -> KeychainItem {
            check()
            let moved = try keychain.update(keychain.complete(item), to: record,
                                            replacing: try replaced.map { try keychain.complete($0) })
            owner.state.withLock { s in
                if let replaced { s.deleted(replaced.id) }
                s.saved(moved)
            }
            if let replaced { note(.removed(replaced.key)) }
            note(.moved(from: item.key, to: moved.key))
            return moved
        }

        /// Delete, in one transaction; a pending item has nothing stored and only leaves the index.
        func delete(_ items: [KeychainItem]) throws {
            check()
            let stored = items.filter { !$0.isPending }
            if !stored.isEmpty { try keychain.delete(stored) }
            owner.state.withLock { s in for item in items { s.deleted(item.id) } }
            for item in stored { note(.removed(item.key)) }
        }

        /// Adds the item, or with `updateExisting` updates the one with the same key. A new
        /// item with no class given takes the owner's default (`newItemClass`). A whole new
        /// value from outside the item's open files, whichever channel: it outdates their
        /// uncommitted changes (`State.storedElsewhere`).
        func save(_ key: ItemKey, secret: SecureBytes, extras: SecureBytes?, changes: AttributeChanges,
                  updateExisting: Bool) throws -> KeychainItem {
            check()
            var changes = changes
            // A new item given no list (`-T`/`-A`) takes its directory's default.
            if changes.values.access == nil, let list = try owner.newItemAccess(for: key), !(try keychain.containsItem(for: key)) {
                changes.values.access = list
            }
            let item = try keychain.save(key, secret: secret, changes: changes, extras: extras,
                                         defaultClass: owner.defaultClass, defaultSynchronizable: owner.defaultSynchronizable,
                                         updateExisting: updateExisting)
            owner.state.withLock { s in
                s.saved(item)
                s.storedElsewhere(CollectionOfOne(item))
            }
            // A new row starts at version 1; an update raises it.
            note(item.sealed.version == 1 ? .added(item.key) : .updated(item.key))
            return item
        }

        /// A batch into a store with no item, in one transaction
        /// (`Keychain.importIntoEmptyStore`); nil, with nothing written, unless the store and
        /// this owner's index are empty and nobody observes the changes (a command's own
        /// owner: a mount's takes its imports in batches, `save(batch:)`). The index held no
        /// item, so it needs none of the new ones: what it knew to be complete or absent is
        /// forgotten, and the next lookup reads the store.
        func importIntoEmptyStore(_ batch: ItemBatch, updateExisting: Bool, progress: (Int) -> Void) throws -> ImportReport? {
            check()
            guard owner.observers.withLock({ $0.isEmpty }),
                  owner.state.withLock({ $0.index.items.isEmpty && $0.files.isEmpty }) else { return nil }
            guard let report = try keychain.importIntoEmptyStore(batch, updateExisting: updateExisting, progress: progress) else {
                return nil
            }
            owner.state.withLock { s in
                s.generation += 1
                s.index.forgetCompleteness()
            }
            return report
        }

        /// A batch in one transaction (`Keychain.save(batch:updateExisting:)`): as `save`, whole
        /// new values from outside the items' open files.
        func save(batch: ItemBatch, updateExisting: Bool) throws -> BatchSaveResult {
            check()
            let result = try keychain.save(batch: batch, updateExisting: updateExisting)
            owner.state.withLock { s in
                s.saved(batch: result.saved)
                s.storedElsewhere(result.saved)
            }
            for item in result.saved { note(item.sealed.version == 1 ? .added(item.key) : .updated(item.key)) }
            return result
        }
    }

    // MARK: filling the index

    /// Runs `body` under `state` once the index covers `location` (`ItemIndex.missing`):
    /// at once if it does, else after a fill. Not from inside `change` (`ItemCommit.covering`).
    /// One location, not a list: every open and stat passes here, and a list is an allocation.
    func covering<T>(_ location: TreeLocation, listing: Bool = false,
                     _ body: (inout State) throws(FileSystemError) -> T) throws(FileSystemError) -> T {
        // A fill installs nothing older than a concurrent change, and another fill may evict
        // what this one put in before `body` runs: then it fills again. Past a few rounds
        // (changes or fills keep coming), it fills under `committing`, where neither can.
        for _ in 0..<4 {
            let hit = try state.withLock { s throws(FileSystemError) -> T? in
                guard s.index.covers(location, listing: listing) else { return nil }
                return .some(try body(&s))
            }
            if let hit { return hit }
            try fill([location], listing: listing)
        }
        return try change(origin: .tree) { c throws(FileSystemError) -> T in try c.covering(location, listing: listing, body) }
    }

    fileprivate func coveringInChange<T>(_ locations: [TreeLocation], listing: Bool,
                                     _ body: (inout State) throws(FileSystemError) -> T) throws(FileSystemError) -> T {
        try fill(locations, listing: listing)
        return try state.withLock { s throws(FileSystemError) -> T in try body(&s) }
    }

    /// Reads what the index misses for `locations`: SQL and decryption without `state`, the
    /// result put in under it only if no change was put in meanwhile (`State.generation`):
    /// else what was read may be older than the index, and is dropped.
    private func fill(_ locations: [TreeLocation], listing: Bool) throws(FileSystemError) {
        for location in locations {
            let (needs, generation) = state.withLock { ($0.index.missing(location, listing: listing), $0.generation) }
            for need in needs {
                do {
                    switch need {
                    case .names:
                        let (services, servers) = try keychain.groupNames()
                        install(generation) { $0.index.install(services: services, servers: servers) }
                    case .group(let g):
                        let found = try keychain.groupSummaries(kind: g.kind, name: g.name)
                        install(generation) { s in
                            s.evict()
                            s.index.install(group: g, found)
                        }
                    case .item(let key):
                        guard let found = try keychain.summary(for: key) else {
                            install(generation) { s in s.index.noteAbsent(key, limit: s.indexLimit) }
                            continue
                        }
                        install(generation) { s in
                            s.evict()
                            s.index.install(found)
                        }
                    case .shown(let g):
                        // None shown: the index holds all of them (none), and a name looked
                        // up there later reads nothing.
                        guard try keychain.groupIsShown(kind: g.kind, name: g.name) else {
                            install(generation) { $0.index.noteNoneShown(g) }
                            continue
                        }
                        install(generation) { $0.index.makeService(g.name, now: nil) }
                    }
                } catch KeychainError.unavailable {
                    // Names of this class cannot be read in this lock state: as if absent.
                    continue
                } catch {
                    throw FileSystemError.from(error)
                }
            }
        }
    }

    /// An entry of a page of a generic service (`servicePage`): its item's id and account, and
    /// what `KeychainTree.stat` of its name gives, when the page could tell without resolving
    /// the name again; nil when it could not (the caller then stats it by name).
    package struct ServiceEntry: Sendable {
        package var id: Int64
        package var account: String
        package var stat: FileStat?
    }

    /// One page of a generic service's shown items, read from the store after the id
    /// `after` (`Keychain.groupPage`), with the id to resume after (nil at the end). A
    /// listing pages through the store rather than the index, so that a directory of any
    /// size lists in bounded memory: the items read are put in the index only as lookups
    /// would (bounded, least recently used out, the group not marked complete), so that the
    /// attributes of a readdirplus reply come from memory.
    ///
    /// A page listed before (`ls -l` again) usually has every row in the index at the row's
    /// version: then only the rows' heads are read (`Keychain.groupPageHeads`) and no item is
    /// decoded or copied. The attributes are taken under the same lock as the index is read
    /// (or filled), and only if no change was put in since the store was read, so they are
    /// those `stat` would give then.
    package func servicePage(_ service: String, after: Int64, limit: Int) throws(FileSystemError)
        -> (entries: [ServiceEntry], next: Int64?) {
        let generation = state.withLock { $0.generation }
        let heads: (heads: [SealedItem.Head], next: Int64?)
        do {
            heads = try keychain.groupPageHeads(kind: .generic, name: service, after: after, limit: limit)
        } catch KeychainError.unavailable {
            return ([], nil)
        } catch {
            throw FileSystemError.from(error)
        }
        if heads.heads.isEmpty { return ([], nil) }
        let held = state.withLock { s -> [ServiceEntry]? in
            guard s.generation == generation else { return nil }
            let accounts = s.index.services[service.exact]?.accounts
            let files = s.files
            var entries: [ServiceEntry] = []
            entries.reserveCapacity(heads.heads.count)
            for head in heads.heads {
                guard let item = s.index.item(head.id), keychain.isCurrent(item, head) else { return nil }
                guard case .generic(let g) = item.key, ItemIndex.isShown(item.key) else { continue }
                entries.append(ServiceEntry(id: item.id, account: g.account,
                                            stat: accounts?[g.account.exact] == item.id ? KeychainTree.itemStat(item, openFiles: files) : nil))
            }
            return entries
        }
        if let held { return (held, heads.next) }

        let page: (items: [KeychainItem], next: Int64?)
        do {
            page = try keychain.groupPage(kind: .generic, name: service, after: after, limit: limit) { ids in
                state.withLock { s in
                    var found: [Int64: KeychainItem] = [:]
                    found.reserveCapacity(ids.count)
                    for id in ids { if let item = s.index.item(id) { found[id] = item } }
                    return found
                }
            }
        } catch KeychainError.unavailable {
            return ([], nil)
        } catch {
            throw FileSystemError.from(error)
        }
        let shown = page.items.filter { ItemIndex.isShown($0.key) }
        var entries: [ServiceEntry] = []
        entries.reserveCapacity(shown.count)
        var installed = false
        install(generation) { s in
            installed = true
            for item in shown where s.index.item(item.id) == nil {
                s.evict()
                s.index.install(item)
            }
            let accounts = s.index.services[service.exact]?.accounts
            let files = s.files
            for item in shown {
                guard case .generic(let g) = item.key else { continue }
                entries.append(ServiceEntry(id: item.id, account: g.account,
                                            stat: accounts?[g.account.exact] == item.id ? KeychainTree.itemStat(item, openFiles: files) : nil))
            }
        }
        if !installed {
            for item in shown {
                guard case .generic(let g) = item.key else { continue }
                entries.append(ServiceEntry(id: item.id, account: g.account, stat: nil))
            }
        }
        return (entries, page.next)
    }

    /// The pending items (created, not yet committed) of a generic service, by id counting
    /// down (the order they were made in).
    package func pendingItems(service: String) -> [KeychainItem] {
        state.withLock { s in
            s.index.pending.compactMap { s.index.item($0) }.filter {
                if case .generic(let g) = $0.key { g.service.isSame(as: service) && ItemIndex.isShown($0.key) } else { false }
            }.sorted { $0.id > $1.id }
        }
    }

    private func install(_ generation: UInt64, _ body: (inout State) -> Void) {
        afterFillRead.withLock { $0 }?.run()
        state.withLock { s in if s.generation == generation { body(&s) } }
    }

    // MARK: lock state

    package var lockState: LockState { keychain.state }
    package var hasPassphrase: Bool { keychain.hasPassphrase }
    package func passphraseWait() throws -> Int { try keychain.passphraseWait() }

    /// Whether the store holds an item of the service that the tree shows (one row read). The
    /// index knows a directory by its name before it holds its items, so only the store can
    /// say that a service it does not hold whole is empty (`rename`); a store that cannot tell
    /// counts as holding one.
    package func storeShowsService(_ name: String) -> Bool {
        (try? keychain.groupIsShown(kind: .generic, name: name)) ?? true
    }
    package var storePath: String { keychain.path }
    package func isAvailable(_ c: AccessibilityClass) -> Bool { keychain.isAvailable(c) }

    /// Notes a file access, which the idle lock counts from.
    package func noteAccess() { lastAccess.store(clock.now, ordering: .relaxed) }
    package var idleSeconds: Int64 { clock.now - lastAccess.load(ordering: .relaxed) }

    package var lockAfter: Int? {
        let s = lockAfterSeconds.load(ordering: .relaxed)
        return s > 0 ? s : nil
    }

    /// A new setting counts from now, so shortening it does not lock at once.
    package func setLockAfter(_ seconds: Int?) {
        noteAccess()
        lockAfterSeconds.store(max(seconds ?? 0, 0), ordering: .relaxed)
    }

    /// Locks if unlocked and idle for at least the lock-after setting; the daemon calls it
    /// twice a second.
    package func lockIfIdle() {
        guard let limit = lockAfter, lockState == .unlocked, idleSeconds >= Int64(limit) else { return }
        lock(origin: .control)
    }

    package func setAfterLock(_ hook: (@Sendable () -> Void)?) { afterLock.withLock { $0 = hook.map(Hook.init) } }

    package func setBeforeWaiting(_ hook: (@Sendable () -> Void)?) { beforeWaiting.withLock { $0 = hook.map(Hook.init) } }

    /// Called before a commit, and by the access gate before anything that may wait (a new
    /// caller to identify, a prompt, a refusal to log).
    package func willWait() { beforeWaiting.withLock { $0 }?.run() }

    /// The one lock, whoever asks (the idle timer, the CLI, a signal, the tree): takes the keys,
    /// then wipes every cached or open copy of a secret whose class key is gone, then lets the
    /// FUSE binding drop the kernel's pages (`afterLock`), then tells the observers. The keys
    /// go first: an open or a cache fill that checks availability under `state` after this
    /// point is refused, and one before it is undone by the pass below.
    package func lock(origin: ChangeOrigin = .control) {
        let before = keychain.state
        if before == .unlocked { Self.log.notice("locked") }
        keychain.lock()
        state.withLock { s in
            // The class the item has now counts too: it may have changed while open.
            for f in s.files.values where !keychain.isAvailable(f.accessible)
                || !(s.index.item(f.itemID).map { keychain.isAvailable($0.accessible) } ?? true) {
                f.revoke()
            }
            s.plaintext.removeAll { id in !(s.index.item(id).map { keychain.isAvailable($0.accessible) } ?? false) }
        }
        afterLock.withLock { $0 }?.run()
        if keychain.state != before { deliver([.lockStateChanged(keychain.state)], origin: origin) }
    }

    /// One attempt at a time: a wrong passphrase is recorded before the next attempt is judged.
    package func unlock(passphrase: SecureBytes?, origin: ChangeOrigin = .control) throws {
        // Not idle: the lock-after timer must not lock again while the names are reloaded.
        noteAccess()
        let before = keychain.state
        try unlocking.withLock { (_: inout Void) throws -> Void in
            do { try keychain.unlock(passphrase: passphrase) } catch {
                Self.log.warning("unlock refused: \((error as? KeychainError)?.description ?? "\(error)")")
                throw error
            }
            // What was read of the store before held only the `always` classes.
            if before == .beforeFirstUnlock {
                committing.withLock { _ in state.withLock { s in
                    s.generation += 1
                    s.index.forgetCompleteness()
                } }
            }
            Self.log.notice("unlocked")
        }
        // Rows from before the index of every row can be read now (a single read once done).
        do { try completeAttributeIndex() } catch { Self.log.warning("indexing attributes: \(error)") }
        noteAccess()
        if keychain.state != before { deliver([.lockStateChanged(keychain.state)], origin: origin) }
    }

    /// Does now what waits for commits to pause (`Keychain.settle`).
    package func settle() { keychain.settle() }

    /// Wipes every open copy and cached secret and forgets every key, as at unmount.
    package func forgetEverything() {
        state.withLock { s in
            for f in s.files.values { f.revoke() }
            s.files = [:]
            s.plaintext.removeAll()
            s.generation += 1
            s.index.removeAll()
        }
        keychain.forgetKeys()
        afterLock.withLock { $0 }?.run()
    }

    // MARK: per-program access

    /// The one decision whether `caller` may do `operation` to `item`, whoever asks (the
    /// tree at open, delete, rename and overwrite; the control socket for secrets and
    /// changes; later D-Bus with a pinned caller). An empty list allows any program at no
    /// cost. Refused: `accessDenied` (EACCES, exit 77). Always allow adds the program to the
    /// item's list through a commit before this returns. Called with no lock of this owner
    /// held: only this caller waits while the user is asked.
    package func authorize(_ caller: AccessCaller, _ item: KeychainItem, _ operation: AccessOperation,
                           prompting: Bool = true) throws(KeychainError) {
        try authorize(caller, record: item.record, itemID: String(item.id), operation, prompting: prompting)
    }

    /// Whether `caller` may open an item of `record` at once, under `state`: no list, or the
    /// gate's common case (`AccessControl.allowsAtOnce`). False: `authorize` decides.
    package func allowsAtOnce(_ caller: AccessCaller, _ record: ItemRecord) -> Bool {
        guard let list = record.attributes.values.access else { return true }
        return access.allowsAtOnce(caller, list: list)
    }

    /// `authorize` for an item known by its record (an export page's); `itemID` is what an
    /// Allow once is granted for (made only when needed).
    package func authorize(_ caller: AccessCaller, record: ItemRecord, itemID: @autoclosure () -> String, _ operation: AccessOperation,
                           prompting: Bool = true) throws(KeychainError) {
        guard let list = record.attributes.values.access, !list.isAnyProgram else { return }
        let item = record
        // The gate calls `willWait` before anything that may wait (a new caller, a prompt, a
        // refusal), and makes the item's description only then: a known caller it allows at
        // once is answered without either.
        switch access.decide(caller, item: AccessItem(id: itemID(), path: Self.treePath(item.key), key: item.key),
                             operation: operation, list: list, prompting: prompting, beforeWaiting: { willWait() }) {
        case .allowed: return
        // Named by its path in the tree (names only, escaped): `dump-keychain -d` and `export`
        // ask for many items, and the user must learn which one refused.
        case .refused(let why): throw .accessDenied("\(Shown.text(Self.treePath(item.key))): \(why)")
        case .allowedAlways(let rule):
            do { try addToAccessList(item.key, rule) } catch {
                throw .accessDenied("allowed, but adding the program to the list failed: \((error as? KeychainError)?.description ?? "\(error)")")
            }
        }
    }

    /// Always allow: `rule` joins the item's list as it is now (the item may have changed
    /// while the user was asked), in one commit.
    private func addToAccessList(_ key: ItemKey, _ rule: AccessRule) throws {
        try change(origin: .tree) { c throws -> Void in
            guard let current = try keychain.item(for: key) else { throw KeychainError.itemNotFound }
            var record = current.record
            let list = record.attributes.values.access ?? .anyProgram
            // A list emptied meanwhile allows everyone already.
            guard !list.isAnyProgram else { return }
            record.attributes.values.access = try list.adding(rule)
            _ = try c.setAttributes(current, to: record)
        }
    }

    /// Sets the item's list to `list`, vouched for by the store's passphrase instead of by the
    /// list itself: how the user lets in a program the list refuses when no prompt is
    /// configured (the access log's "to allow" command), and how a list is changed at all in a
    /// store that only its listed programs may touch. The passphrase is checked one attempt at
    /// a time, as `unlock` checks it. Programs already listed keep the file they were allowed
    /// with, but those in `repinning` (a program upgraded since); the others are pinned as
    /// `list` pinned them. An empty list allows any program.
    package func setAccessList(_ key: ItemKey, to list: AccessList, repinning: [AccessProgram] = [],
                               authorizedBy passphrase: SecureBytes) throws -> ItemRecord {
        defer { passphrase.wipe() }
        // Scrypt: long enough to let other requests go on.
        willWait()
        try unlocking.withLock { (_: inout Void) throws -> Void in
            do { try keychain.checkPassphrase(passphrase) } catch {
                Self.log.warning("access list change refused: \((error as? KeychainError)?.description ?? "\(error)")")
                throw error
            }
        }
        return try change(origin: .control) { c throws -> ItemRecord in
            guard let current = try keychain.item(for: key) else { throw KeychainError.itemNotFound }
            var record = current.record
            let kept = list.keepingPins(of: record.attributes.values.access, repinning: repinning)
            record.attributes.values.access = kept.isAnyProgram ? nil : kept
            return try c.setAttributes(current, to: record).record
        }
    }

    // MARK: the default access list of a directory

    /// A service directory (generic) or a server directory (internet).
    package struct DirectoryName: Hashable, Sendable {
        package var kind: ItemKind
        package var name: String
        package init(kind: ItemKind, name: String) { self.kind = kind; self.name = name }
        /// Byte-exact (`ExactName`).
        package static func == (a: Self, b: Self) -> Bool { a.kind == b.kind && a.name.isSame(as: b.name) }
        package func hash(into hasher: inout Hasher) { hasher.combine(kind); ExactName.hash(name, into: &hasher) }
        /// The directory whose default a new item of `key` takes.
        package init(of key: ItemKey) {
            switch key {
            case .generic(let g): self.init(kind: .generic, name: g.service)
            case .internet(let i): self.init(kind: .internet, name: i.server)
            }
        }
        /// Its path in the tree, for the prompt and the log.
        package var treePath: String {
            kind == .generic ? "/" + TreeName.escape(name) : "/internet/" + TreeName.escape(name)
        }
    }

    /// The default access list of a service or server directory, nil when none is set.
    package func directoryAccess(_ directory: DirectoryName) throws -> AccessList? {
        if let known = directoryAccessDefaults.withLock({ $0[directory] }) { return known }
        let list = try keychain.directoryAccess(kind: directory.kind, name: directory.name)
        directoryAccessDefaults.withLock { $0[directory] = .some(list) }
        return list
    }

    /// Sets (nil or empty: removes) a directory's default list, in one commit. It changes no
    /// item: only items created below it from now on take it.
    package func setDirectoryAccess(_ list: AccessList?, for directory: DirectoryName) throws {
        let stored = list.flatMap { $0.isAnyProgram ? nil : $0 }
        try change(origin: .tree) { _ throws -> Void in
            defer { directoryAccessDefaults.withLock { $0[directory] = nil } }
            try keychain.setDirectoryAccess(stored, kind: directory.kind, name: directory.name)
        }
    }

    /// The list a new item of `key` takes when it is given none: its directory's default.
    func newItemAccess(for key: ItemKey) throws -> AccessList? {
        try directoryAccess(DirectoryName(of: key))
    }

    /// The item's path in the tree, for the prompt and the log.
    package static func treePath(_ key: ItemKey) -> String {
        switch key {
        case .generic(let g): "/" + TreeName.escape(g.service) + "/" + TreeName.escape(g.account)
        case .internet(let i): InternetTreePath.path(of: i)
        }
    }

    // MARK: the class of a new item

    /// The one rule for the class of a new item, whoever makes it (the tree, the control
    /// socket, the CLI with no daemon, later D-Bus): a class given is kept; with none, the
    /// owner's `defaultClass` (`ItemCommit.save`). A file made in the tree, where a program
    /// gives no class and editors write temporary files beside the item, is moreover made as
    /// strict as the strictest item beside it (`AccessibilityClass.forNewItem`): this function,
    /// from `base` (the default, or the class set on the pending file): a generic item's
    /// service, readable now or not (the store's class column), or an internet item's
    /// directory, with the pending items of either.
    package func newItemClass(for key: ItemKey, base: AccessibilityClass) throws -> AccessibilityClass {
        let stored: [AccessibilityClass]
        switch key {
        case .generic(let g):
            let (known, generation) = state.withLock { ($0.index.storedClasses[g.service.exact], $0.generation) }
            if let known {
                stored = Array(known)
            } else {
                let read = try keychain.groupClasses(kind: .generic, name: g.service)
                state.withLock { s in
                    if s.generation == generation { s.index.noteStoredClasses(read, service: g.service, limit: s.indexLimit) }
                }
                stored = Array(read)
            }
        case .internet(let i):
            // A server is read whole when first looked up, so its directory is usually in the
            // index already (as the tree's lookup of the new name put it there).
            let indexed = state.withLock { s in
                s.index.directory(server: i.server, port: i.port, path: InternetPath.segments(i.path))
                    .map { $0.items.values.compactMap { s.index.item($0)?.accessible } }
            }
            stored = try indexed ?? keychain.groupSummaries(kind: .internet, name: i.server).compactMap { item in
                guard case .internet(let k) = item.key, k.port == i.port, k.path.isSame(as: i.path) else { return nil }
                return item.accessible
            }
        }
        return AccessibilityClass.forNewItem(mountDefault: base, siblings: stored + pendingSiblingClasses(of: key))
    }

    /// The classes of the pending items beside `key` (`newItemClass`).
    func pendingSiblingClasses(of key: ItemKey) -> [AccessibilityClass] {
        state.withLock { s in
            s.index.pending.compactMap { id -> AccessibilityClass? in
                guard let item = s.index.item(id), item.key.isSibling(of: key) else { return nil }
                return item.accessible
            }
        }
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
        beforeSecretRead.withLock { $0 }?.run()
        let plain = try keychain.secret(of: keychain.complete(item))
        afterDecrypt.withLock { $0 }?.run()
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

    /// The item's extras (the internet item's fields that the model does not name).
    package func extras(of item: KeychainItem) throws -> SecureBytes? {
        try keychain.extras(of: keychain.complete(item))
    }

    // MARK: what sync merges

    /// Applies a sync merge in one change (origin `.sync`): each entry of `puts` replaces the
    /// item of its key whole (or is added), each of `deletes` goes. An item whose stored row
    /// version is no longer the one in `expected` (nil: absent) changed since the merge read it:
    /// it is left as it is (the next exchange publishes it and merges again), so a change made
    /// meanwhile through the mount is never overwritten unseen. Returns the keys left alone.
    package func applySync(puts: ItemBatch, deletes: [ItemKey], expected: [ItemKey: Int64?]) throws -> SyncSkips {
        try change(origin: .sync) { c throws -> SyncSkips in
            var skipped = SyncSkips()
            func unchanged(_ key: ItemKey) throws -> Bool {
                guard let want = expected[key] else { return true }
                let now = try keychain.item(for: key)
                guard now?.sealed.version != want else { return true }
                skipped.all.insert(key)
                if want == nil, let now, now.record.attributes.values.synchronizable != true || now.accessible.isThisDeviceOnly {
                    skipped.heldByItemThatDoesNotSync.append(key)
                }
                return false
            }
            var batch = ItemBatch()
            for entry in puts.entries where try unchanged(entry.record.key) {
                try puts.withSecretAndExtras(entry) { secret, extras in
                    batch.append(entry.record, secret: secret, extras: extras)
                }
            }
            if !batch.isEmpty { _ = try c.save(batch: batch, updateExisting: true) }
            var doomed: [KeychainItem] = []
            for key in deletes where try unchanged(key) {
                if let item = try keychain.item(for: key) { doomed.append(item) }
            }
            if !doomed.isEmpty { try c.delete(doomed) }
            return skipped
        }
    }

    /// What `applySync` left as it was: values changed here since the merge read them (the next
    /// exchange sees to them), and among them names held here by an item that does not sync
    /// (made not synchronizable or this-device-only), which wait until that item syncs, is
    /// renamed or is deleted.
    package struct SyncSkips: Sendable {
        package var all: Set<ItemKey> = []
        package var heldByItemThatDoesNotSync: [ItemKey] = []
    }

    // MARK: what the control socket asks

    /// Adds the item, or with `updateExisting` updates the one with the same key; a new item
    /// with no class given takes `defaultClass`.
    package func save(_ key: ItemKey, secret: SecureBytes, extras: SecureBytes? = nil, changes: AttributeChanges,
                      updateExisting: Bool, origin: ChangeOrigin = .control) throws -> KeychainItem {
        try change(origin: origin) { c throws -> KeychainItem in
            try c.save(key, secret: secret, extras: extras, changes: changes, updateExisting: updateExisting)
        }
    }

    /// Saves a batch in one transaction (`Keychain.save(batch:updateExisting:)`), then puts
    /// every saved item into the index, before any other change.
    package func save(batch: ItemBatch, updateExisting: Bool, origin: ChangeOrigin = .control) throws -> BatchSaveResult {
        try change(origin: origin) { c throws -> BatchSaveResult in try c.save(batch: batch, updateExisting: updateExisting) }
    }

    /// An import into a store with no item, in one transaction; nil when the store (or
    /// this owner) is not in that state (`ItemCommit.importIntoEmptyStore`).
    package func importIntoEmptyStore(_ batch: ItemBatch, updateExisting: Bool,
                                      progress: (Int) -> Void) throws -> ImportReport? {
        try change(origin: .control) { c throws -> ImportReport? in
            try c.importIntoEmptyStore(batch, updateExisting: updateExisting, progress: progress)
        }
    }

    /// Matching items in `ItemOrder`, from the store (the index holds only what the mount
    /// looked up). An exact key whose name cannot be read in this lock state answers as the
    /// store does (`unavailable`), not as missing.
    package func items(matching query: ItemQuery) throws -> [KeychainItem] {
        try keychain.items(matching: query)
    }

    /// Deletes the first match, or every match with `all`, in one transaction; returns them.
    package func delete(matching query: ItemQuery, all: Bool, origin: ChangeOrigin = .control) throws -> [KeychainItem] {
        try change(origin: origin) { c throws -> [KeychainItem] in
            var items = try self.items(matching: query)
            guard !items.isEmpty else { throw KeychainError.itemNotFound }
            if !all { items = [items[0]] }
            try c.delete(items)
            return items
        }
    }

    /// A page of the store's items with their secrets, for `export`.
    package func exportPage(afterID: Int64, limit: Int) throws -> ExportPage {
        try keychain.exportPage(afterID: afterID, limit: limit)
    }

    /// Checks every row against its seal and the ledger.
    package func verify(progress: (Int) -> Void = { _ in }) throws -> (checked: Int, problems: [IntegrityProblem]) {
        try keychain.verify(progress: progress)
    }

    package func countsByClass() throws -> [AccessibilityClass: Int] { try keychain.countsByClass() }

    /// How many items have names readable now.
    package func readableItemCount() throws -> Int { try keychain.readableItemCount() }

    /// The cache of decrypted secrets: how many, the locked memory they take, and its budget.
    package var cacheUsage: (secrets: Int, bytes: Int, budget: Int) {
        state.withLock { ($0.plaintext.count, $0.plaintext.bytes, $0.plaintext.budget) }
    }

    /// Every item whose name can be read now, in `ItemOrder`, from the store.
    package func allItems() throws -> [KeychainItem] {
        try keychain.allItems().items
    }

    /// Rows found not synchronizable, by id, at the version they were read at (a leaf lock):
    /// sync's exchanges (`SyncSession`, one at a time) skip them while their version stays,
    /// so that a store of many items that do not sync is not decrypted at every exchange. Any
    /// change of a row raises its version and ids are never reused, so an entry never lies;
    /// it lives as long as this owner, whichever session (the daemon's watcher, a `sync now`
    /// through the control socket) ran the exchange.
    package let notSynchronizableRows = Mutex<[Int64: Int64]>([:])

    /// Every row's id and version, nothing decrypted: sync publishes only the rows whose
    /// version it has not seen (`SyncSession.exchange`).
    package func rowVersions() throws -> [(id: Int64, version: Int64)] { try keychain.rowVersions() }

    /// The item in this row, when its name is readable now: the Secret Service names items by
    /// row id (ServedKeychain+SecretService.swift).
    package func item(id: Int64) throws -> KeychainItem? { id > 0 ? try keychain.item(id: id) : nil }

    // MARK: the blind index of Secret Service attributes, readable in every lock state

    /// The ids of the items in `collection` (nil: any) whose attributes hold every pair of
    /// `query`, readable now or not (`Keychain.itemIDs(matching:collection:others:)`).
    package func itemIDs(matching query: [String: String], collection: String?, others: [String] = []) throws -> [Int64] {
        try keychain.itemIDs(matching: query, collection: collection, others: others)
    }

    package func item(_ id: Int64, isIn collection: String, others: [String]) throws -> Bool {
        try keychain.item(id, isIn: collection, others: others)
    }

    package func itemClasses(_ ids: [Int64]) throws -> [Int64: AccessibilityClass] { try keychain.itemClasses(ids) }

    /// The class of the row `id`, readable now or not; nil when there is none.
    package func itemClass(id: Int64) throws -> AccessibilityClass? { id > 0 ? try keychain.itemClass(id: id) : nil }

    package func sealedRecord(named name: String) throws -> SecureBytes? { try keychain.sealedRecord(named: name) }

    package func setSealedRecord(named name: String, to value: SecureBytes) throws {
        try keychain.setSealedRecord(named: name, to: value)
    }

    /// Indexes the Secret Service attributes of the rows written before the store indexed
    /// every row (`Keychain.completeAttributeIndex`); returns how many are left unreadable.
    /// Under `committing`, so that no change to a row comes between its read and its tags.
    @discardableResult
    package func completeAttributeIndex() throws -> Int {
        try committing.withLock { _ in try keychain.completeAttributeIndex() }
    }
}

/// Seconds of a clock that only goes forward, for the idle lock; tests move their own.
package protocol MonotonicClock: Sendable {
    var now: Int64 { get }
}

/// CLOCK_MONOTONIC, in whole seconds.
package struct SystemMonotonicClock: MonotonicClock {
    package init() {}
    package var now: Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec)
    }
}

extension ItemKey {
    /// Whether `other` lies beside this key in the tree: the same service, or the same
    /// server, port and path.
    func isSibling(of other: ItemKey) -> Bool {
        switch (self, other) {
        case (.generic(let a), .generic(let b)): a.service.isSame(as: b.service)
        case (.internet(let a), .internet(let b)): a.port == b.port && a.server.isSame(as: b.server) && a.path.isSame(as: b.path)
        default: false
        }
    }
}

/// A test or binding callback kept under a lock. Not `Mutex<(() -> Void)?>` read with
/// `withLock { $0 }`: Swift 6.3 passes a bare closure through `withLock`'s generic `inout` by
/// wrapping it in a reabstraction thunk on the way in and another on the way back, and the
/// way back is stored, so each read nested the closure two thunks deeper. `willWait`, read at
/// every commit, made each create slower than the last (quadratic) and would at last have
/// overflowed the stack. Inside a struct the closure keeps its own representation.
private struct Hook: Sendable {
    let run: @Sendable () -> Void
    init(_ run: @escaping @Sendable () -> Void) { self.run = run }
}
