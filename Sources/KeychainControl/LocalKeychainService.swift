import Foundation
import KeychainControlProtocol
import KeychainCrypto
import KeychainModel
import KeychainStore

/// The keychain service over a store opened in this process: the CLI's route when no daemon
/// serves the store, and what the daemon's control socket dispatches to.
public final class LocalKeychainService: KeychainService {
    public let keychain: Keychain
    private let hooks: DaemonHooks?
    private let onChange: (@Sendable (KeychainChange) -> Void)?
    /// The shared lock a command holds on the store it opened, so that no daemon starts under it.
    private let lease: StoreLease?

    /// `hooks` nil means no mount: lock and unmount then throw `notMounted`.
    public init(keychain: Keychain, hooks: DaemonHooks? = nil, lease: StoreLease? = nil,
                onChange: (@Sendable (KeychainChange) -> Void)? = nil) {
        self.keychain = keychain; self.hooks = hooks; self.lease = lease; self.onChange = onChange
    }

    public func save(key: ItemKey, secret: SecureBytes, extras: SecureBytes?, changes: AttributeChanges,
                     updateExisting: Bool) throws -> ItemRecord {
        let item = try keychain.save(key, secret: secret, changes: changes, extras: extras, updateExisting: updateExisting)
        onChange?(.saved([item]))
        return item.record
    }

    public func find(query: ItemQuery, withSecrets: Bool, limit: Int?) throws -> [FoundItem] {
        var items = try keychain.items(matching: query)
        if let limit { items = Array(items.prefix(max(limit, 0))) }
        return try items.map { item in
            FoundItem(itemID: item.id, record: item.record,
                      secret: withSecrets ? .value(try keychain.secret(of: item)) : nil,
                      extras: withSecrets ? try keychain.extras(of: item) : nil)
        }
    }

    public func delete(query: ItemQuery, all: Bool) throws -> [ItemRecord] {
        var items = try keychain.items(matching: query)
        guard !items.isEmpty else { throw KeychainError.itemNotFound }
        if !all { items = [items[0]] }
        try keychain.delete(items)
        onChange?(.deleted(items.map(\.id)))
        return items.map(\.record)
    }

    public func dump(withSecrets: Bool) throws -> [FoundItem] {
        try keychain.allItems().items.map { item in
            FoundItem(itemID: item.id, record: item.record, secret: withSecrets ? secretForDump(item) : nil)
        }
    }

    private func secretForDump(_ item: KeychainItem) -> FoundSecret {
        do {
            return .value(try keychain.secret(of: item))
        } catch KeychainError.unavailable {
            return .unavailable(item.accessible)
        } catch {
            return .damaged((error as? KeychainError)?.description ?? "\(error)")
        }
    }

    public func verify() throws -> VerifyReport {
        let (checked, problems) = try keychain.verify()
        return VerifyReport(checked: checked, problems: problems)
    }

    public func status() throws -> KeychainStatus {
        let mount = hooks?.status()
        return KeychainStatus(state: keychain.state, storePath: keychain.path, mountpoint: mount?.mountpoint,
                              lockAfter: mount?.lockAfter, itemCounts: try keychain.countsByClass(),
                              hasPassphrase: keychain.hasPassphrase, daemonPID: mount?.daemonPID,
                              daemonVersion: mount?.daemonVersion, memoryLocked: mount?.memoryLocked,
                              allowRoot: mount?.allowRoot)
    }

    public func importItems(_ batch: ItemBatch, overwrite: Bool) throws -> ImportReport {
        let result = try keychain.save(batch: batch, updateExisting: overwrite)
        if !result.saved.isEmpty { onChange?(.saved(result.saved)) }
        return result.report
    }

    public func exportItems(afterID: Int64, limit: Int) throws -> ExportPage {
        try keychain.exportPage(afterID: afterID, limit: limit)
    }

    public func lock() throws {
        guard let hooks else { throw KeychainError.notMounted("\(keychain.path) is not mounted; only a mount can be locked") }
        try hooks.lock()
        onChange?(.lockStateChanged(keychain.state))
    }

    public func unlock(passphrase: SecureBytes?) throws {
        if let hooks { try hooks.unlock(passphrase) } else { try keychain.unlock(passphrase: passphrase) }
        onChange?(.lockStateChanged(keychain.state))
    }

    public func unmount() throws {
        guard let hooks else { throw KeychainError.notMounted("\(keychain.path) is not mounted") }
        try hooks.unmount()
    }

    public func setLockAfter(_ seconds: Int?) throws {
        guard let hooks else {
            throw KeychainError.notMounted("\(keychain.path) is not mounted; lock-after is a setting of a mount")
        }
        if let seconds, seconds <= 0 { throw KeychainError.invalidInput("lock-after must be a positive number of seconds") }
        try hooks.setLockAfter(seconds)
    }
}

/// A change made through a `LocalKeychainService`, reported after it is committed so the
/// daemon can bring its in-memory tree up to date.
public enum KeychainChange: Sendable {
    case saved([KeychainItem])
    case deleted([Int64])
    case lockStateChanged(LockState)
}
