import Foundation
import KeychainAccess
import KeychainCrypto
import KeychainModel
import KeychainStore
import Synchronization

/// What `stat` reports for a path or an open file. `modified` is its mtime and ctime.
package struct FileStat: Equatable, Sendable {
    package var isDirectory: Bool
    package var size: Int
    package var mode: UInt32
    package var modified: Date
    /// 1 for an item, 0 for an open file whose item is gone; 2 plus its subdirectories for a directory.
    package var links: Int

    static func file(size: Int, modified: Date, links: Int = 1) -> FileStat {
        FileStat(isDirectory: false, size: size, mode: 0o100600, modified: modified, links: links)
    }

    static func directory(modified: Date, subdirectories: Int) -> FileStat {
        FileStat(isDirectory: true, size: 0, mode: 0o040700, modified: modified, links: 2 + subdirectories)
    }
}

package struct DirectoryEntry: Equatable, Sendable {
    package var name: String
    package var isDirectory: Bool

    package init(name: String, isDirectory: Bool) {
        self.name = name
        self.isDirectory = isDirectory
    }
}

/// The filesystem semantics of the mount, in plain Swift: path mapping, directories, open
/// files and their buffers, rename and attributes. The FUSE binding only translates C calls
/// into these methods and errors into errno.
///
/// Thread-safe. It holds no state of its own and cannot reach the store: its state is
/// `ServedKeychain`'s, and every change it makes is one of that owner's operations
/// (`ServedKeychain.ItemCommit`), the same the control socket's requests use.
package final class KeychainTree: Sendable {
    package let served: ServedKeychain
    package var defaultClass: AccessibilityClass { served.defaultClass }
    /// The store file the mount serves (the FUSE binding names it as the mount's source).
    package var storePath: String { served.storePath }

    package init(served: ServedKeychain) {
        self.served = served
    }

    package convenience init(keychain: Keychain, defaultClass: AccessibilityClass = .default, lockAfter: Int? = nil) throws {
        self.init(served: try ServedKeychain(keychain: keychain, defaultClass: defaultClass, lockAfter: lockAfter))
    }

    // MARK: lock state, all the owner's

    package func noteAccess() { served.noteAccess() }
    package var idleSeconds: Int64 { served.idleSeconds }
    package var lockAfter: Int? { served.lockAfter }
    package func setLockAfter(_ seconds: Int?) { served.setLockAfter(seconds) }
    package func lockIfIdle() { served.lockIfIdle() }
    package func lock() { served.lock(origin: .tree) }
    package func setAfterLock(_ hook: (@Sendable () -> Void)?) { served.setAfterLock(hook) }
    package func unlock(passphrase: SecureBytes?) throws { try served.unlock(passphrase: passphrase, origin: .tree) }
    package func forgetEverything() { served.forgetEverything() }

    // MARK: resolving paths

    enum Node {
        case root, internetRoot
        case service(String)
        case server(String)
        case port(String, UInt16)
        case pathDirectory(PathDirectory)
        case item(KeychainItem)
    }

    /// Finds what exists at `location`; ENOENT if nothing does.
    func node(_ location: TreeLocation, _ index: ItemIndex) throws(FileSystemError) -> Node {
        switch location {
        case .root: return .root
        case .internetRoot: return .internetRoot
        case .service(let s):
            guard index.services[s.exact] != nil else { throw .notFound }
            return .service(s)
        case .genericItem(let s, let a):
            guard let item = index.item(index.services[s.exact]?.accounts[a.exact]) else { throw .notFound }
            return .item(item)
        case .server(let s):
            guard index.servers[s.exact] != nil else { throw .notFound }
            return .server(s)
        case .port(let s, let p):
            guard index.servers[s.exact]?.ports[p] != nil else { throw .notFound }
            return .port(s, p)
        case .internetEntry(let s, let p, let parent, let name):
            guard let dir = index.directory(server: s, port: p, path: parent) else { throw .notFound }
            if InternetVariantName.markerRange(in: name) == nil, let segment = TreeName.unescape(name),
               let sub = dir.directories[segment.exact] {
                return .pathDirectory(sub)
            }
            guard let parsed = InternetVariantName.parse(name, port: p),
                  let item = index.item(dir.items[VariantKey(parsed)]) else { throw .notFound }
            return .item(item)
        }
    }

    func resolve(_ location: TreeLocation) throws(FileSystemError) -> (TreeLocation, Node) {
        let n = try served.covering(location) { s throws(FileSystemError) in try node(location, s.index) }
        return (location, n)
    }

    /// The primary key a file at `location` stands for (for create and rename).
    func itemKey(at location: TreeLocation) throws(FileSystemError) -> ItemKey {
        do {
            switch location {
            case .genericItem(let s, let a):
                return .generic(try GenericPasswordKey(service: s, account: a))
            case .internetEntry(let server, let port, let parent, let name):
                guard let v = InternetVariantName.parse(name, port: port) else { throw FileSystemError.invalid }
                return .internet(try InternetPasswordKey(server: server, port: port, path: parent.joined(separator: "/"),
                                                         protocol: v.protocol, authenticationType: v.authenticationType,
                                                         securityDomain: v.securityDomain, account: v.account))
            case .root, .internetRoot: throw FileSystemError.exists
            case .service, .server, .port: throw FileSystemError.notPermitted
            }
        } catch let e as ModelError {
            throw FileSystemError(e)
        } catch {
            throw FileSystemError.from(error)
        }
    }

    // MARK: metadata

    package func stat(_ path: String) throws(FileSystemError) -> FileStat {
        try stat(try TreeLocation.parse(path))
    }

    /// `stat` of a path already parsed (the FUSE binding keeps each inode's).
    package func stat(_ location: TreeLocation) throws(FileSystemError) -> FileStat {
        try served.covering(location) { s throws(FileSystemError) in
            let n = try node(location, s.index)
            guard case .item(let item) = n else { return Self.directoryStat(n, s.index) }
            return Self.itemStat(item, s)
        }
    }

    /// fstat(2) of an open file. While its item exists, what `stat` of its path says, but with
    /// this handle's own pending size and time; once the item is deleted or replaced, the
    /// handle's copy, with no links, as an unlinked regular file that is still open.
    package func stat(handle: UInt64) throws(FileSystemError) -> FileStat {
        try served.state.withLock { s throws(FileSystemError) in
            guard let f = s.files[handle] else { throw .badHandle }
            let linked = s.index.item(f.itemID)
            if f.isPending || linked == nil {
                return .file(size: f.buffer.count, modified: f.modified, links: linked == nil ? 0 : 1)
            }
            return Self.itemStat(linked!, s)
        }
    }

    /// fstat(2) of an inode whose name is gone, when the kernel names no handle: of the
    /// handles open on it, the one with the latest pending change (as `stat` of a path shows
    /// one), else any.
    package func stat(anyOf handles: [UInt64]) throws(FileSystemError) -> FileStat {
        let chosen = served.state.withLock { s -> UInt64? in
            let open = handles.compactMap { h in s.files[h].map { (handle: h, file: $0) } }
            let pending = open.filter { $0.file.isPending }.max { $0.file.modified < $1.file.modified }
            return (pending ?? open.first)?.handle
        }
        guard let chosen else { throw .notFound }
        return try stat(handle: chosen)
    }

    /// An item's size is that of its stored secret, or of an open copy being written, so
    /// that `stat` during a copy does not report (and the kernel cache) a stale size or time.
    static func itemStat(_ item: KeychainItem, _ s: ServedKeychain.State) -> FileStat {
        itemStat(item, openFiles: s.files)
    }

    /// `itemStat` with the open files alone: a listing takes a page's attributes in one hold
    /// of `state`, and passing the whole state per entry copied it each time.
    static func itemStat(_ item: KeychainItem, openFiles: [UInt64: OpenFile]) -> FileStat {
        if !openFiles.isEmpty, let pending = openFiles.values.first(where: { $0.itemID == item.id && $0.isPending }) {
            return .file(size: pending.buffer.count, modified: pending.modified)
        }
        // A damaged row shorter than a seal is size 0, not a negative size the kernel turns into EIO.
        return .file(size: max(item.sealedSecretCount - AESGCM.overhead, 0), modified: item.record.attributes.modified)
    }

    static func directoryStat(_ n: Node, _ index: ItemIndex) -> FileStat {
        switch n {
        case .root: .directory(modified: index.rootModified, subdirectories: 1 + index.services.count)
        case .internetRoot: .directory(modified: index.internetModified, subdirectories: index.servers.count)
        case .service(let name): .directory(modified: index.services[name.exact]?.modified ?? index.rootModified, subdirectories: 0)
        case .server(let name):
            .directory(modified: index.servers[name.exact]?.modified ?? index.internetModified,
                       subdirectories: index.servers[name.exact]?.ports.count ?? 0)
        case .port(let server, let port):
            index.servers[server.exact]?.ports[port].map { .directory(modified: $0.modified, subdirectories: $0.directories.count) }
                ?? .directory(modified: index.internetModified, subdirectories: 0)
        case .pathDirectory(let dir): .directory(modified: dir.modified, subdirectories: dir.directories.count)
        case .item: .file(size: 0, modified: index.rootModified)
        }
    }

    /// lseek(2) with SEEK_DATA or SEEK_HOLE: a secret has no holes, so its data runs from any
    /// offset inside it to its end, where the one hole starts. Past the end: ENXIO.
    package func seek(handle: UInt64, offset: Int, whence: Int32) throws(FileSystemError) -> Int {
        let size = try stat(handle: handle).size
        guard whence == Self.seekData || whence == Self.seekHole else { throw .invalid }
        guard offset >= 0, offset < size else { throw FileSystemError(ENXIO) }
        return whence == Self.seekData ? offset : size
    }

    // From <unistd.h> with _GNU_SOURCE, which Glibc does not export to Swift.
    package static let seekData: Int32 = 3
    package static let seekHole: Int32 = 4

    package func list(_ path: String) throws(FileSystemError) -> [DirectoryEntry] {
        try list(try TreeLocation.parse(path))
    }

    package func list(_ location: TreeLocation) throws(FileSystemError) -> [DirectoryEntry] {
        try served.covering(location, listing: true) { s throws(FileSystemError) in
            let index = s.index
            switch try node(location, index) {
            case .root:
                return [DirectoryEntry(name: TreeLocation.internetName, isDirectory: true)]
                    + index.services.keys.sorted().map { DirectoryEntry(name: TreeLocation.serviceFileName($0.text), isDirectory: true) }
            case .internetRoot:
                return index.servers.keys.sorted().map { DirectoryEntry(name: TreeName.escape($0.text), isDirectory: true) }
            case .service(let svc):
                return (index.services[svc.exact]?.accounts ?? [:]).keys.sorted().map { DirectoryEntry(name: TreeName.escape($0.text), isDirectory: false) }
            case .server(let server):
                return (index.servers[server.exact]?.ports ?? [:]).keys.sorted().map { DirectoryEntry(name: String($0), isDirectory: true) }
            case .port(let server, let port):
                return Self.entries(of: index.servers[server.exact]!.ports[port]!, index)
            case .pathDirectory(let dir):
                return Self.entries(of: dir, index)
            case .item:
                throw .notDirectory
            }
        }
    }

    /// A generic service's directory listed in pages (`listPage`), each entry with the offset
    /// that resumes after it: "." 1 and ".." 2, then the pending items (`pendingBase` plus
    /// the negated id), then the stored ones in id order (`storedBase` plus the id), read
    /// from the store a page at a time. No listing holds the directory's names: the offset
    /// is the cursor, and ids never change nor come back (`Keychain.groupPage`), so an entry
    /// that exists throughout a listing is listed once whatever is created or deleted
    /// meanwhile. A pending item committed after it was listed is stored under a new id: the
    /// caller passes the names it listed as pending, which are then not listed again.
    package enum ListingOffset {
        package static let storedBase: Int64 = 1 << 61
        package static let pendingBase: Int64 = 1 << 62
    }

    /// An entry of a listing read in pages, with the offset that resumes after it.
    package struct ListedEntry: Equatable, Sendable {
        package var entry: DirectoryEntry
        package var offset: Int64
        /// Listed as a pending item: the caller passes it to later pages in `listedPending`.
        package var isPending = false
        /// What `stat` of the entry gives, when the page could tell without resolving its name
        /// again (`ServedKeychain.servicePage`); else nil, and the caller stats it by name.
        package var stat: FileStat?

        package init(entry: DirectoryEntry, offset: Int64, isPending: Bool = false, stat: FileStat? = nil) {
            self.entry = entry; self.offset = offset; self.isPending = isPending; self.stat = stat
        }
    }

    /// Up to about `limit` entries of `location` after `offset` (`ListingOffset`), empty at
    /// the end; nil when `location` is not listed in pages (only a generic service's
    /// directory is, the one kind that grows to 100,000 entries), so `list` lists it whole.
    package func listPage(_ location: TreeLocation, after offset: Int64, listedPending: Set<ExactName>,
                          limit: Int) throws(FileSystemError) -> [ListedEntry]? {
        guard case .service(let service) = location else { return nil }
        try served.covering(location) { s throws(FileSystemError) in _ = try node(location, s.index) }
        var out: [ListedEntry] = []
        if offset < 1 { out.append(ListedEntry(entry: DirectoryEntry(name: ".", isDirectory: true), offset: 1)) }
        if offset < 2 { out.append(ListedEntry(entry: DirectoryEntry(name: "..", isDirectory: true), offset: 2)) }
        var after: Int64 = 0
        // Also those listed as pending by this call: one committed since is in the store now.
        var listedPending = listedPending
        if offset < ListingOffset.storedBase || offset >= ListingOffset.pendingBase {
            let listed = offset >= ListingOffset.pendingBase ? offset - ListingOffset.pendingBase : 0
            for item in served.pendingItems(service: service) where -item.id > listed {
                guard case .generic(let g) = item.key else { continue }
                let name = TreeName.escape(g.account)
                listedPending.insert(name.exact)
                out.append(ListedEntry(entry: DirectoryEntry(name: name, isDirectory: false),
                                       offset: ListingOffset.pendingBase - item.id, isPending: true))
            }
        } else {
            after = offset - ListingOffset.storedBase
        }
        // Rows that are unreadable now, or of another access group, list nothing: read on
        // until something is listed or the store has no more.
        while out.count < limit {
            let page = try served.servicePage(service, after: after, limit: max(limit - out.count, 8))
            for e in page.entries {
                let name = TreeName.escape(e.account)
                if !listedPending.isEmpty, listedPending.contains(name.exact) { continue }
                out.append(ListedEntry(entry: DirectoryEntry(name: name, isDirectory: false),
                                       offset: ListingOffset.storedBase + e.id, stat: e.stat))
            }
            guard let next = page.next else { break }
            after = next
            if !out.isEmpty { break }
        }
        return out
    }

    /// A path directory's entries: sub-directories by name, items by their variant name,
    /// except that an item whose plain name a directory holds is listed by its tagged name.
    static func entries(of dir: PathDirectory, _ index: ItemIndex) -> [DirectoryEntry] {
        var out = dir.directories.keys.sorted().map { DirectoryEntry(name: TreeName.escape($0.text), isDirectory: true) }
        let dirNames = Set(dir.directories.keys.map { TreeName.escape($0.text).exact })
        for id in dir.items.values {
            guard let item = index.item(id), case .internet(let key) = item.key else { continue }
            var name = InternetVariantName.fileName(for: key)
            if dirNames.contains(name.exact) { name = InternetVariantName.taggedFileName(for: key) }
            out.append(DirectoryEntry(name: name, isDirectory: false))
        }
        return out.sorted { $0.name.exact < $1.name.exact }
    }

    // MARK: directories

    package func makeDirectory(_ path: String) throws(FileSystemError) {
        try makeDirectory(try TreeLocation.parse(path))
    }

    package func makeDirectory(_ location: TreeLocation) throws(FileSystemError) {
        try served.covering(location) { s throws(FileSystemError) in
            if (try? node(location, s.index)) != nil { throw .exists }
            try Self.checkNewDirectory(location, s.index)
            if case .service(let name) = location {
                s.index.makeEmptyService(name, now: Date())
            } else {
                Self.addDirectory(location, &s.index, now: Date())
            }
        }
    }

    package func removeDirectory(_ path: String) throws(FileSystemError) {
        try removeDirectory(try TreeLocation.parse(path))
    }

    package func removeDirectory(_ location: TreeLocation) throws(FileSystemError) {
        try served.covering(location, listing: true) { s throws(FileSystemError) in
            let n = try node(location, s.index)
            switch n {
            case .root, .internetRoot: throw .notPermitted
            case .item: throw .notDirectory
            default:
                guard Self.isEmptyDirectory(n, s.index) else { throw .notEmpty }
                Self.dropDirectory(location, &s.index, now: Date())
            }
        }
    }

    /// Whether mkdir may make a directory at `location` (its parent exists, its name is one).
    private static func checkNewDirectory(_ location: TreeLocation, _ index: ItemIndex) throws(FileSystemError) {
        switch location {
        case .root, .internetRoot: throw .exists
        case .service(let name), .server(let name):
            guard !name.isEmpty else { throw .invalid }
        case .genericItem: throw .notPermitted
        case .port(let server, _):
            guard index.servers[server.exact] != nil else { throw .notFound }
        case .internetEntry(let server, let port, let parent, let name):
            guard InternetVariantName.markerRange(in: name) == nil else { throw .invalid }
            _ = try TreeLocation.segment(name)
            guard index.directory(server: server, port: port, path: parent) != nil else { throw .notFound }
        }
    }

    /// Makes the directory at `location`, once `checkNewDirectory` allowed it.
    private static func addDirectory(_ location: TreeLocation, _ index: inout ItemIndex, now: Date) {
        switch location {
        case .service(let name): index.makeService(name, now: now)
        case .server(let name): index.makeServer(name, now: now)
        case .port(let server, let port): index.makeDirectory(server: server, port: port, path: [], now: now)
        case .internetEntry(let server, let port, let parent, let name):
            guard let segment = TreeName.unescape(name) else { return }
            index.makeDirectory(server: server, port: port, path: parent + [segment], now: now)
        case .root, .internetRoot, .genericItem: return
        }
    }

    /// Removes the (empty) directory at `location`.
    private static func dropDirectory(_ location: TreeLocation, _ index: inout ItemIndex, now: Date) {
        switch location {
        case .service(let name): index.removeService(name, now: now)
        case .server(let name): index.removeServer(name, now: now)
        case .port(let server, let port): index.removePort(server: server, port: port, now: now)
        case .internetEntry(let server, let port, let parent, let name):
            guard let segment = TreeName.unescape(name) else { return }
            index.removePathDirectory(server: server, port: port, parent: parent, segment: segment, now: now)
        case .root, .internetRoot, .genericItem: return
        }
    }

    static func isEmptyDirectory(_ n: Node, _ index: ItemIndex) -> Bool {
        switch n {
        case .root, .item: false
        case .internetRoot: index.servers.isEmpty
        case .service(let name): index.services[name.exact]?.accounts.isEmpty ?? true
        case .server(let name): index.servers[name.exact]?.ports.isEmpty ?? true
        case .port(let server, let port): index.servers[server.exact]?.ports[port]?.isEmpty ?? true
        case .pathDirectory(let dir): dir.isEmpty
        }
    }

    // MARK: items

    // MARK: per-program access

    static let untold = AccessCaller.unidentified("a caller the tree was not told")

    static func isGuarded(_ item: KeychainItem) -> Bool {
        !(item.record.attributes.values.access?.isAnyProgram ?? true)
    }

    /// Decides, outside every lock (the user may be asked), whether `caller` may `operation`
    /// the item at `location`, if one with a non-empty list is there; returns that item as it
    /// is after the decision (an Always allow changed its list), for `checkDecided`.
    func authorizeItem(at location: TreeLocation, _ caller: AccessCaller,
                       _ operation: AccessOperation) throws(FileSystemError) -> KeychainItem? {
        func lookUp() -> KeychainItem? {
            (try? served.covering(location) { s throws(FileSystemError) -> KeychainItem? in
                guard case .item(let item) = try node(location, s.index) else { return nil }
                return item
            }) ?? nil
        }
        guard let item = lookUp(), Self.isGuarded(item) else { return nil }
        do { try served.authorize(caller, item, operation) } catch { throw .from(error) }
        return lookUp()
    }

    /// Inside the change: a guarded item must be the very version decided on, not one that
    /// took its name or changed meanwhile.
    static func checkDecided(_ item: KeychainItem, _ decided: [KeychainItem?]) throws(FileSystemError) {
        guard isGuarded(item) else { return }
        guard decided.contains(where: { $0?.id == item.id && $0?.sealed.version == item.sealed.version }) else {
            throw .from(KeychainError.accessDenied("the item changed while access to it was decided; try again"))
        }
    }

    package func remove(_ path: String) throws(FileSystemError) {
        try remove(try TreeLocation.parse(path))
    }

    /// unlink(2): an item with a non-empty list is deleted only by a program on it.
    package func remove(_ location: TreeLocation, caller: AccessCaller = untold) throws(FileSystemError) {
        let decided = try authorizeItem(at: location, caller, .delete)
        try served.change(origin: .tree) { c throws(FileSystemError) -> Void in
            let item = try c.covering(location) { s throws(FileSystemError) -> KeychainItem in
                guard case .item(let item) = try node(location, s.index) else { throw .isDirectory }
                return item
            }
            try Self.checkDecided(item, [decided])
            do { try c.delete([item]) } catch { throw .from(error) }
        }
    }

    /// Stores a pending item (empty; its writer's close stores the rest), so that a rename can
    /// move it or replace it in the store.
    private func storePending(_ item: KeychainItem, _ c: ServedKeychain.ItemCommit) throws(FileSystemError) -> KeychainItem {
        guard item.isPending else { return item }
        do { return try c.store(pending: item, as: item.record, secret: SecureBytes()) } catch { throw .from(error) }
    }

    /// Moves or renames an item. Onto an existing item it replaces that item's secret in one
    /// transaction, keeping the target's attributes.
    /// Directories: see `renameDirectory`.
    package func rename(_ from: String, to: String, noReplace: Bool, exchange: Bool) throws(FileSystemError) {
        try rename(try TreeLocation.parse(from), to: try TreeLocation.parse(to), noReplace: noReplace, exchange: exchange)
    }

    /// rename(2): an item with a non-empty list is neither moved nor replaced but by a program
    /// on it.
    package func rename(_ src: TreeLocation, to dst: TreeLocation, noReplace: Bool, exchange: Bool,
                        caller: AccessCaller = untold) throws(FileSystemError) {
        guard !exchange else { throw .invalid }
        let decided = [try authorizeItem(at: src, caller, .rename), try authorizeItem(at: dst, caller, .rename)]
        try served.change(origin: .tree) { c throws(FileSystemError) -> Void in
            let (source, target) = try c.covering(src, dst) { s throws(FileSystemError) -> (Node, Node?) in
                (try node(src, s.index), try? node(dst, s.index))
            }
            guard case .item(var item) = source else {
                // A service the index does not hold whole may have items in the store: under
                // `committing`, none comes or goes before the rename below.
                var stored: Set<ExactName> = []
                for case .service(let name) in [src, dst] where c.mayHoldUnseen(name) && served.storeShowsService(name) {
                    stored.insert(name.exact)
                }
                // Directories change only in the index: resolved again in the same section.
                try served.state.withLock { s throws(FileSystemError) in
                    guard src != dst else { return }
                    try renameDirectory(try node(src, s.index), src, dst, target: try? node(dst, s.index),
                                        noReplace: noReplace, storeHolds: stored, &s.index)
                }
                return
            }
            try Self.checkDecided(item, decided)
            if case .item(let existing)? = target {
                guard existing.id != item.id else { return }
                if noReplace { throw .exists }
                try Self.checkDecided(existing, decided)
            } else if target != nil {
                throw .isDirectory
            }
            let newKey = try itemKey(at: dst)
            guard newKey.kind == item.key.kind else { throw .crossDevice }
            var replaced: KeychainItem?
            if case .item(let existing)? = target { replaced = try storePending(existing, c) }
            if item.isPending && replaced == nil {
                // Only its name changes: it is still stored in one commit, under the new one.
                var record = item.record
                record.key = newKey
                served.state.withLock { $0.changedPending(KeychainItem(pending: record, id: item.id)) }
                return
            }
            item = try storePending(item, c)
            // Onto an existing item, the secret moves but the target keeps its attributes and
            // class: editors save through a temporary file, and a save must not weaken an item.
            var record = replaced?.record ?? item.record
            record.key = newKey
            do { _ = try c.move(item, to: record, replacing: replaced) } catch { throw .from(error) }
        }
    }

    /// A directory moves only while empty (nothing is stored for it, so that is all a move
    /// is); a non-empty one answers EXDEV, so `mv` copies it item by item. Onto an existing
    /// directory, as rename(2): an empty one is replaced, a non-empty one is ENOTEMPTY.
    /// `storeHolds`: services the store shows an item of that the index may not hold.
    private func renameDirectory(_ source: Node, _ src: TreeLocation, _ dst: TreeLocation, target: Node?,
                                 noReplace: Bool, storeHolds: Set<ExactName>, _ index: inout ItemIndex) throws(FileSystemError) {
        func isEmpty(_ n: Node) -> Bool {
            if case .service(let name) = n, storeHolds.contains(name.exact) { return false }
            return Self.isEmptyDirectory(n, index)
        }
        for n in [source, target] {
            switch n {
            case .root?: throw FileSystemError(EBUSY)
            case .internetRoot?: throw .notPermitted
            default: continue
            }
        }
        if let target {
            if case .item = target { throw .notDirectory }
            if noReplace { throw .exists }
            guard isEmpty(target) else { throw .notEmpty }
        }
        guard isEmpty(source) else { throw .crossDevice }
        guard !Self.isInside(dst, src) else { throw .invalid }
        if target == nil { try Self.checkNewDirectory(dst, index) }
        let now = Date()
        if target != nil { Self.dropDirectory(dst, &index, now: now) }
        Self.dropDirectory(src, &index, now: now)
        Self.addDirectory(dst, &index, now: now)
    }

    /// Whether `inner` lies below `outer` (a directory cannot move into itself).
    static func isInside(_ inner: TreeLocation, _ outer: TreeLocation) -> Bool {
        let a = components(inner), b = components(outer)
        return a.count > b.count && zip(a, b).allSatisfy { $0.isSame(as: $1) }
    }

    /// A location as decoded names from the root, with the internet root apart from a service
    /// of that name.
    private static func components(_ location: TreeLocation) -> [String] {
        switch location {
        case .root: []
        case .internetRoot: ["/internet"]
        case .service(let s): [s]
        case .genericItem(let s, let a): [s, a]
        case .server(let s): ["/internet", s]
        case .port(let s, let p): ["/internet", s, String(p)]
        case .internetEntry(let s, let p, let parent, let name):
            ["/internet", s, String(p)] + parent + [TreeName.unescape(name) ?? name]
        }
    }
}
