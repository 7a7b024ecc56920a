// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif
import KeychainBatch
import KeychainCrypto
import KeychainModel

/// What the command line does to a keychain. Implemented by `ServedKeychainService` (over the
/// keychain's owner: the daemon's, or without a daemon a command's own) and
/// `RemoteKeychainService` (the daemon serving a mounted store, over its socket), so every
/// command works the same whether or not the store is mounted.
///
/// Every failure is a `KeychainError`, also across the socket, so exit codes do not depend on
/// the route a command took.
package protocol KeychainService: Sendable {
    /// Adds the item, or with `updateExisting` updates the one with the same key
    /// (`duplicateItem` without it).
    func save(key: ItemKey, secret: SecureBytes, changes: AttributeChanges, updateExisting: Bool) throws -> ItemRecord

    /// As `save`, with extras sealed beside the secret (git's expiry and refresh token): nil
    /// keeps an existing item's extras, empty removes them.
    func save(key: ItemKey, secret: SecureBytes, extras: SecureBytes?, changes: AttributeChanges,
              updateExisting: Bool) throws -> ItemRecord

    /// Matching items in `ItemOrder`, at most `limit` of them. With `withSecrets`, a match
    /// whose class key is not held throws `unavailable`.
    func find(query: ItemQuery, withSecrets: Bool, limit: Int?) throws -> [FoundItem]

    /// Deletes the first match in `ItemOrder` (the one `find` shows), or with `all` every
    /// match, all or none; returns what it deleted. `itemNotFound` when nothing matches.
    func delete(query: ItemQuery, all: Bool) throws -> [ItemRecord]

    /// Every item whose attributes can be read now. With `withSecrets`, each item's secret is
    /// given as `.value`, or as `.unavailable` / `.damaged` instead of failing the whole dump.
    func dump(withSecrets: Bool) throws -> [FoundItem]

    func verify() throws -> VerifyReport
    /// `verify`, telling `progress` the number of rows read so far as it goes; through a daemon
    /// (one request) it is told nothing.
    func verify(progress: (Int) -> Void) throws -> VerifyReport
    func status() throws -> KeychainStatus

    /// Backups: saves a batch in one transaction (`Keychain.save(batch:updateExisting:)`); an
    /// existing key is skipped and reported, or replaced whole with `overwrite`. Keys are
    /// validated as for `save`; extras go with their items.
    func importItems(_ batch: ItemBatch, overwrite: Bool) throws -> ImportReport

    /// Backups: a page of the exportable items, extras included (`Keychain.exportPage(afterID:limit:)`):
    /// every class but `*-this-device-only`, in id order after `afterID`.
    func exportItems(afterID: Int64, limit: Int) throws -> ExportPage

    /// Per-program access: sets the item's access list (empty: any program), vouched for by
    /// the store's passphrase instead of by the list, so no program on it is needed. A wrong
    /// passphrase is `wrongPassphrase` and counts towards the unlock backoff. A program
    /// listed before keeps the file it was allowed with, unless it is in `repin`.
    func setAccess(key: ItemKey, list: AccessList, repin: [AccessProgram], passphrase: SecureBytes) throws -> ItemRecord

    /// Lock, unlock, unmount and the lock-after setting act on a mount; without a daemon,
    /// all but unlock throw `notMounted`.
    func lock() throws
    func unlock(passphrase: SecureBytes?) throws
    func unmount() throws
    /// Seconds without file access after which the mount locks itself; nil for never.
    func setLockAfter(_ seconds: Int?) throws

    /// Sync (issue 20): set up, leave, or run an exchange with the sync folder, through the
    /// store's owner (the daemon's while mounted). `folder` and `passphrase` are the sync
    /// folder's and its passphrase, for `initialize` and `join`.
    func sync(_ action: SyncAction, folder: String?, passphrase: SecureBytes?, scryptLogN: UInt8?) throws -> SyncOutcome
}

/// What `KeychainService.sync` does. Never renumber: the raw value is on the wire.
package enum SyncAction: UInt8, Sendable {
    case exchange = 1, initialize = 2, join = 3, leave = 4
}

/// What a sync action did: the exchange's counts and refusals, and the folder and device.
package struct SyncOutcome: Sendable, Equatable {
    package var folder = ""
    package var device = ""
    package var published = 0, applied = 0, deleted = 0, conflictCopies = 0, deferred = 0
    /// `SyncReport.heldByItemThatDoesNotSync`.
    package var heldByItemThatDoesNotSync: [ItemKey] = []
    package var refusals: [String] = []
    /// `SyncReport.ownDirectoryRewritten`.
    package var ownDirectoryRewritten: String?
    package init() {}
}

extension KeychainService {
    package func verify(progress: (Int) -> Void) throws -> VerifyReport { try verify() }

    package func save(key: ItemKey, secret: SecureBytes, changes: AttributeChanges, updateExisting: Bool) throws -> ItemRecord {
        try save(key: key, secret: secret, extras: nil, changes: changes, updateExisting: updateExisting)
    }

    package func find(query: ItemQuery, withSecrets: Bool) throws -> [FoundItem] {
        try find(query: query, withSecrets: withSecrets, limit: nil)
    }
}

/// One item as a command sees it.
package struct FoundItem: Sendable {
    package var itemID: Int64
    package var record: ItemRecord
    /// Nil when secrets were not asked for.
    package var secret: FoundSecret?
    /// The sealed extras, when secrets were asked for and the item has some.
    package var extras: SecureBytes?

    package init(itemID: Int64, record: ItemRecord, secret: FoundSecret? = nil, extras: SecureBytes? = nil) {
        self.itemID = itemID; self.record = record; self.secret = secret; self.extras = extras
    }

    /// The secret's bytes; throws what kept them from being read.
    package func secretBytes() throws -> SecureBytes {
        switch secret {
        case .value(let bytes): return bytes
        case .unavailable(let c): throw KeychainError.unavailable(c)
        case .damaged(let reason): throw KeychainError.integrityFailure(reason)
        case .refused(let reason): throw KeychainError.accessDenied(reason)
        case nil: throw KeychainError.invalidInput("the secret of item #\(itemID) was not requested")
        }
    }
}

/// A secret as a dump reports it: it is per item whether it could be read.
package enum FoundSecret: Sendable {
    case value(SecureBytes)
    /// The item's class key is not held in this lock state (or not on this device).
    case unavailable(AccessibilityClass)
    /// The secret failed authentication.
    case damaged(String)
    /// The caller may not read it (the item's access list, a prompt answered no): why, as
    /// `KeychainError.accessDenied` says it.
    case refused(String)
}

package struct VerifyReport: Codable, Sendable, Equatable {
    /// Items opened, secrets included, plus those that failed.
    package var checked: Int
    package var problems: [IntegrityProblem]

    package init(checked: Int, problems: [IntegrityProblem]) { self.checked = checked; self.problems = problems }
}

package struct KeychainStatus: Codable, Sendable, Equatable {
    package var state: LockState
    package var storePath: String
    /// Nil when no daemon serves the store.
    package var mountpoint: String?
    /// Seconds without file access after which the mount locks itself; nil for never.
    package var lockAfter: Int?
    package var itemCounts: [AccessibilityClass: Int]
    package var hasPassphrase: Bool
    /// The serving daemon's process id; nil without a daemon (or from an older daemon).
    package var daemonPID: Int32?
    /// The serving daemon's `keychainfs --version`.
    package var daemonVersion: String?
    /// Whether every key and secret buffer of the daemon is mlock'ed (false: RLIMIT_MEMLOCK
    /// was too small for some, which may then reach swap).
    package var memoryLocked: Bool?
    /// Whether root may use the mount (`--allow-root`).
    package var allowRoot: Bool?
    /// The daemon's locked memory and cache of secrets; nil without a daemon (or from a daemon
    /// of a version that did not report it).
    package var memory: MemoryStatus?
    /// Seconds before a passphrase would be judged, after wrong ones in a row; nil when one
    /// would be now (or from a daemon of a version that did not report it).
    package var passphraseWait: Int?

    package init(state: LockState, storePath: String, mountpoint: String? = nil, lockAfter: Int? = nil,
                itemCounts: [AccessibilityClass: Int], hasPassphrase: Bool, daemonPID: Int32? = nil,
                daemonVersion: String? = nil, memoryLocked: Bool? = nil, allowRoot: Bool? = nil,
                memory: MemoryStatus? = nil, passphraseWait: Int? = nil) {
        self.state = state; self.storePath = storePath; self.mountpoint = mountpoint; self.lockAfter = lockAfter
        self.itemCounts = itemCounts; self.hasPassphrase = hasPassphrase
        self.daemonPID = daemonPID; self.daemonVersion = daemonVersion; self.memoryLocked = memoryLocked
        self.allowRoot = allowRoot; self.memory = memory; self.passphraseWait = passphraseWait
    }
}

/// Where a daemon keeps keys and secrets: memory locked in RAM, within RLIMIT_MEMLOCK.
package struct MemoryStatus: Codable, Sendable, Equatable {
    /// Bytes of pages locked in RAM for keys and secrets.
    package var lockedBytes: Int
    /// Bytes of pages holding keys or secrets that the kernel refused to lock: they may be
    /// swapped out. Zero unless locked memory is exhausted.
    package var unlockedBytes: Int
    /// RLIMIT_MEMLOCK as it binds the daemon; nil when unlimited (or it may lock without limit).
    package var limit: Int?
    /// Times the kernel refused to lock pages since the daemon started.
    package var refusals: Int
    /// Decrypted secrets kept to serve reads, the locked memory they take, and its budget.
    package var cachedSecrets: Int
    package var cachedBytes: Int
    package var cacheBudget: Int

    package init(lockedBytes: Int, unlockedBytes: Int, limit: Int?, refusals: Int, cachedSecrets: Int,
                cachedBytes: Int, cacheBudget: Int) {
        self.lockedBytes = lockedBytes; self.unlockedBytes = unlockedBytes; self.limit = limit
        self.refusals = refusals; self.cachedSecrets = cachedSecrets; self.cachedBytes = cachedBytes
        self.cacheBudget = cacheBudget
    }

    /// Some keys or secrets sit in memory that may be swapped.
    package var isExhausted: Bool { unlockedBytes > 0 }
}

