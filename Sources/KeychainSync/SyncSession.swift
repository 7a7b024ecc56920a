import Foundation
import KeychainBackup
import KeychainBatch
import KeychainCrypto
import KeychainFileSystem
import KeychainModel
import KeychainStore
import Logging
import Synchronization

/// What this device remembers of its sync folder, beside its store (`<store>.sync.json`,
/// mode 0600). No secret and no name: items go by their keyed ids, values by keyed digests.
package struct SyncLocalState: Codable, Sendable, Equatable {
    package var folder: String
    package var folderID: String
    package var device: DeviceID
    /// The sequence number of this device's last manifest, and its Lamport clock.
    package var seq: UInt64 = 0
    package var lamport: UInt64 = 0
    /// The SHA-256 of the manifest this device wrote at `seq`: another one there was written
    /// by another keychain with this identity (`SyncSession.writtenElsewhere`). Optional:
    /// state files written before it have none.
    package var ownDigest: String?
    /// Each other device's last merged manifest: its sequence number and SHA-256.
    package var seen: [String: UInt64] = [:]
    package var seenDigest: [String: String] = [:]
    /// Each device taken as gone (its directory missing, step 2a), with the last state merged
    /// from it: its directory served again from an older tree (git history) is refused, or
    /// what it had deleted would come back. A device joins with a new id, so one that left
    /// never writes again; one whose directory was only taken away writes on, at a later state.
    /// Optional: state files written before it have none.
    package var departed: [String: UInt64]?
    /// This device's published versions.
    package var own: [SyncEntry] = []
    /// Per item id, the version the store holds as of the last exchange, and the keyed digest
    /// of its value (nil for a tombstone): a different digest now is a local change.
    package var synced: [String: SyncedItem] = [:]
    /// The conflict versions already made into conflict copies (`item/lamport/device`), so a
    /// copy the user deleted is not made again.
    package var materialized: [String] = []
    /// The conflicts of the last exchange, as (item id, losing version).
    package var conflicts: [SyncEntry] = []
    /// What the last exchange refused, and when it ran (seconds since 1970).
    package var refusals: [String] = []
    package var lastExchange: Int64?
    /// Seconds after which a tombstone every device has merged is removed (90 days).
    package var tombstoneExpiry: Int64 = 90 * 86_400

    package struct SyncedItem: Codable, Sendable, Equatable {
        package var version: SyncVersion
        /// The version's vector: a local change follows it, and only it (the change was made
        /// on this value, not on what has arrived in the folder since).
        package var vector: VersionVector
        package var digest: String?
        /// The store row (id and version) the digest was last found equal for: while the row
        /// is the same, the item has not changed and is not decrypted again (an exchange at
        /// every commit would otherwise decrypt every synchronizable item).
        package var row: [Int64]?
        /// The version's `SyncEntry.writtenAs`, when it was published again; and when a
        /// tombstone was written. Optional: state files written before them have neither.
        package var writtenAs: SyncVersion?
        package var deletedAt: Int64?
        /// The version is to be published again as the version it is (`SyncEntry.writtenAs`),
        /// while the value held is still the one of `digest` (steps 2a and 2). Optional: state
        /// files written before it have none, and marked the digest instead (`migrated()`).
        package var republishAsIs: Bool?

        package init(version: SyncVersion, vector: VersionVector, digest: String?, row: [Int64]? = nil,
                     writtenAs: SyncVersion? = nil, deletedAt: Int64? = nil) {
            self.version = version; self.vector = vector; self.digest = digest; self.row = row
            self.writtenAs = writtenAs; self.deletedAt = deletedAt
        }

        /// Published with the value of `digest`, and not marked to be published again: nothing
        /// of it is left to publish while the value is that one.
        func isPublished(as digest: String) -> Bool { self.digest == digest && republishAsIs != true }

        /// Marked to be published at the next exchange: as it is, or (`SyncSession.republish`,
        /// from state files of earlier versions) as a new version.
        var isMarked: Bool { republishAsIs == true || digest == SyncSession.republish }

        /// The item as a state file of an earlier version wrote it: a version to publish again
        /// as it is was marked by `"republish <digest>"` in place of its digest.
        func migrated() -> SyncedItem {
            let prefix = SyncSession.republish + " "
            guard let d = digest, d.hasPrefix(prefix) else { return self }
            var item = self
            item.digest = String(d.dropFirst(prefix.count))
            item.republishAsIs = true
            return item
        }

        /// What is held of `entry`: its value's digest (nil for a tombstone), from `row`.
        package init(_ entry: SyncEntry, digest: String?, row: [Int64]? = nil) {
            self.init(version: entry.version, vector: entry.vector, digest: digest, row: row,
                      writtenAs: entry.writtenAs, deletedAt: entry.deletedAt)
        }

        /// The held version of `item` as an entry, to publish again (`nextEntry`).
        func entry(_ item: SyncItemID) -> SyncEntry {
            SyncEntry(item: item, version: version, vector: vector, isTombstone: digest == nil, deletedAt: deletedAt,
                      writtenSeq: 0, fileDigest: "", writtenAs: writtenAs)
        }
    }

    package init(folder: String, folderID: String, device: DeviceID) {
        self.folder = folder; self.folderID = folderID; self.device = device
    }

    /// Where the state of the store at `storePath` is kept: beside the store's real path, so
    /// that the daemon and a command that names the store through a symlink find one state.
    package static func path(forStore storePath: String) -> String {
        let absolute = KeychainLocations.absolute(storePath)
        guard let resolved = realpath(absolute, nil) else { return absolute + ".sync.json" }
        defer { free(resolved) }
        return String(cString: resolved) + ".sync.json"
    }

    package static func load(forStore storePath: String) throws -> SyncLocalState? {
        let path = path(forStore: storePath)
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        let digest = SHA256Digest.hash([UInt8](data))
        if let known = decoded.withLock({ $0[path] }), known.digest == digest { return known.state }
        do {
            var state = try JSONDecoder().decode(SyncLocalState.self, from: data)
            state.synced = state.synced.mapValues { $0.migrated() }
            decoded.withLock { $0[path] = (digest, state) }
            return state
        } catch {
            throw KeychainError.integrityFailure("\(path) is damaged: \(error)")
        }
    }

    /// The state last read or written at each path, by the SHA-256 of its bytes: a store with
    /// thousands of synced items has a state of megabytes, which the daemon reads several
    /// times per exchange; the same bytes are not decoded again (a hash is cheap, JSON is not).
    /// A leaf lock. No secret is in it (keyed ids and digests only).
    private static let decoded = Mutex<[String: (digest: [UInt8], state: SyncLocalState)]>([:])

    /// Sets how long a tombstone is kept (at least once every device has merged it), between
    /// exchanges (under their lock): `sync init|join --tombstone-days`.
    package static func setTombstoneExpiry(days: Int, forStore storePath: String) throws {
        guard (1...36_500).contains(days) else { throw KeychainError.invalidInput("--tombstone-days must be from 1 to 36500") }
        let lock = try ExchangeLock(path: path(forStore: storePath) + ".lock")
        defer { lock.release() }
        guard var state = try load(forStore: storePath) else { throw KeychainError.notMounted("this keychain does not sync") }
        state.tombstoneExpiry = Int64(days) * 86_400
        try state.save(forStore: storePath)
    }

    package func save(forStore storePath: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let bytes = [UInt8](try encoder.encode(self))
        let path = Self.path(forStore: storePath)
        try SyncFiles.write(bytes, to: path)
        Self.decoded.withLock { $0[path] = (SHA256Digest.hash(bytes), self) }
    }
}

/// What one exchange did.
package struct SyncReport: Sendable, Equatable {
    /// Local changes published, and other devices' versions applied here.
    package var published = 0
    package var applied = 0
    package var deleted = 0
    package var conflictCopies = 0
    /// Files or device directories refused (tampered, truncated, replayed, rolled back, too far ahead).
    package var refusals: [String] = []
    /// Items changed here while the merge ran: left for the next exchange.
    package var deferred = 0
    /// Of those, the names held here by an item that does not sync: the folder's item of that
    /// name waits (at every exchange) until that item is made synchronizable, renamed or deleted.
    package var heldByItemThatDoesNotSync: [ItemKey] = []
    /// This device's own directory was found older than this device wrote it (an engine
    /// served an old copy), and was written again. Apart from `refusals`: nothing in the
    /// folder was refused, and `sync git` expects it when its own merge put the directory back.
    package var ownDirectoryRewritten: String?
    /// A manifest named files not in the folder yet (an engine delivers a device's files in
    /// no set order): what needs them waits for an exchange after they land.
    package var waitingForFiles = false
}

/// One device's exchange with its sync folder: publish this store's changes of synchronizable
/// items, merge every other device's versions, and apply the result through the owner
/// (`ServedKeychain.applySync`, origin `.sync`), so the mount and every observer see it at once.
/// `keychainfs sync now` runs it without a daemon; the daemon runs it at commit and when the
/// folder changes. Exchanges of one store run one at a time (a lock file beside its state).
///
/// Lock order: the exchange lock (a flock on `<store>.sync.json.lock`, across processes) is
/// taken first and held for the whole exchange; the owner's own locks (`ServedKeychain`) are
/// taken under it, one call at a time, and never held while the folder is read or written.
/// Nothing the owner holds ever waits for the exchange lock.
package final class SyncSession: Sendable {
    package let owner: ServedKeychain
    package let storePath: String
    private let log = Logger(label: "keychainfs.sync")
    /// A version more than this far ahead of every other device's clock is refused, so that
    /// one device cannot win every merge from then on. A device that made more changes than
    /// this offline must rejoin.
    package static let aheadLimit: UInt64 = 1 << 20
    /// No honest clock gets near this (one tick per change); versions above it plus the limit are refused.
    static let clockCeiling: UInt64 = 1 << 62

    package init(owner: ServedKeychain, storePath: String) {
        self.owner = owner
        self.storePath = storePath
    }

    static let keyService = "keychainfs-sync"
    /// Item files written per flush in an exchange that publishes many (a first sync).
    static let writeBatch = 1024

    /// A synchronizable item held here, by its row: `item` once decrypted (a row whose version
    /// was seen before is not); `unreadable` when its name cannot be read now.
    struct LocalRow {
        var row: Int64
        var version: Int64
        var item: KeychainItem?
        var unreadable = false
    }
    /// A digest no value has, which state files of earlier versions hold: the item is
    /// published again at the next exchange, as a new version.
    static let republish = "republish"

    /// The sync key, from its item in the store (`keychainfs-sync/<folder id>`, this device only).
    package func syncKey(_ state: SyncLocalState) throws -> SecureBytes {
        var q = ItemQuery(kind: .generic, account: state.folderID, service: Self.keyService)
        q.accessGroup = ""
        guard let item = try owner.items(matching: q).first else {
            throw KeychainError.notMounted("the sync key of this device is gone from the keychain; run 'keychainfs sync leave' and 'keychainfs sync join DIR'")
        }
        return try owner.secret(of: item, caching: false)
    }

    /// Keeps the sync key in the store: sealed like every item, bound to this device, never synced.
    package func storeSyncKey(_ key: SecureBytes, folderID: String) throws {
        let k = ItemKey.generic(try GenericPasswordKey(service: Self.keyService, account: folderID))
        _ = try owner.save(k, secret: key, changes: AttributeChanges(AttributeValues {
            $0.label = "keychainfs sync key"; $0.synchronizable = false
        }, accessible: .afterFirstUnlockThisDeviceOnly), updateExisting: true)
    }

    /// The one exchange (see the type). Refusals are logged and reported, never applied; the
    /// rest of the folder still merges.
    @discardableResult
    package func exchange(now: Int64 = Int64(Date().timeIntervalSince1970)) throws -> SyncReport {
        // The lock first: a `leave` or another exchange that ran meanwhile is seen in the state.
        let lock = try ExchangeLock(path: SyncLocalState.path(forStore: storePath) + ".lock")
        defer { lock.release() }
        guard var state = try SyncLocalState.load(forStore: storePath) else {
            throw KeychainError.notMounted("this keychain does not sync (set it up with 'keychainfs sync init DIR' or 'sync join DIR')")
        }
        guard owner.lockState != .beforeFirstUnlock else {
            throw KeychainError.unavailable(className: AccessibilityClass.afterFirstUnlock.rawValue)
        }
        let keys = try SyncKeys(syncKey: try syncKey(state))
        let folder = SyncFolder(path: state.folder)
        /// Stops the exchange before anything is merged or written; `sync status` shows why.
        func stop(_ why: String) throws -> Never {
            log.error("sync: \(why)")
            state.refusals = [why]
            state.lastExchange = now
            try state.save(forStore: storePath)
            throw KeychainError.integrityFailure(why)
        }
        // 0. This device's own manifest, written by this device: by another keychain with its
        // identity, it stops here, before anything of that keychain's is merged or written over.
        let mine = try? folder.readManifest(state.device, folderID: state.folderID, keys: keys)
        if let (m, digest) = mine, let why = writtenElsewhere(m.seq, digest: digest, state: state, announced: lock.announced()) {
            try stop(why)
        }
        folder.removeTemporaries(state.device)
        var report = SyncReport()
        func refuse(_ why: String) {
            log.error("sync: refused: \(why)")
            report.refusals.append(why)
        }

        // 1. The other devices' manifests: authenticated, never older than what was merged.
        var manifests: [DeviceID: SyncManifest] = [:]
        // Devices whose manifest is older than, or another than, the one merged of them: this
        // device's next manifest says which it merged (step 6), so that a device put back
        // from a backup learns it and stops (below), though that one only said it had merged
        // this device's, which no manifest answers.
        var disputed: Set<DeviceID> = []
        // Of those, the ones rolled back, with the entries their older manifest still names,
        // by item (step 2a publishes again what it no longer has).
        var rolledBack: [DeviceID: [SyncItemID: SyncEntry]] = [:]
        // Each merged manifest's SHA-256: recorded with its seq (step 6), never apart, so that
        // one whose files were still in flight is not taken as merged.
        var digests: [DeviceID: String] = [:]
        for d in folder.devices() where d != state.device {
            do {
                guard let (m, digest) = try folder.readManifest(d, folderID: state.folderID, keys: keys) else { continue }
                if let gone = state.departed?[d.hex] {
                    // The same manifest put back (an engine took the directory away for a
                    // while), every item of which is still known here: nothing in it is older
                    // than what was merged. (An item not known any more was deleted and its
                    // tombstone expired, which a device taken as gone is not waited for.)
                    let same = m.seq == gone && state.seenDigest[d.hex] == digest
                        && m.entries.allSatisfy { state.synced[$0.item.hex] != nil }
                    guard m.seq > gone || same else {
                        refuse("device \(d.short): its directory came back at state \(m.seq) after it went at \(gone) (an old tree served again?); its files are ignored")
                        continue
                    }
                    state.departed?[d.hex] = nil
                }
                let last = state.seen[d.hex] ?? 0
                if m.seq < last {
                    refuse("device \(d.short): its directory was rolled back (state \(m.seq), already merged \(last)); its files are ignored")
                    disputed.insert(d)
                    rolledBack[d] = Dictionary(m.entries.map { ($0.item, $0) }, uniquingKeysWith: { a, _ in a })
                    continue
                }
                if m.seq == last, let known = state.seenDigest[d.hex], known != digest {
                    refuse("device \(d.short): its state \(m.seq) differs from the one merged before (replayed or forked); ignored")
                    disputed.insert(d)
                    continue
                }
                manifests[d] = m
                digests[d] = digest
            } catch {
                refuse(Self.text(error))
            }
        }
        // This device's state older than another device has merged from it, or another
        // manifest of it merged at its present state: put back from a backup (its own
        // directory with it, as a git work tree is), or a copy that wrote too. Its clock and
        // counts would give versions it has given before, and another device would take a new
        // value as one it has. Like a copy, it stops before it writes, and joins again.
        let ownDirectory = max(state.seq, mine?.0.seq ?? 0)
        if let merged = manifests.values.compactMap({ $0.seen[state.device.hex] }).max(), merged > ownDirectory {
            let why = "\(Self.stateRolledBackPrefix) (state \(ownDirectory); another device merged its state \(merged)): "
                + "it was put back from a backup. " + rejoinAdvice(state)
            try stop(why)
        }
        if let (m, digest) = mine, manifests.values.contains(where: { other in
            other.seen[state.device.hex] == m.seq && other.seenDigests?[state.device.hex].map { $0 != digest } == true
        }) {
            let why = "\(Self.stateRolledBackPrefix) (another device merged a different state \(m.seq) of it): it was put "
                + "back from a backup, or a copy of it writes too. " + rejoinAdvice(state)
            try stop(why)
        }
        // Versions implausibly far ahead of every other device are refused.
        var others = SyncState()
        for (d, m) in manifests {
            let elsewhere = manifests.filter { $0.key != d }.flatMap { $0.value.entries.map(\.version.lamport) }
            // Capped, so that a clock near the top of its range (refused itself) cannot make
            // this sum overflow, and no clock accepted here can run to the top either.
            let bound = min(max(state.lamport, elsewhere.max() ?? 0), Self.clockCeiling) + Self.aheadLimit
            for e in m.entries {
                // A version published again ranks where its writer put it: that place too.
                let far = max(e.version.lamport, e.writtenAs?.lamport ?? 0)
                if far > bound {
                    refuse("device \(d.short): a version (\(far)) runs implausibly far ahead of the others (at most \(bound)); refused")
                    continue
                }
                others.insert(e)
            }
        }

        // 2a. A device that left (`sync leave`: its directory gone after this one merged it)
        // took its files with it, and no one else publishes what it wrote: the items whose
        // version here is its are published again, so that a device that joins later still
        // gets them. As the versions they are (`SyncEntry.writtenAs`: their vectors, their
        // place in the order): a later version of the departed device (its directory back, as
        // it wrote on) follows them, so a delete it made meanwhile deletes them, and none is a
        // conflict with it. By every device that holds one the folder has nothing of (one
        // that had not merged it does not have it to publish); two that publish one together
        // make the same version twice, which is no conflict either. A delete expired is not.
        // The smallest id still in the folder takes the departed device as gone.
        // A directory refused as rolled back (step 1: put back from a backup, an old tree
        // served again) lost the versions it wrote since as surely, and a device that merged
        // them publishes them again the same way, or the devices that had not would never get
        // them: those its older manifest does not name, and not over a version of this
        // device's own that lost to one (a conflict: a device publishes one version of an
        // item, and the directory may come back). Not a forked one's: the version of it merged
        // here may share its vector with the other's, which would then be taken as one.
        let listed = Set(folder.devices())
        let departed = Set(state.seen.keys.compactMap { try? DeviceID(hex: $0) }).subtracting(listed)
        let ownVersions = rolledBack.isEmpty ? [:] : Dictionary(state.own.map { ($0.item, $0.vector) }, uniquingKeysWith: { a, _ in a })
        var departedDeletes: [SyncEntry] = []
        for (hex, s) in state.synced where departed.contains(s.version.device) || rolledBack[s.version.device] != nil {
            guard let id = try? SyncItemID(hex: hex),
                  !others.versions(of: id).contains(where: { s.vector.isCovered(by: $0.vector) }) else { continue }
            let oldTree = rolledBack[s.version.device]
            if let tree = oldTree {
                if tree[id]?.vector == s.vector { continue }
                if let mine = ownVersions[id], !mine.isCovered(by: s.vector) { continue }
            }
            if s.digest != nil {
                guard !s.isMarked else { continue }
                state.synced[hex]?.republishAsIs = true
            } else if now - (s.deletedAt ?? now) < state.tombstoneExpiry || oldTree?[id]?.isTombstone == false {
                // An expired delete too, while an old tree that still holds the value is there
                // (a device that joins would take it up); it expires once that tree is gone (step 5).
                departedDeletes.append(s.entry(id))
            }
        }
        if !departed.isEmpty && listed.allSatisfy({ $0 >= state.device }) {
            for d in departed {
                let seen = state.seen[d.hex]
                state.departed = state.departed ?? [:]
                state.departed?[d.hex] = seen
                // Its digest stays: the same manifest put back is taken again (step 1).
                state.seen[d.hex] = nil
            }
        }

        // 2. Own directory: a file of ours missing or altered (a rolled-back directory) is published again.
        if let (mine, _) = mine {
            if mine.seq < state.seq {
                let why = "this device's own directory was rolled back (state \(mine.seq), written \(state.seq)); it is written again"
                log.error("sync: \(why)")
                report.ownDirectoryRewritten = why
            }
            // An exchange killed after its manifest, before this state: its seq and Lamport
            // times are not used again, so no file name (item, Lamport) gets other bytes; and
            // what it published is this device's own (its changes are found again in step 3 by
            // their values, not published anew: as new writes they would be concurrent with
            // what another device has written after them since).
            if mine.seq > state.seq { state.own = mine.entries }
            state.seq = max(state.seq, mine.seq)
            state.lamport = max(state.lamport, min(mine.entries.map(\.version.lamport).max() ?? 0, Self.clockCeiling))
        }
        // Each is published again as the version it was (as in 2a): a delete or an edit another
        // device made since follows it. A value goes again while it is the one held here (else
        // another device's version was merged over it, and it goes). The bytes are checked
        // against what was written (their SHA-256), not decrypted.
        var republishDeletes = departedDeletes
        state.own = state.own.filter { e in
            guard !folder.itemMatches(e) else { return true }
            if e.isTombstone {
                republishDeletes.append(e)
            } else if let held = state.synced[e.item.hex], held.version == e.version, held.digest != nil, !held.isMarked {
                state.synced[e.item.hex]?.republishAsIs = true
            }
            return false
        }

        // 3. What changed here since the last exchange: the rows whose version differs from
        // the one last seen. Nothing is decrypted for a row seen before at its version, so an
        // exchange costs what changed, not the store.
        var seenRow: [Int64: (hex: String, version: Int64)] = [:]
        for (hex, s) in state.synced {
            guard let r = s.row, r.count == 2, s.digest != nil else { continue }
            if let other = seenRow[r[0]], other.version > r[1] { continue }
            seenRow[r[0]] = (hex, r[1])
        }
        var local: [SyncItemID: LocalRow] = [:]
        var changed: [KeychainItem] = []
        let rows = try owner.rowVersions().sorted { $0.id < $1.id }
        let remembered = owner.notSynchronizableRows.withLock { $0 }
        var newlyNotSynchronizable: [Int64: Int64] = [:]
        for (rowID, version) in rows {
            if let seen = seenRow[rowID], seen.version == version, let held = state.synced[seen.hex], !held.isMarked,
               let id = try? SyncItemID(hex: seen.hex) {
                local[id] = LocalRow(row: rowID, version: version, item: nil)
                continue
            }
            if remembered[rowID] == version { continue }
            guard let item = try owner.item(id: rowID) else {
                // Its name cannot be read now (its class is locked) or its row is damaged: an
                // item that synced stays as it was known, and is looked at again next time.
                if let seen = seenRow[rowID], let id = try? SyncItemID(hex: seen.hex) {
                    local[id] = LocalRow(row: rowID, version: seen.version, item: nil, unreadable: true)
                }
                continue
            }
            guard item.record.attributes.values.synchronizable == true && !item.accessible.isThisDeviceOnly else {
                newlyNotSynchronizable[rowID] = version
                continue
            }
            local[keys.itemID(item.key)] = LocalRow(row: rowID, version: version, item: item)
            changed.append(item)
        }
        let present = Set(rows.map(\.id))
        owner.notSynchronizableRows.withLock { memory in
            memory.merge(newlyNotSynchronizable) { _, new in new }
            if memory.count > present.count { memory = memory.filter { present.contains($0.key) } }
        }

        var own: [SyncItemID: SyncEntry] = [:]
        for e in state.own { own[e.item] = e }
        var ownState = SyncState()
        for e in state.own { ownState.insert(e) }
        // Every version published now comes after every version in the folder.
        let top = others.entries.values.flatMap(\.values).map(\.version.lamport).max() ?? 0
        /// A new version of this device's, after every one known here (its own count from the
        /// Lamport clock: `VersionVector.next`); or, given `again`, a version already written,
        /// published again: its vector, its place in the order and a delete's date.
        func nextEntry(_ id: SyncItemID, tombstone: Bool, again: SyncEntry? = nil) -> SyncEntry {
            // A change made after a conflict was merged here follows the versions that lost
            // too (their copies are beside the item): it resolves the conflict. Else a delete
            // would leave a losing version standing, to win again once the tombstone expired.
            let known = [state.synced[id.hex]?.vector, own[id]?.vector].compactMap { $0 }
                + state.conflicts.filter { $0.item == id }.map(\.vector)
            state.lamport = max(state.lamport, top) + 1
            return SyncEntry(item: id, version: SyncVersion(lamport: state.lamport, device: state.device),
                             vector: again?.vector ?? VersionVector.next(after: known, by: state.device, atLeast: state.lamport),
                             isTombstone: tombstone, deletedAt: tombstone ? again?.deletedAt ?? now : nil,
                             writtenSeq: state.seq + 1, fileDigest: "", writtenAs: again?.order)
        }
        // Files are sealed as they are published and written in batches (one flush each).
        var unwritten: [(entry: SyncEntry, bytes: [UInt8])] = []
        func flush() throws {
            try folder.writeItems(unwritten, device: state.device)
            unwritten.removeAll(keepingCapacity: true)
        }
        func publish(_ entry: SyncEntry, payload: SecureBytes) throws {
            var e = entry
            let (bytes, digest) = try SyncFolder.seal(e, payload: payload, keys: keys)
            e.fileDigest = digest
            unwritten.append((e, bytes))
            if unwritten.count >= Self.writeBatch { try flush() }
            own[e.item] = e
            ownState.insert(e)
            report.published += 1
        }
        for item in changed {
            let id = keys.itemID(item.key)
            let row = [item.id, item.sealed.version]
            let payload: SecureBytes
            do { payload = try Self.payload(of: item, owner: owner) } catch KeychainError.unavailable {
                continue  // its class is locked: published once it can be read
            }
            let digest = keys.digest(of: payload)
            let held = state.synced[id.hex]
            if held?.isPublished(as: digest) == true {
                state.synced[id.hex]?.row = row
                continue
            }
            // Another device's version merged here by an exchange killed before it saved this
            // state: the value is that version's, not a change of this device's (published, it
            // would be concurrent with its own source and make a conflict copy of one value).
            // Or this device's own, published by such an exchange (step 2).
            if let arrived = (others.versions(of: id) + [own[id]].compactMap { $0 }).first(where: { w in
                !w.isTombstone && w.version != state.synced[id.hex]?.version
                    && (try? folder.readItem(w, keys: keys)).map { keys.digest(of: $0) == digest } == true
            }) {
                state.synced[id.hex] = .init(arrived, digest: digest, row: row)
                continue
            }
            // Unchanged here since it was marked: that version again; changed: a new one.
            let again = held.flatMap { $0.republishAsIs == true && $0.digest == digest ? $0.entry(id) : nil }
            let e = nextEntry(id, tombstone: false, again: again)
            try publish(e, payload: payload)
            state.synced[id.hex] = .init(e, digest: digest, row: row)
        }
        for d in republishDeletes where local[d.item] == nil {
            let e = nextEntry(d.item, tombstone: true, again: d)
            try publish(e, payload: SecureBytes())
            state.synced[d.item.hex] = .init(e, digest: nil)
        }
        // An item that synced and is held here no more (deleted, renamed, or made not to sync).
        for (hex, synced) in state.synced where synced.digest != nil {
            guard let id = try? SyncItemID(hex: hex), local[id] == nil else { continue }
            // Its delete published by an exchange killed before it saved this state (step 2).
            if let o = own[id], o.isTombstone, synced.vector.isDominated(by: o.vector) {
                state.synced[hex] = .init(o, digest: nil)
                continue
            }
            let e = nextEntry(id, tombstone: true)
            try publish(e, payload: SecureBytes())
            state.synced[hex] = .init(e, digest: nil)
        }
        try flush()
        state.own = own.values.sorted { $0.item < $1.item }

        /// The local item of a synchronizable id, read when the merge needs it (a row seen
        /// before was not decrypted); nil when it cannot be read now.
        func localItem(_ id: SyncItemID) -> KeychainItem? {
            guard let l = local[id] else { return nil }
            if let item = l.item { return item }
            guard !l.unreadable, let item = try? owner.item(id: l.row), item.sealed.version == l.version else { return nil }
            local[id]?.item = item
            return item
        }
        /// Publishes again, as the version it is, what is held here of `id` (`held`): its
        /// value, if that is still the one held, or its delete.
        func republishHeld(_ id: SyncItemID, _ held: SyncLocalState.SyncedItem) throws {
            guard let digest = held.digest else {
                let e = nextEntry(id, tombstone: true, again: held.entry(id))
                try publish(e, payload: SecureBytes())
                state.synced[id.hex] = .init(e, digest: nil)
                return
            }
            guard let item = localItem(id), let payload = try? Self.payload(of: item, owner: owner),
                  keys.digest(of: payload) == digest else {
                report.deferred += 1  // not readable now, or changed here: the next exchange sees to it
                return
            }
            let e = nextEntry(id, tombstone: false, again: held.entry(id))
            try publish(e, payload: payload)
            state.synced[id.hex] = .init(e, digest: digest, row: [item.id, item.sealed.version])
        }
        // 4. The merge, applied through the owner in one change.
        let full = others.merged(ownState)
        var puts = ItemBatch()
        var deletes: [ItemKey] = []
        var appliedIDs: [(SyncItemID, SyncedItem: SyncLocalState.SyncedItem, key: ItemKey)] = []
        // The row version each changed item had when read: one changed since is left alone.
        var expected: [ItemKey: Int64?] = [:]
        // Devices whose manifest names a file already gone: they are writing a newer one (in
        // flight). What needs such a file waits for the next exchange; nothing is refused.
        var inFlight: Set<DeviceID> = []
        state.conflicts = []
        for id in full.items.sorted() {
            guard let r = full.resolve(id) else { continue }
            state.conflicts += r.conflicts
            let w = r.winner
            if w.version.device != state.device && state.synced[id.hex]?.version != w.version {
                if let held = state.synced[id.hex], held.digest != Self.republish, w.vector.isCovered(by: held.vector) {
                    // What is held here is this version, published again by another device (the
                    // same vector), or follows every version the folder still has: its writer's
                    // directory went before every device had merged it (2a). A delete held here
                    // would otherwise come back with the value another device published again.
                    if w.vector == held.vector {
                        state.synced[id.hex]?.version = w.version
                        state.synced[id.hex]?.writtenAs = w.writtenAs
                    } else {
                        try republishHeld(id, held)
                    }
                } else if local[id] != nil && localItem(id) == nil {
                    report.deferred += 1  // held here, but not readable now: merged once it is
                } else if w.isTombstone {
                    if let item = localItem(id) {
                        deletes.append(item.key)
                        expected[item.key] = .some(item.sealed.version)
                        appliedIDs.append((id, .init(w, digest: nil), item.key))
                    } else {
                        state.synced[id.hex] = .init(w, digest: nil)
                    }
                } else {
                    do {
                        guard let (record, batch, entry) = try open(w, keys: keys, folder: folder) else {
                            inFlight.insert(w.version.device)
                            report.deferred += 1
                            continue
                        }
                        var r = record
                        // The access list pins programs of this machine; it stays as it is here.
                        let here = localItem(id)
                        r.attributes.values.access = here?.record.attributes.values.access
                        try batch.withSecretAndExtras(entry) { s, x in puts.append(r, secret: s, extras: x) }
                        expected[r.key] = .some(here?.sealed.version)
                        appliedIDs.append((id, .init(w, digest: keys.digest(of: batch.secrets)), r.key))
                    } catch {
                        refuse(Self.text(error))
                    }
                }
            }
            for c in r.conflicts {
                // By where its writer put it: the same version published again is not copied again.
                let mark = "\(id.hex)/\(c.order.lamport)/\(c.order.device.hex)"
                guard !state.materialized.contains(mark) else { continue }
                do {
                    guard let (record, batch, entry) = try open(c, keys: keys, folder: folder) else {
                        inFlight.insert(c.version.device)
                        continue
                    }
                    var copy = record
                    copy.key = try Self.conflictKey(record.key, of: c.order)
                    copy.attributes.values.synchronizable = false
                    copy.attributes.values.access = nil
                    try batch.withSecretAndExtras(entry) { s, x in puts.append(copy, secret: s, extras: x) }
                    state.materialized.append(mark)
                    report.conflictCopies += 1
                    log.notice("sync: a concurrent change kept as a conflict copy (item \(id.hex.prefix(12))…, device \(c.order.device.short))")
                } catch {
                    refuse(Self.text(error))
                }
            }
        }
        try flush()
        state.own = own.values.sorted { $0.item < $1.item }
        if !puts.isEmpty || !deletes.isEmpty {
            let skipped = try owner.applySync(puts: puts, deletes: deletes, expected: expected)
            report.heldByItemThatDoesNotSync = skipped.heldByItemThatDoesNotSync
            for (id, synced, key) in appliedIDs {
                if skipped.all.contains(key) { report.deferred += 1; continue }
                state.synced[id.hex] = synced
                if synced.digest == nil { report.deleted += 1 } else { report.applied += 1 }
            }
        }

        // 5. Own versions written over by a later one go; tombstones every device has merged expire.
        // Every device with a directory, refused ones too: one refused now has not been seen
        // to merge the tombstone (only a device that left, its directory gone, is not waited for).
        // A version published again goes once its writer's directory names it again (it was
        // rolled back for a while, or came back), and what is held here is then the writer's
        // version again: should that directory go again, step 2a publishes it again.
        let devicesNow = Set(folder.devices()).union(manifests.keys).subtracting([state.device])
        state.own = state.own.filter { e in
            let dominated = others.versions(of: e.item).contains { e.vector.isDominated(by: $0.vector) }
            // (Its writer may name it as published again itself: its own directory had lost it.)
            let named = e.writtenAs.flatMap { w in
                others.entries[w.device]?[e.item].flatMap { $0.vector == e.vector && $0.order == w ? $0 : nil }
            }
            if let n = named, state.synced[e.item.hex]?.vector == n.vector {
                state.synced[e.item.hex]?.version = n.version
                state.synced[e.item.hex]?.writtenAs = n.writtenAs
            }
            let namedByItsWriter = named != nil
            let expired = e.isTombstone && now - (e.deletedAt ?? now) >= state.tombstoneExpiry
                && devicesNow.allSatisfy { (manifests[$0]?.seen[state.device.hex] ?? 0) >= e.writtenSeq }
            if dominated || namedByItsWriter || expired {
                if expired { state.synced[e.item.hex] = nil }
                return false
            }
            return true
        }

        // 6. The manifest, after every file it names; then what this device remembers.
        // A device in flight is not marked as merged at this seq: its tombstones are not
        // taken as seen here before the files of its manifest were.
        for (d, m) in manifests where !inFlight.contains(d) {
            state.seen[d.hex] = m.seq
            state.seenDigest[d.hex] = digests[d]
        }
        report.waitingForFiles = !inFlight.isEmpty
        let merged = manifests.keys.filter { !inFlight.contains($0) }
        let told = merged + disputed
        let entries = state.own.sorted { $0.item < $1.item }
        // A manifest is written when this device's versions changed, or to say it merged a
        // version another device wrote after the state it last said it merged of that device
        // (tombstones expire on it). Not for a manifest that only said it merged one of this
        // device's: two daemons would answer each other's manifests forever.
        let owesMerge = merged.contains { d in
            (manifests[d]?.entries.map(\.writtenSeq).max() ?? 0) > (mine?.0.seen[d.hex] ?? 0)
        } || disputed.contains { d in
            mine?.0.seen[d.hex] != state.seen[d.hex] || mine?.0.seenDigests?[d.hex] != state.seenDigest[d.hex]
        }
        if let (m, digest) = mine, m.seq == state.seq, m.entries == entries, !owesMerge {
            // This device's, checked at step 0: at the state saved, or one an exchange killed
            // before its state was saved had announced (step 2 took up its seq).
            state.ownDigest = digest
        } else {
            state.seq += 1
            let manifest = SyncManifest(device: state.device, folder: state.folderID, seq: state.seq, written: now,
                                        seen: state.seen,
                                        seenDigests: Dictionary(uniqueKeysWithValues: told.compactMap { d in state.seenDigest[d.hex].map { (d.hex, $0) } }),
                                        entries: entries)
            state.ownDigest = try folder.writeManifest(manifest, keys: keys, announce: lock.announce)
            // Then the files it no longer names (older versions, expired tombstones) go.
            folder.removeUnnamedItems(manifest)
        }
        state.refusals = report.refusals + [report.ownDirectoryRewritten].compactMap { $0 }
        state.lastExchange = now
        try state.save(forStore: storePath)
        if let own = state.ownDigest { lock.settle(own) }
        return report
    }

    /// Why this device's own manifest, at state `seq` with SHA-256 `digest`, was not written
    /// by this keychain; nil if it was (or if that cannot be told). A copy of the store made
    /// with its sync state and device key is a second device with this one's identity: each
    /// would write over the other's directory, and what one wrote might never reach the others.
    /// The manifest at the state this device last wrote is the one it wrote (`ownDigest`); a
    /// later one is of exchanges of its own that stopped after the manifest and before the
    /// state was saved (killed, a full disk) only if it is one this device announced before
    /// writing it (`ExchangeLock.announce`). An older state is a rollback (step 2). A state
    /// file written before these records (no `ownDigest`) tells nothing; with one, a lock file
    /// that announces nothing was not this device's (a copy made without it).
    func writtenElsewhere(_ seq: UInt64, digest: String, state: SyncLocalState, announced: Set<String>) -> String? {
        let foreign = seq == state.seq ? state.ownDigest.map { $0 != digest } ?? false
            : seq > state.seq && state.ownDigest != nil && !announced.contains(digest)
        guard foreign else { return nil }
        // A later state may also be this keychain's own, written before its files were put
        // back from a backup: to the folder that is a copy too.
        let putBack = seq > state.seq ? ", or this store put back from a backup taken before that state" : ""
        return "\(Self.writtenElsewherePrefix) (state \(seq); this device wrote \(state.seq)): another keychain "
            + "syncs with this device's identity: a copy of this store made with \(SyncLocalState.path(forStore: storePath)) "
            + "and the device key (a cloned machine or home directory\(putBack)). " + rejoinAdvice(state)
    }

    /// What a device stopped as a copy, or as put back from a backup, does.
    func rejoinAdvice(_ state: SyncLocalState) -> String {
        let statePath = SyncLocalState.path(forStore: storePath)
        return "This keychain merges and writes nothing until it has an identity of its own: unmount it, remove "
            + "\(statePath), and run 'keychainfs sync join \(state.folder)' (not 'sync leave', which would remove "
            + "the directory the two share)"
    }

    /// How the refusal of a twin begins (`writtenElsewhere`).
    package static let writtenElsewherePrefix = "this device's own directory holds a state it did not write"
    /// How the refusal of a state put back from a backup begins.
    package static let stateRolledBackPrefix = "this device's sync state is not the one the folder has merged from it"

    /// The record and secret in a version's file, checked to be the item its name says and
    /// allowed to travel.
    /// Nil when the entry's file is gone (its writer is in flight; see `SyncFolder.readItem`).
    private func open(_ e: SyncEntry, keys: SyncKeys, folder: SyncFolder) throws -> (ItemRecord, ItemBatch, ItemBatch.Entry)? {
        guard let plain = try folder.readItem(e, keys: keys) else { return nil }
        let batch: ItemBatch
        do { batch = try BackupPayload.decode(plain) } catch {
            throw KeychainError.integrityFailure("device \(e.version.device.short): item file \(e.item.hex.prefix(12))… is malformed")
        }
        guard batch.count == 1, let entry = batch.entries.first, keys.itemID(entry.record.key) == e.item else {
            throw KeychainError.integrityFailure("device \(e.version.device.short): item file \(e.item.hex.prefix(12))… holds another item than its name says")
        }
        let a = entry.record.attributes
        guard a.values.synchronizable == true, !a.accessible.isThisDeviceOnly else {
            throw KeychainError.integrityFailure("device \(e.version.device.short): item file \(e.item.hex.prefix(12))… holds an item that may not travel")
        }
        return (entry.record, batch, entry)
    }

    /// An item's value as a folder file holds it: `BackupPayload`'s layout, in locked memory,
    /// without its access list (which pins programs of this machine).
    static func payload(of item: KeychainItem, owner: ServedKeychain) throws -> SecureBytes {
        var record = item.record
        record.attributes.values.access = nil
        let secret = try owner.secret(of: item, caching: false)
        let extras = try owner.extras(of: item)
        var payload = BackupPayload()
        payload.append(record, secret: secret, extras: extras)
        return payload.buffer
    }

    /// `<account>.conflict-<device>-<lamport>`: beside the item, in the same directory of the
    /// tree, named by the place its writer gave the version (`SyncEntry.order`), so that each
    /// conflict version has a copy of its own (a device's later conflict keeps its earlier
    /// copy) and every device names a version's copy alike. The suffix alone tells copies
    /// apart (a device gives no two versions one Lamport time), so an account too long to
    /// take it is cut short until the name fits.
    package static func conflictKey(_ key: ItemKey, of version: SyncVersion) throws -> ItemKey {
        let suffix = conflictSuffix(of: version)
        func named(_ account: String) throws -> ItemKey {
            switch key {
            case .generic(let g):
                return .generic(try GenericPasswordKey(service: g.service, account: account, accessGroup: g.accessGroup))
            case .internet(let i):
                return .internet(try InternetPasswordKey(server: i.server, port: i.port, path: i.path, protocol: i.protocol,
                                                         authenticationType: i.authenticationType, securityDomain: i.securityDomain,
                                                         account: account, accessGroup: i.accessGroup))
            }
        }
        var account = key.account
        while true {
            do { return try named(account + suffix) } catch {
                guard !account.isEmpty else { throw error }
                account.removeLast()
            }
        }
    }

    /// How the name of a conflict version's copy ends (`conflictKey`).
    package static func conflictSuffix(of version: SyncVersion) -> String {
        ".conflict-\(version.device.short)-\(version.lamport)"
    }

    static func text(_ error: Error) -> String { (error as? KeychainError)?.description ?? "\(error)" }
}

/// One exchange of a store at a time, across processes (the daemon, `sync now`). The lock
/// file also holds the SHA-256 of each manifest an exchange began to write since the state was
/// last saved (`announce`), one per line.
package final class ExchangeLock: Sendable {
    private let fd: Int32

    package init(path: String) throws {
        fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw KeychainError.io("cannot open \(path): \(String(cString: strerror(errno)))") }
        while flock(fd, LOCK_EX) != 0 {
            if errno == EINTR { continue }
            close(fd)
            throw KeychainError.io("cannot lock \(path): \(String(cString: strerror(errno)))")
        }
    }

    package func release() { close(fd) }

    /// Adds, durably, the SHA-256 of the manifest about to be written: exchanges that stop after
    /// their manifest and before their state is saved leave a manifest ahead of the state,
    /// which the next exchange knows as its own by this (`SyncSession.writtenElsewhere`).
    package func announce(_ digest: String) throws {
        guard write((lines().filter { $0 != digest } + [digest]).suffix(Self.kept), synced: true) else {
            throw errno == ENOSPC ? KeychainError.diskFull : KeychainError.io("cannot write the sync lock file: \(String(cString: strerror(errno)))")
        }
    }

    /// After the state is saved with `digest`: the others announced are of no use any more. Not
    /// synced: lost in a crash, the file still holds them, which is as good.
    package func settle(_ digest: String) { _ = write([digest], synced: false) }

    /// The digests announced; none in a lock file of an older version, or one not this device's.
    package func announced() -> Set<String> { Set(lines()) }

    /// The file's digests, oldest first.
    private func lines() -> [String] {
        var buffer = [UInt8](repeating: 0, count: Self.kept * 65 + 65)
        let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard n > 0 else { return [] }
        return buffer[0..<n].split(separator: UInt8(ascii: "\n")).filter { $0.count == 64 }.map { String(decoding: $0, as: UTF8.self) }
    }

    /// Announcements kept: one per exchange that stopped in a row, which a full disk can make many.
    private static let kept = 64

    private func write<S: Sequence<String>>(_ digests: S, synced: Bool) -> Bool {
        let bytes = Array(digests.map { $0 + "\n" }.joined().utf8)
        let written = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        if written >= 0 && written < bytes.count { errno = ENOSPC }
        return written == bytes.count && ftruncate(fd, off_t(bytes.count)) == 0 && (!synced || fdatasync(fd) == 0)
    }
}

extension SyncSession {
    /// `keychainfs sync init DIR`: a new folder with a new sync key sealed under `passphrase`,
    /// this store its first device. Refused if the store syncs already. `device` is random but
    /// in tests that need the order of devices fixed.
    package func initialize(folder path: String, passphrase: SecureBytes, scrypt: ScryptParameters = .default,
                            device: DeviceID = .random()) throws -> SyncLocalState {
        try refuseIfSyncing()
        let folder = SyncFolder(path: path)
        let (key, folderID) = try folder.create(passphrase: passphrase, scrypt: scrypt)
        return try start(folder, key: key, folderID: folderID, device: device)
    }

    /// `keychainfs sync join DIR`: the sync key from the folder's envelope, with its passphrase.
    package func join(folder path: String, passphrase: SecureBytes, device: DeviceID = .random()) throws -> SyncLocalState {
        try refuseIfSyncing()
        let folder = SyncFolder(path: path)
        let (key, folderID) = try folder.openEnvelope(passphrase: passphrase)
        return try start(folder, key: key, folderID: folderID, device: device)
    }

    private func refuseIfSyncing() throws {
        if let s = try SyncLocalState.load(forStore: storePath) {
            throw KeychainError.invalidInput("this keychain syncs with \(s.folder) already; stop with 'keychainfs sync leave' first")
        }
    }

    private func start(_ folder: SyncFolder, key: SecureBytes, folderID: String, device: DeviceID) throws -> SyncLocalState {
        try storeSyncKey(key, folderID: folderID)
        let state = SyncLocalState(folder: folder.path, folderID: folderID, device: device)
        try state.save(forStore: storePath)
        try exchange()
        return try SyncLocalState.load(forStore: storePath) ?? state
    }

    /// `keychainfs sync leave`: this device stops syncing. Its directory leaves the folder and
    /// its sync key the keychain; its items stay as they are.
    package func leave() throws -> SyncLocalState {
        // Not during an exchange, which would write the state again.
        let lock = try ExchangeLock(path: SyncLocalState.path(forStore: storePath) + ".lock")
        defer { lock.release() }
        guard let state = try SyncLocalState.load(forStore: storePath) else {
            throw KeychainError.notMounted("this keychain does not sync")
        }
        let folder = SyncFolder(path: state.folder)
        try? FileManager.default.removeItem(atPath: folder.devicePath(state.device))
        var q = ItemQuery(kind: .generic, account: state.folderID, service: Self.keyService)
        q.accessGroup = ""
        _ = try? owner.delete(matching: q, all: true)
        unlink(SyncLocalState.path(forStore: storePath))
        return state
    }
}

extension SyncSession {
    /// How many synchronizable items changed (or went) here since the last exchange, and the
    /// names of the items the folder knows (by id), for `sync status`. Writes nothing.
    package func pendingChanges() throws -> (Int, [SyncItemID: ItemKey]) {
        guard let state = try SyncLocalState.load(forStore: storePath) else { return (0, [:]) }
        let keys = try SyncKeys(syncKey: try syncKey(state))
        var pending = 0
        var names: [SyncItemID: ItemKey] = [:]
        var present: Set<String> = []
        for item in try owner.allItems() {
            let id = keys.itemID(item.key)
            names[id] = item.key
            guard item.record.attributes.values.synchronizable == true, !item.accessible.isThisDeviceOnly else { continue }
            present.insert(id.hex)
            guard let payload = try? Self.payload(of: item, owner: owner) else { continue }
            if state.synced[id.hex]?.isPublished(as: keys.digest(of: payload)) != true { pending += 1 }
        }
        pending += state.synced.filter { $0.value.digest != nil && !present.contains($0.key) }.count
        return (pending, names)
    }

    /// The copy of conflict version `c` among the items here (`names`, from `pendingChanges`),
    /// if it was not deleted since: the item named by the version (`conflictSuffix`), found
    /// without the item's own name (gone when a delete won), or the one an earlier version
    /// made, `<account>.conflict-<device>`.
    package static func conflictCopy(of c: SyncEntry, among names: [SyncItemID: ItemKey]) -> ItemKey? {
        // By bytes: a suffix can begin inside the account's last Character (U+0600 joins the '.').
        let suffix = Array(conflictSuffix(of: c.order).utf8)
        if let key = names.values.first(where: { $0.account.utf8.reversed().starts(with: suffix.reversed()) }) { return key }
        guard let item = names[c.item] else { return nil }
        let earlier = Array((ServedKeychain.treePath(item) + ".conflict-\(c.order.device.short)").utf8)
        return names.values.first { ServedKeychain.treePath($0).utf8.elementsEqual(earlier) }
    }
}
