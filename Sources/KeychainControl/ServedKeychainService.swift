import Foundation
import KeychainControlProtocol
import KeychainCrypto
import KeychainAccess
import KeychainFileSystem
import KeychainModel
import KeychainStore
import KeychainSync

/// The keychain service, written once, over the keychain's owner (`ServedKeychain`): what the
/// daemon's control socket dispatches to, over the mount's owner, and the CLI's route when no
/// daemon serves the store, over an owner of its own that holds the store's lease. So a
/// command does the same to the store mounted or not: the same owner operations, the same
/// class rule for a new item (`ServedKeychain.newItemClass`).
package final class ServedKeychainService: KeychainService {
    let owner: ServedKeychain
    private let mount: ServedMount?
    /// Who asks (per-program access): a control-socket peer identified at accept, or with no
    /// daemon this process itself, a program like any other.
    let caller: AccessCaller

    /// `mount` nil means no mount: lock, unmount and lock-after then throw `notMounted`.
    /// `caller` nil: this process.
    package init(owner: ServedKeychain, mount: ServedMount? = nil, caller: AccessCaller? = nil) {
        self.owner = owner
        self.mount = mount
        self.caller = caller ?? Self.ownProcess()
    }

    /// This process, identified before it hardened (`ThisProcess`).
    private static func ownProcess() -> AccessCaller { ThisProcess.caller }

    /// The same service, answering for `caller`.
    package func serving(_ caller: AccessCaller) -> ServedKeychainService {
        ServedKeychainService(owner: owner, mount: mount, caller: caller)
    }

    /// The gate, for an item this request would read, change or delete.
    private func authorize(_ item: KeychainItem, _ operation: AccessOperation) throws {
        try owner.authorize(caller, item, operation)
    }

    /// An update replaces the item of the same key: decided for that item first.
    private func authorizeOverwrite(_ key: ItemKey) throws {
        guard let existing = try owner.items(matching: .exactly(key)).first else { return }
        try authorize(existing, .write)
    }

    /// Whether the class's key is held now (a backup refuses to skip what it cannot read).
    package func isAvailable(_ c: AccessibilityClass) -> Bool { owner.isAvailable(c) }

    package func save(key: ItemKey, secret: SecureBytes, extras: SecureBytes?, changes: AttributeChanges,
                     updateExisting: Bool) throws -> ItemRecord {
        if updateExisting { try authorizeOverwrite(key) }
        return try owner.save(key, secret: secret, extras: extras, changes: changes, updateExisting: updateExisting).record
    }

    package func find(query: ItemQuery, withSecrets: Bool, limit: Int?) throws -> [FoundItem] {
        var items = try owner.items(matching: query)
        if let limit { items = Array(items.prefix(max(limit, 0))) }
        return try items.map { item in
            if withSecrets { try authorize(item, .read) }
            return FoundItem(itemID: item.id, record: item.record,
                      secret: withSecrets ? .value(try owner.secret(of: item)) : nil,
                      extras: withSecrets ? try owner.extras(of: item) : nil)
        }
    }

    package func delete(query: ItemQuery, all: Bool) throws -> [ItemRecord] {
        // Decided for every item the delete would take, before it takes any.
        var matches = try owner.items(matching: query)
        if !all { matches = Array(matches.prefix(1)) }
        for item in matches { try authorize(item, .delete) }
        return try owner.delete(matching: query, all: all).map(\.record)
    }

    package func dump(withSecrets: Bool) throws -> [FoundItem] {
        try owner.allItems().map { item in
            FoundItem(itemID: item.id, record: item.record, secret: withSecrets ? try secretForDump(item) : nil)
        }
    }

    /// A dump reads every secret once; it does not fill the cache with them. It goes on past
    /// a secret it may not read, as past one locked or damaged; one whose class is locked is
    /// not decided on (a prompt for a secret that cannot be read would ask for nothing).
    private func secretForDump(_ item: KeychainItem) throws -> FoundSecret {
        guard owner.isAvailable(item.accessible) else { return .unavailable(item.accessible) }
        do { try authorize(item, .read) } catch KeychainError.accessDenied(let why) { return .refused(why) }
        do {
            return .value(try owner.secret(of: item, caching: false))
        } catch KeychainError.unavailable {
            return .unavailable(item.accessible)
        } catch {
            return .damaged((error as? KeychainError)?.description ?? "\(error)")
        }
    }

    package func importItems(_ batch: ItemBatch, overwrite: Bool) throws -> ImportReport {
        if overwrite { for entry in batch.entries { try authorizeOverwrite(entry.record.key) } }
        return try owner.save(batch: batch, updateExisting: overwrite).report
    }

    /// The whole backup in one transaction when the store holds no item; nil otherwise, with
    /// nothing written (then `importItems` in batches). Nothing exists to overwrite, so
    /// nothing is decided on but what a save is.
    package func importIntoEmptyStore(_ batch: ItemBatch, overwrite: Bool, progress: (Int) -> Void) throws -> ImportReport? {
        try owner.importIntoEmptyStore(batch, updateExisting: overwrite, progress: progress)
    }

    package func exportItems(afterID: Int64, limit: Int) throws -> ExportPage {
        let page = try owner.exportPage(afterID: afterID, limit: limit)
        // A backup holds every secret: each guarded item is decided on as an export.
        for entry in page.batch.entries where !(entry.record.attributes.values.access?.isAnyProgram ?? true) {
            try owner.authorize(caller, record: entry.record, itemID: "key:" + ServedKeychain.treePath(entry.record.key), .export)
        }
        return page
    }

    package func verify() throws -> VerifyReport { try verify(progress: { _ in }) }

    package func verify(progress: (Int) -> Void) throws -> VerifyReport {
        let (checked, problems) = try owner.verify(progress: progress)
        return VerifyReport(checked: checked, problems: problems)
    }

    package func status() throws -> KeychainStatus {
        let counts = try owner.countsByClass()
        guard let mount else {
            return KeychainStatus(state: owner.lockState, storePath: owner.storePath, itemCounts: counts,
                                  hasPassphrase: owner.hasPassphrase)
        }
        return KeychainStatus(state: owner.lockState, storePath: mount.storePath, mountpoint: mount.mountpoint,
                              lockAfter: owner.lockAfter, itemCounts: counts, hasPassphrase: owner.hasPassphrase,
                              daemonPID: getpid(), daemonVersion: ControlProtocol.softwareVersion,
                              memoryLocked: SecureBytes.allLocked, allowRoot: mount.allowRoot, memory: memoryStatus(),
                              passphraseWait: try? owner.passphraseWait())
    }

    private func memoryStatus() -> MemoryStatus {
        let usage = LockedMemory.shared.usage
        let cache = owner.cacheUsage
        return MemoryStatus(lockedBytes: usage.lockedBytes, unlockedBytes: usage.unlockedBytes,
                            limit: LockedMemory.processLimit, refusals: usage.refusals,
                            cachedSecrets: cache.secrets, cachedBytes: cache.bytes, cacheBudget: cache.budget)
    }

    package func lock() throws {
        guard mount != nil else {
            throw KeychainError.notMounted("\(owner.storePath) is not mounted; only a mount can be locked")
        }
        owner.lock(origin: .control)
    }

    package func setAccess(key: ItemKey, list: AccessList, repin: [AccessProgram], passphrase: SecureBytes) throws -> ItemRecord {
        try owner.setAccessList(key, to: list, repinning: repin, authorizedBy: passphrase)
    }

    package func unlock(passphrase: SecureBytes?) throws {
        defer { passphrase?.wipe() }
        try owner.unlock(passphrase: passphrase, origin: .control)
    }

    package func unmount() throws {
        guard let mount else { throw KeychainError.notMounted("\(owner.storePath) is not mounted") }
        try mount.unmount()
    }

    package func setLockAfter(_ seconds: Int?) throws {
        guard mount != nil else {
            throw KeychainError.notMounted("\(owner.storePath) is not mounted; lock-after is a setting of a mount")
        }
        if let seconds, seconds <= 0 { throw KeychainError.invalidInput("lock-after must be a positive number of seconds") }
        owner.setLockAfter(seconds)
    }

    /// Runs the sync action through this service's owner (`SyncSession`): the daemon's while
    /// mounted, whose `SyncWatcher` takes the folder up at its next round.
    package func sync(_ action: SyncAction, folder: String?, passphrase: SecureBytes?, scryptLogN: UInt8?) throws -> SyncOutcome {
        let session = SyncSession(owner: owner, storePath: mount?.storePath ?? owner.storePath)
        var outcome = SyncOutcome()
        func note(_ state: SyncLocalState) { outcome.folder = state.folder; outcome.device = state.device.hex }
        func needed<T>(_ value: T?, _ what: String) throws -> T {
            guard let value else { throw KeychainError.invalidInput("sync: \(what) is missing") }
            return value
        }
        switch action {
        case .initialize:
            let scrypt = ScryptParameters(logN: scryptLogN ?? ScryptParameters.default.logN)
            guard (10...22).contains(scrypt.logN) else { throw KeychainError.invalidInput("--scrypt-log-n must be from 10 to 22") }
            note(try session.initialize(folder: try needed(folder, "the folder"), passphrase: try needed(passphrase, "the passphrase"),
                                        scrypt: scrypt))
        case .join:
            note(try session.join(folder: try needed(folder, "the folder"), passphrase: try needed(passphrase, "the passphrase")))
        case .leave:
            note(try session.leave())
        case .exchange:
            let report = try session.exchange()
            if let state = try SyncLocalState.load(forStore: session.storePath) { note(state) }
            outcome.published = report.published; outcome.applied = report.applied; outcome.deleted = report.deleted
            outcome.conflictCopies = report.conflictCopies; outcome.deferred = report.deferred
            outcome.heldByItemThatDoesNotSync = report.heldByItemThatDoesNotSync
            outcome.refusals = report.refusals
            outcome.ownDirectoryRewritten = report.ownDirectoryRewritten
        }
        return outcome
    }
}

/// What a mount adds to the service: where it is, and how to end it. `unmount` starts the
/// unmount and returns, so that the reply still reaches the client.
package struct ServedMount: Sendable {
    package var storePath: String
    package var mountpoint: String
    package var allowRoot: Bool
    package var unmount: @Sendable () throws -> Void

    package init(storePath: String, mountpoint: String, allowRoot: Bool, unmount: @escaping @Sendable () throws -> Void) {
        self.storePath = storePath; self.mountpoint = mountpoint; self.allowRoot = allowRoot; self.unmount = unmount
    }
}
