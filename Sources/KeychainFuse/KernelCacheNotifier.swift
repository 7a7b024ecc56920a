import CFuseShim
import Dispatch
import Glibc
import KeychainFileSystem
import KeychainModel

/// Tells the kernel of every change it did not make itself, so that its cached names and
/// attributes never disagree with the keychain. Changes made through the mount (`.tree`) the
/// kernel already knows; the others (the control socket's: the CLI and git; D-Bus; sync's
/// merges) arrive here from the owner's one stream (`ItemChangeObserver`) before their client
/// hears "done":
///
/// - a name added: `notify_inval_entry` on it (a dentry the kernel may hold for it, negative
///   or stale, goes) and `notify_inval_inode` on its directory (nlink, mtime, and the
///   listing the kernel keeps of a service directory, `FuseOperations.opendir`); where the
///   kernel holds an inode of that name (a new file pending through the mount), as removed;
/// - a name removed: `notify_delete` where the kernel holds its inode (the dentry goes and the
///   inode is unlinked, as by unlink(2), so an open descriptor sees nlink 0) and
///   `notify_inval_inode` on it (its size is then the open copy's), else `notify_inval_entry`;
///   the inode table forgets the name as at an unlink;
/// - a value or attribute changed: `notify_inval_inode` on the inode (size, mtime).
///
/// An internet item may be known to the kernel by its plain or its tagged name: both are told.
/// A name whose directory the kernel never looked up needs nothing: no dentry below it exists.
///
/// A change made through the mount under one name of an item may leave the kernel's entry for
/// another stale: under a spelling the tree does not list (`%41lice` for `Alice`, in a directory
/// so spelled, `alice%~SSH`), whose own entries the kernel never keeps (`InodeTable.Node.alias`),
/// or under one of an internet item's two listed names. Such a change is told to the item's
/// listed names too (`retold`), though the kernel knows it under the name it used, which cannot
/// be told apart here: only entries and attributes are dropped, never a name unlinked, so
/// telling the name used is only a lookup more. It is told after the request's reply, from
/// `retelling`'s one thread: the kernel holds the directory's lock until that reply (rule 1).
///
/// Why this cannot deadlock. libfuse forbids a notification sent in the path of a related
/// request, or while holding a lock such a request needs: the kernel handles the notification
/// in the writer's context and takes the directory's inode lock (inval_entry, delete) or the
/// pages' locks (inval_inode), which a task may hold while it waits for a reply from us.
/// 1. No notification is sent on a libfuse worker, so none waits on a request it is itself
///    answering: changes not made through the mount are told on the control server's, the
///    Secret Service's (its bus thread and write queue) and sync's threads; those made through
///    it, on `retelling`'s, as is the name of a new file a failed commit dropped
///    (`FuseFileSystem.dropNameIfGone`; but its entry, which close(2) must find gone, before
///    the FLUSH's reply, where it says why that cannot deadlock).
/// 2. The owner calls observers after its commit with none of its locks held (`committing`,
///    `state`, `unlocking`), so every worker that must answer the request the kernel is waiting
///    on can take whatever it needs and reply; then the kernel lets go of its lock and the
///    notification completes.
/// 3. Here, the inode table's mutex is held only to read and update the table, never across a
///    notification, and a worker never waits for anything while holding it.
/// 4. `live` is held across the notifications so that none reaches a session being destroyed;
///    a worker takes it only for the entry of a dropped new file (above), which waits on no
///    other notification; the takers that end the session (`FuseMount.serve`'s end and
///    `close`) run after the loop has stopped serving, when no request can be waiting.
/// `KernelCacheNotifierTests` forces the interleaving: a notification sent while a worker is
/// blocked inside a request on the same directory completes once the worker is let go.
struct KernelCacheNotifier: ItemChangeObserver {
    let fileSystem: FuseFileSystem
    let live: @Sendable (_ body: (OpaquePointer) -> Void) -> Void
    /// Sends the notices of changes made through the mount (`retold`) once their requests have
    /// been answered.
    let retelling = DispatchQueue(label: "keychainfs.kernel-cache.retelling")

    /// One kernel call.
    enum Notice: Equatable {
        case invalidateEntry(parent: UInt64, name: String)
        case delete(parent: UInt64, child: UInt64, name: String)
        case invalidateInode(UInt64)
    }

    func keychainDidChange(_ changes: [ItemChange], origin: ChangeOrigin) {
        if origin == .tree {
            let notices = fileSystem.inodes.withLock { t in changes.flatMap { Self.retold($0, t) } }
            if !notices.isEmpty { tellAfterReply(notices) }
        }
        // An unlock is told whoever asked for it: it only ever comes from the control socket
        // (no request of the mount unlocks), and it may show names the kernel looked up in vain.
        let told = origin != .tree ? changes : changes.filter { $0 == .lockStateChanged(.unlocked) }
        guard !told.isEmpty else { return }
        let notices = fileSystem.inodes.withLock { t in told.flatMap { Self.notices(for: $0, &t) } }
        if !notices.isEmpty { tellNow(notices) }
    }

    /// Sends `notices`, made on a worker, once its request is answered (rule 1).
    func tellAfterReply(_ notices: [Notice]) {
        retelling.async { [self] in tellNow(notices) }
    }

    func tellNow(_ notices: [Notice]) {
        live { session in
            for n in notices {
                switch n {
                case .invalidateEntry(let parent, let name): _ = kcfs_notify_inval_entry(session, parent, name)
                case .delete(let parent, let child, let name):
                    // Refused when the kernel's dentry holds another inode: then drop the dentry alone.
                    if kcfs_notify_delete(session, parent, child, name) != 0 { _ = kcfs_notify_inval_entry(session, parent, name) }
                case .invalidateInode(let ino): _ = kcfs_invalidate_inode(session, ino)
                }
            }
        }
    }

    /// What the kernel must be told of `change`, made through the mount, for the item's other
    /// names it may hold: nothing while it holds no alias and the item has one listed name or
    /// only one held. Invalidations only: the table's names stay (the request kept it right for
    /// the name it used, and an unlink here could race the next request on that name).
    static func retold(_ change: ItemChange, _ table: InodeTable) -> [Notice] {
        func heldElsewhere(_ key: ItemKey) -> Bool {
            if table.aliases > 0 { return true }
            // A generic item has one listed name: no names built for it (each create passes here).
            guard case .internet = key else { return false }
            let (directory, names) = place(of: key)
            guard names.count > 1, let parent = table.directory(directory) else { return false }
            return names.allSatisfy { table.child(parent, $0) != nil }
        }
        switch change {
        case .added(let key), .updated(let key), .removed(let key):
            guard heldElsewhere(key) else { return [] }
            return entriesAndAttributes(key, table)
        case .moved(let from, let to):
            guard heldElsewhere(from) || heldElsewhere(to) else { return [] }
            return entriesAndAttributes(from, table) + entriesAndAttributes(to, table)
        case .lockStateChanged: return []
        }
    }

    /// Drops whatever the kernel keeps of `key`'s listed names: their entries and attributes,
    /// and their directory's.
    private static func entriesAndAttributes(_ key: ItemKey, _ table: InodeTable) -> [Notice] {
        let (directory, names) = place(of: key)
        guard let parent = table.directory(directory) else { return [] }
        return names.flatMap { name -> [Notice] in
            [.invalidateEntry(parent: parent, name: name)] + (table.child(parent, name).map { [.invalidateInode($0)] } ?? [])
        } + [.invalidateInode(parent)]
    }

    /// What the kernel must be told of `change`, from what it holds (`table`); a removed name
    /// also leaves the table.
    static func notices(for change: ItemChange, _ table: inout InodeTable) -> [Notice] {
        switch change {
        case .added(let key): return added(key, &table)
        case .removed(let key): return removed(key, &table)
        case .moved(let from, let to): return removed(from, &table) + added(to, &table)
        case .updated(let key):
            let (directory, names) = place(of: key)
            guard let parent = table.directory(directory) else { return [] }
            return names.compactMap { table.child(parent, $0) }.map { .invalidateInode($0) }
        // The first unlock may show names of every class: the kernel asks again for those it
        // was refused (a refusal is not cached), but the directories' link counts it keeps
        // are stale.
        case .lockStateChanged(.unlocked): return table.directories.map { .invalidateInode($0) }
        // Names and sizes stay readable while locked; the pages a lock revokes are dropped by
        // `FuseMount.dropCachedPages`.
        case .lockStateChanged: return []
        }
    }

    private static func added(_ key: ItemKey, _ table: inout InodeTable) -> [Notice] {
        let (directory, names) = place(of: key)
        // The deepest directory the kernel holds: below it, it holds nothing.
        var parent = InodeTable.root
        for (depth, component) in directory.enumerated() {
            guard let next = table.child(parent, component) else {
                return [.invalidateEntry(parent: parent, name: directory[depth]), .invalidateInode(parent)]
            }
            parent = next
        }
        // A name the kernel holds open already is a new file still pending through the mount,
        // whose name the stored item took (`ServedKeychain.State.insertStored`): its inode
        // goes, as at an unlink, so that the stored item is not shown with that file's size. (A
        // directory of that name, which an internet item's account may share, has no open file.)
        return unlinked(names, in: parent, &table, onlyOpen: true) + [.invalidateInode(parent)]
    }

    private static func removed(_ key: ItemKey, _ table: inout InodeTable) -> [Notice] {
        let (directory, names) = place(of: key)
        guard let parent = table.directory(directory) else { return [] }
        return unlinked(names, in: parent, &table, onlyOpen: false) + [.invalidateInode(parent)]
    }

    /// Each of `names` in `parent`: unlinked where the kernel holds its inode (with `onlyOpen`,
    /// one with a file open on it): its dentry goes, the inode gets no links, and its attributes
    /// are asked again (a descriptor still open on it shows its own copy's size, not the size
    /// the item had); else its entry dropped.
    private static func unlinked(_ names: [String], in parent: UInt64, _ table: inout InodeTable,
                                 onlyOpen: Bool) -> [Notice] {
        names.flatMap { name -> [Notice] in
            guard let child = table.child(parent, name), !onlyOpen || table.isOpen(child) else {
                return [.invalidateEntry(parent: parent, name: name)]
            }
            table.unlink(parent, name)
            return [.delete(parent: parent, child: child, name: name), .invalidateInode(child)]
        }
    }

    /// The names from the root of the directory that lists `key`, and the names it may be
    /// listed by there.
    static func place(of key: ItemKey) -> (directory: [String], names: [String]) {
        switch key {
        case .generic(let g):
            return ([TreeLocation.serviceFileName(g.service)], [TreeName.escape(g.account)])
        case .internet(let i):
            let plain = InternetVariantName.fileName(for: i), tagged = InternetVariantName.taggedFileName(for: i)
            return ([TreeLocation.internetName, TreeName.escape(i.server), String(i.port)]
                        + InternetPath.segments(i.path).map(TreeName.escape),
                    plain == tagged ? [plain] : [plain, tagged])
        }
    }
}
