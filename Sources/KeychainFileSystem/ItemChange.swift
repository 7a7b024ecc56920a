import KeychainModel

/// One change the keychain's owner committed, as its observers see it: the mount's kernel
/// cache, and later the Secret Service's signals and sync's outbox. One stream for all of
/// them, sent from the one place where the owner commits.
package enum ItemChange: Sendable, Equatable {
    /// A name appeared: a new item was stored.
    case added(ItemKey)
    /// A name went away: the item was deleted (or replaced by a rename onto it; the rename
    /// itself is `moved`).
    case removed(ItemKey)
    /// The item kept its identity and took another name.
    case moved(from: ItemKey, to: ItemKey)
    /// Its secret, size or attributes changed under the same name.
    case updated(ItemKey)
    /// The keychain locked or unlocked: what may be read changed for every item.
    case lockStateChanged(LockState)
}

/// Who made a change. The kernel already knows what came through the mount, so the mount's
/// observer need not tell it; every other observer wants every change.
package enum ChangeOrigin: Sendable, Equatable {
    case tree
    case control
    /// A merge of what other devices wrote to the sync folder (issue 20): the sync writer does
    /// not write it back as this device's own change.
    case sync
}

/// Receives the owner's committed changes. Called after the change is committed and with none
/// of the owner's locks held (libfuse forbids a notification sent under a lock that a related
/// request needs), on the thread that made the change, before that thread answers its client:
/// so a client that hears "done" can rely on the mount showing it.
package protocol ItemChangeObserver: Sendable {
    func keychainDidChange(_ changes: [ItemChange], origin: ChangeOrigin)
}
