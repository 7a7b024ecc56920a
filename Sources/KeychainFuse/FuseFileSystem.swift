import CFuseShim
import KeychainFileSystem
import KeychainModel
import Synchronization

/// What the binding keeps besides the tree: the inodes the kernel holds, the listings of
/// open directories, and the inodes whose pages may hold a secret. Its mutexes are never held
/// while the tree is called.
///
/// Files are opened with direct I/O, so read(2) never fills the page cache; but a private
/// memory mapping (MAP_PRIVATE) of a file does, and keeps showing those pages after the lock.
/// So every inode read through is noted with its handle, and once a lock has revoked the
/// handle, the inode's pages are dropped: a mapping then faults, the read fails, and the
/// process gets SIGBUS rather than the secret.
final class FuseFileSystem: Sendable {
    let tree: KeychainTree
    let inodes = Mutex(InodeTable())
    private let listings = Mutex(DirectoryListings())
    /// Inode to the handle it was last read through.
    private let readNodes = Mutex<[UInt64: UInt64]>([:])
    /// What tells the kernel of changes (`KernelCacheNotifier`); set while mounted.
    private let notifier = Mutex<KernelCacheNotifier?>(nil)

    init(tree: KeychainTree) { self.tree = tree }

    /// Cleared at unmount: the notifier holds this file system.
    func setNotifier(_ notifier: KernelCacheNotifier?) {
        self.notifier.withLock { $0 = notifier }
    }

    /// If `ino`'s name no longer names anything in the tree, though the kernel made it through
    /// the mount (a new file dropped at a failed commit at close), forgets it as an unlink does,
    /// and tells the kernel, which would keep finding the name for the entry timeout. With
    /// `entryBeforeReply` (a FLUSH, whose caller, close(2), waits on the reply), the entry is
    /// dropped before this request's reply, so that close(2) returns with the name gone; the
    /// rest (and the entry, for a RELEASE) just after the reply.
    ///
    /// The entry, from the worker answering the FLUSH, is against `KernelCacheNotifier`'s
    /// rule 1: an entry invalidation takes only the directory's lock, and the kernel holds no
    /// lock across a FLUSH, so a task holding the directory's (an unlink, a create there) waits
    /// on nothing the FLUSH holds; the worker first passes the lead, so that such a task's
    /// request is read and answered by another. Not at an FSYNC, which holds the file's lock
    /// (an unlink holding the directory's waits for it), and which drops nothing
    /// (`KeychainTree.sync`); nor at a RELEASE, which may come with the directory held (a
    /// create whose open failed): told after the reply.
    func dropNameIfGone(_ ino: UInt64, entryBeforeReply: Bool) {
        guard let location = try? location(ino) else { return }
        do { _ = try tree.stat(location); return } catch { guard error == .notFound else { return } }
        let dropped = inodes.withLock { t -> (parent: UInt64, name: String)? in
            guard let n = t.nodes[ino], n.linked, t.child(n.parent, n.name) == ino else { return nil }
            t.unlink(n.parent, n.name)
            return (n.parent, n.name)
        }
        guard let dropped, let notifier = notifier.withLock({ $0 }) else { return }
        let entry = KernelCacheNotifier.Notice.invalidateEntry(parent: dropped.parent, name: dropped.name)
        if entryBeforeReply {
            kcfs_loop_pass_lead()
            notifier.tellNow([entry])
        }
        notifier.tellAfterReply((entryBeforeReply ? [] : [entry]) + [.invalidateInode(ino), .invalidateInode(dropped.parent)])
    }

    func noteRead(_ ino: UInt64, handle: UInt64) {
        readNodes.withLock { if $0[ino] != handle { $0[ino] = handle } }
    }

    /// Drops, through `invalidate`, the pages of every inode whose handle no longer reads (or
    /// of every inode read, with `all`).
    func dropPages(all: Bool = false, _ invalidate: (UInt64) -> Void) {
        let nodes = readNodes.withLock { $0 }
        var dropped: [(UInt64, UInt64)] = []
        for (node, handle) in nodes where all || !tree.isReadable(handle: handle) {
            invalidate(node)
            dropped.append((node, handle))
        }
        readNodes.withLock { for (node, handle) in dropped where $0[node] == handle { $0[node] = nil } }
    }

    struct DirectoryListings {
        var open: [UInt64: OpenListing] = [:]
        var next: UInt64 = 1
    }

    /// An open directory: listed whole when opened (and again when a read starts over from
    /// the beginning, rewinddir), with whether a read has begun on it; or a generic service
    /// read in pages from the store as the reads come (`KeychainTree.listPage`), with only
    /// the names it listed as pending items kept.
    enum OpenListing {
        case whole(entries: [DirectoryEntry], read: Bool)
        case paged(TreeLocation, listedPending: Set<ExactName>)
    }

    /// What `ino` names, from the inode table's parsed locations: no path string is built or
    /// parsed (`InodeTable.location`).
    func location(_ ino: UInt64) throws(FileSystemError) -> TreeLocation {
        guard let location = inodes.withLock({ $0.location(ino) }) else { throw .notFound }
        return location
    }

    /// What `ino` names, or for an inode whose name a rename gave to another, what that name
    /// names now (`InodeTable.Node.replaced`): for an open or a stat that raced the rename.
    func locationOrReplaced(_ ino: UInt64) throws(FileSystemError) -> TreeLocation {
        guard let location = inodes.withLock({ $0.location(ino) ?? $0.replacedLocation(ino) }) else { throw .notFound }
        return location
    }

    /// How long the kernel may keep `ino`'s attributes, `stat`: none for an alias
    /// (`InodeTable.Node.alias`), whose changes it is never told of, nor for an open file whose
    /// item is gone: the kernel keeps one size per inode, and the copies of several such
    /// descriptors each have their own (a closed one's would stay shown, `KeychainTree.stat(anyOf:)`).
    func attrTimeout(_ ino: UInt64, _ stat: FileStat) -> Double {
        stat.links == 0 || inodes.withLock({ $0.isAlias(ino) }) ? 0 : FuseOperations.attrTimeout
    }

    /// What `name` names in the directory `parent`.
    func location(_ parent: UInt64, _ name: String) throws(FileSystemError) -> TreeLocation {
        try location(parent).child(name)
    }

    /// The open file the kernel names with a request on `ino`, if it is one of `ino`'s (an open
    /// directory's handle numbers a listing, not a file).
    func fileHandle(_ ino: UInt64, _ fi: UnsafeMutablePointer<fuse_file_info>?) -> UInt64? {
        guard let h = fi?.pointee.fh else { return nil }
        return inodes.withLock { $0.nodes[ino]?.handles.contains(h) ?? false } ? h : nil
    }

    /// An inode's attributes: from the handle the kernel names (ftruncate, lseek), else from
    /// its path, else, once its name is gone, from a handle still open on it (fstat).
    func stat(_ ino: UInt64, handle: UInt64?) throws(FileSystemError) -> FileStat {
        if let handle { return try tree.stat(handle: handle) }
        let location: TreeLocation?
        do { location = try self.location(ino) } catch {
            guard error == .notFound else { throw error }
            location = nil
        }
        if let location {
            do { return try tree.stat(location) } catch {
                // Deleted behind the kernel's back (through the CLI) while open.
                guard error == .notFound else { throw error }
            }
        }
        let open = inodes.withLock { $0.handles(ino) }
        if open.isEmpty, let replaced = inodes.withLock({ $0.replacedLocation(ino) }) { return try tree.stat(replaced) }
        return try tree.stat(anyOf: open)
    }

    /// Opens a listing of `ino`: a generic service's is read in pages as the reads come, any
    /// other directory's whole now.
    /// The open directory's handle, and whether it is a service directory (paged, and kept by
    /// the kernel: `FuseOperations.opendir`).
    func openListing(_ ino: UInt64) throws(FileSystemError) -> (handle: UInt64, isService: Bool) {
        let location = try location(ino)
        let listing: OpenListing
        let isService: Bool
        if case .service = location {
            _ = try tree.stat(location)
            listing = .paged(location, listedPending: [])
            isService = true
        } else {
            listing = .whole(entries: try wholeListing(location), read: false)
            isService = false
        }
        let handle = listings.withLock { l in
            let id = l.next
            l.next += 1
            l.open[id] = listing
            return id
        }
        return (handle, isService)
    }

    private func wholeListing(_ location: TreeLocation) throws(FileSystemError) -> [DirectoryEntry] {
        [DirectoryEntry(name: ".", isDirectory: true), DirectoryEntry(name: "..", isDirectory: true)]
            + (try tree.list(location))
    }

    /// Up to about `limit` entries of the open directory `id` after `offset`, each with the
    /// offset that resumes after it; empty at the end. A whole listing's offsets are
    /// positions in it; a paged one's are the tree's cursors (`KeychainTree.ListingOffset`).
    func entries(_ id: UInt64, of ino: UInt64, after offset: Int64, limit: Int) throws(FileSystemError) -> [KeychainTree.ListedEntry] {
        guard let listing = listings.withLock({ $0.open[id] }) else { throw .badHandle }
        switch listing {
        case .whole(var entries, let read):
            if offset > 0 || !read {
                if !read { listings.withLock { $0.open[id] = .whole(entries: entries, read: true) } }
            } else {
                entries = try wholeListing(try location(ino))
                listings.withLock { $0.open[id] = .whole(entries: entries, read: true) }
            }
            let start = Int(clamping: max(offset, 0))
            guard start < entries.count else { return [] }
            return entries[start..<min(entries.count, start + limit)].enumerated().map { i, e in
                KeychainTree.ListedEntry(entry: e, offset: Int64(start + i + 1))
            }
        case .paged(let location, var listedPending):
            if offset == 0, !listedPending.isEmpty {
                listedPending = []
                listings.withLock { $0.open[id] = .paged(location, listedPending: []) }
            }
            return try tree.listPage(location, after: offset, listedPending: listedPending, limit: limit) ?? []
        }
    }

    /// A pending item's name was given to the kernel from the paged listing `id`: if it is
    /// committed before the listing ends, its stored row is not listed again.
    func listedPending(_ id: UInt64, _ name: String) {
        listings.withLock { l in
            guard case .paged(let location, var names) = l.open[id] else { return }
            names.insert(name.exact)
            l.open[id] = .paged(location, listedPending: names)
        }
    }

    func closeListing(_ id: UInt64) { _ = listings.withLock { $0.open.removeValue(forKey: id) } }
}
