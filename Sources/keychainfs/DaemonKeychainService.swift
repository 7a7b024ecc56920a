import Foundation
import KeychainControl
import KeychainCrypto
import KeychainFileSystem
import KeychainModel
import KeychainStore

/// What the daemon's control socket serves: every request is a call on the mount's
/// `ServedKeychain`, the same owner the FUSE callbacks change, so a change made either way is
/// committed and visible in the tree in one step.
final class DaemonKeychainService: KeychainService {
    let tree: KeychainTree
    let settings: MountSettings
    private let unmountMount: @Sendable () throws -> Void

    init(tree: KeychainTree, settings: MountSettings, unmount: @escaping @Sendable () throws -> Void) {
        self.tree = tree
        self.settings = settings
        self.unmountMount = unmount
    }

    private var served: ServedKeychain { tree.served }

    func save(key: ItemKey, secret: SecureBytes, extras: SecureBytes?, changes: AttributeChanges,
              updateExisting: Bool) throws -> ItemRecord {
        try served.save(key, secret: secret, extras: extras, changes: changes,
                        updateExisting: updateExisting).record
    }

    func find(query: ItemQuery, withSecrets: Bool, limit: Int?) throws -> [FoundItem] {
        var items = try served.items(matching: query)
        if let limit { items = Array(items.prefix(max(limit, 0))) }
        return try items.map { item in
            FoundItem(itemID: item.id, record: item.record,
                      secret: withSecrets ? .value(try served.secret(of: item)) : nil,
                      extras: withSecrets ? try served.extras(of: item) : nil)
        }
    }

    func delete(query: ItemQuery, all: Bool) throws -> [ItemRecord] {
        try served.delete(matching: query, all: all).map(\.record)
    }

    func dump(withSecrets: Bool) throws -> [FoundItem] {
        try served.allItems().map { item in
            FoundItem(itemID: item.id, record: item.record, secret: withSecrets ? secretForDump(item) : nil)
        }
    }

    /// A dump reads every secret once; it does not fill the cache with them.
    private func secretForDump(_ item: KeychainItem) -> FoundSecret {
        do {
            return .value(try served.secret(of: item, caching: false))
        } catch KeychainError.unavailable {
            return .unavailable(item.accessible)
        } catch {
            return .damaged((error as? KeychainError)?.description ?? "\(error)")
        }
    }

    /// Through the served keychain, so the batch commits and enters the index in one step.
    func importItems(_ batch: ItemBatch, overwrite: Bool) throws -> ImportReport {
        try served.save(batch: batch, updateExisting: overwrite).report
    }

    func exportItems(afterID: Int64, limit: Int) throws -> ExportPage {
        try served.exportPage(afterID: afterID, limit: limit)
    }

    func verify() throws -> VerifyReport {
        let (checked, problems) = try served.verify()
        return VerifyReport(checked: checked, problems: problems)
    }

    func status() throws -> KeychainStatus {
        KeychainStatus(state: served.lockState, storePath: settings.storePath, mountpoint: settings.mountpoint,
                       lockAfter: tree.lockAfter, itemCounts: try served.countsByClass(),
                       hasPassphrase: served.hasPassphrase, daemonPID: getpid(),
                       daemonVersion: KeychainFS.configuration.version, memoryLocked: SecureBytes.allLocked,
                       allowRoot: settings.allowRoot, memory: memoryStatus())
    }

    private func memoryStatus() -> MemoryStatus {
        let usage = LockedMemory.shared.usage
        let cache = served.cacheUsage
        return MemoryStatus(lockedBytes: usage.lockedBytes, unlockedBytes: usage.unlockedBytes,
                            limit: LockedMemory.processLimit, refusals: usage.refusals,
                            cachedSecrets: cache.secrets, cachedBytes: cache.bytes, cacheBudget: cache.budget)
    }

    func lock() throws { tree.lock() }
    func unlock(passphrase: SecureBytes?) throws {
        defer { passphrase?.wipe() }
        try tree.unlock(passphrase: passphrase)
    }
    func unmount() throws { try unmountMount() }

    func setLockAfter(_ seconds: Int?) throws {
        if let seconds, seconds <= 0 { throw KeychainError.invalidInput("lock-after must be a positive number of seconds") }
        tree.setLockAfter(seconds)
    }
}
