import Foundation
import KeychainCrypto
import KeychainModel

/// What the command line does to a keychain. Implemented by `LocalKeychainService` (a store
/// opened in this process) and `RemoteKeychainService` (the daemon serving a mounted store),
/// so every command works the same whether or not the store is mounted.
///
/// Every failure is a `KeychainError`, also across the socket, so exit codes do not depend on
/// the route a command took.
public protocol KeychainService: Sendable {
    /// Adds the item, or with `updateExisting` updates the one with the same key
    /// (`duplicateItem` without it).
    func save(key: ItemKey, secret: SecureBytes, changes: AttributeChanges, updateExisting: Bool) throws -> ItemRecord

    /// Matching items in `ItemOrder`, at most `limit` of them. With `withSecrets`, a match
    /// whose class key is not held throws `unavailable`.
    func find(query: ItemQuery, withSecrets: Bool, limit: Int?) throws -> [FoundItem]

    /// Deletes every match, all or none, and returns how many; `itemNotFound` when none match.
    func delete(query: ItemQuery) throws -> Int

    /// Every item whose attributes can be read now. With `withSecrets`, each item's secret is
    /// given as `.value`, or as `.unavailable` / `.damaged` instead of failing the whole dump.
    func dump(withSecrets: Bool) throws -> [FoundItem]

    func verify() throws -> VerifyReport
    func status() throws -> KeychainStatus

    /// Lock, unlock and unmount act on a mount; without a daemon, lock and unmount throw `notMounted`.
    func lock() throws
    func unlock(passphrase: SecureBytes?) throws
    func unmount() throws
}

extension KeychainService {
    public func find(query: ItemQuery, withSecrets: Bool) throws -> [FoundItem] {
        try find(query: query, withSecrets: withSecrets, limit: nil)
    }
}

/// One item as a command sees it.
public struct FoundItem: Sendable {
    public var itemID: Int64
    public var record: ItemRecord
    /// Nil when secrets were not asked for.
    public var secret: FoundSecret?

    public init(itemID: Int64, record: ItemRecord, secret: FoundSecret? = nil) {
        self.itemID = itemID; self.record = record; self.secret = secret
    }

    /// The secret's bytes; throws what kept them from being read.
    public func secretBytes() throws -> SecureBytes {
        switch secret {
        case .value(let bytes): return bytes
        case .unavailable(let c): throw KeychainError.unavailable(c)
        case .damaged(let reason): throw KeychainError.integrityFailure(reason)
        case nil: throw KeychainError.invalidInput("the secret of item #\(itemID) was not requested")
        }
    }
}

/// A secret as a dump reports it: it is per item whether it could be read.
public enum FoundSecret: Sendable {
    case value(SecureBytes)
    /// The item's class key is not held in this lock state (or not on this device).
    case unavailable(AccessibilityClass)
    /// The secret failed authentication.
    case damaged(String)
}

public struct VerifyReport: Codable, Sendable, Equatable {
    /// Items opened, secrets included, plus those that failed.
    public var checked: Int
    public var problems: [IntegrityProblem]

    public init(checked: Int, problems: [IntegrityProblem]) { self.checked = checked; self.problems = problems }
}

public struct KeychainStatus: Codable, Sendable, Equatable {
    public var state: LockState
    public var storePath: String
    /// Nil when no daemon serves the store.
    public var mountpoint: String?
    /// Seconds without file access after which the mount locks itself; nil for never.
    public var lockAfter: Int?
    public var itemCounts: [AccessibilityClass: Int]
    public var hasPassphrase: Bool
    /// The daemon's locked memory and cache of secrets; nil without a daemon (or from a daemon
    /// of a version that did not report it).
    public var memory: MemoryStatus?

    public init(state: LockState, storePath: String, mountpoint: String? = nil, lockAfter: Int? = nil,
                itemCounts: [AccessibilityClass: Int], hasPassphrase: Bool, memory: MemoryStatus? = nil) {
        self.state = state; self.storePath = storePath; self.mountpoint = mountpoint; self.lockAfter = lockAfter
        self.itemCounts = itemCounts; self.hasPassphrase = hasPassphrase; self.memory = memory
    }
}

/// Where a daemon keeps keys and secrets: memory locked in RAM, within RLIMIT_MEMLOCK.
public struct MemoryStatus: Codable, Sendable, Equatable {
    /// Bytes of pages locked in RAM for keys and secrets.
    public var lockedBytes: Int
    /// Bytes of pages holding keys or secrets that the kernel refused to lock: they may be
    /// swapped out. Zero unless locked memory is exhausted.
    public var unlockedBytes: Int
    /// RLIMIT_MEMLOCK as it binds the daemon; nil when unlimited (or it may lock without limit).
    public var limit: Int?
    /// Times the kernel refused to lock pages since the daemon started.
    public var refusals: Int
    /// Decrypted secrets kept to serve reads, the locked memory they take, and its budget.
    public var cachedSecrets: Int
    public var cachedBytes: Int
    public var cacheBudget: Int

    public init(lockedBytes: Int, unlockedBytes: Int, limit: Int?, refusals: Int, cachedSecrets: Int,
                cachedBytes: Int, cacheBudget: Int) {
        self.lockedBytes = lockedBytes; self.unlockedBytes = unlockedBytes; self.limit = limit
        self.refusals = refusals; self.cachedSecrets = cachedSecrets; self.cachedBytes = cachedBytes
        self.cacheBudget = cacheBudget
    }

    /// Some keys or secrets sit in memory that may be swapped.
    public var isExhausted: Bool { unlockedBytes > 0 }
}

/// What a mount's status adds to the store's own.
public struct MountStatus: Sendable, Equatable {
    public var mountpoint: String
    public var lockAfter: Int?

    public init(mountpoint: String, lockAfter: Int?) { self.mountpoint = mountpoint; self.lockAfter = lockAfter }
}

/// The daemon's side of lock, unlock, unmount and status. The daemon owns the lock state
/// (its lock-after timer locks too, and locking must also drop cached plaintext), so these
/// closures do the whole job: `lock` locks the keychain, `unlock` unlocks it.
/// `unmount` should start the unmount and return, so that the reply still reaches the client.
public struct DaemonHooks: Sendable {
    public var lock: @Sendable () throws -> Void
    public var unlock: @Sendable (SecureBytes?) throws -> Void
    public var unmount: @Sendable () throws -> Void
    public var status: @Sendable () -> MountStatus

    public init(lock: @escaping @Sendable () throws -> Void,
                unlock: @escaping @Sendable (SecureBytes?) throws -> Void,
                unmount: @escaping @Sendable () throws -> Void,
                status: @escaping @Sendable () -> MountStatus) {
        self.lock = lock; self.unlock = unlock; self.unmount = unmount; self.status = status
    }
}
