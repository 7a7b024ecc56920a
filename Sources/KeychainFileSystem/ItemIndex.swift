import Foundation
import KeychainModel
import KeychainStore

/// Identifies one internet password among those in the same directory; byte-exact (`ExactName`).
struct VariantKey: Hashable {
    var account: String
    var `protocol`: InternetProtocol
    var authenticationType: AuthenticationType
    var securityDomain: String

    static func == (a: Self, b: Self) -> Bool {
        a.protocol == b.protocol && a.authenticationType == b.authenticationType
            && a.account.isSame(as: b.account) && a.securityDomain.isSame(as: b.securityDomain)
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(`protocol`); hasher.combine(authenticationType)
        ExactName.hash(account, into: &hasher); ExactName.hash(securityDomain, into: &hasher)
    }

    init(_ k: InternetPasswordKey) {
        account = k.account; `protocol` = k.protocol; authenticationType = k.authenticationType; securityDomain = k.securityDomain
    }

    init(_ p: InternetVariantName.Parsed) {
        account = p.account; `protocol` = p.protocol; authenticationType = p.authenticationType; securityDomain = p.securityDomain
    }
}

/// A port directory or a directory below one: path segments and the items whose path ends here.
// @unchecked Sendable because it is only reached through `ServedKeychain.state`, under its mutex.
final class PathDirectory: @unchecked Sendable {
    var directories: [ExactName: PathDirectory] = [:]
    var items: [VariantKey: Int64] = [:]
    /// When an entry was last added or removed (or the directory made): its mtime and ctime.
    var modified: Date
    var isEmpty: Bool { directories.isEmpty && items.isEmpty }
    init(modified: Date) { self.modified = modified }
}

/// A generic service's directory: its accounts, and when one was last added or removed.
struct ServiceDirectory {
    var accounts: [ExactName: Int64] = [:]
    var modified: Date
}

/// An internet server's directory: its ports, and when one was last added or removed.
struct ServerDirectory {
    var ports: [UInt16: PathDirectory] = [:]
    var modified: Date
}

/// One read that fills the index from the store (`ItemIndex.missing`).
enum IndexFill: Equatable {
    /// The root's and `/internet`'s names.
    case names
    /// A group read whole.
    case group(ItemGroup)
    /// One item by its key.
    case item(ItemKey)
    /// Whether a group's directory exists.
    case shown(ItemGroup)
}

/// A service's or server's items: the unit of one `Keychain.groupSummaries` query.
struct ItemGroup: Hashable {
    var kind: ItemKind
    var name: String

    init(kind: ItemKind, name: String) { self.kind = kind; self.name = name }

    /// Byte-exact (`ExactName`).
    static func == (a: Self, b: Self) -> Bool { a.kind == b.kind && a.name.isSame(as: b.name) }

    func hash(into hasher: inout Hasher) { hasher.combine(kind); ExactName.hash(name, into: &hasher) }

    init(_ key: ItemKey) {
        switch key {
        case .generic(let g): self.init(kind: .generic, name: g.service)
        case .internet(let i): self.init(kind: .internet, name: i.server)
        }
    }
}

/// The items the mount has looked up so far (summaries: no sealed blobs), by id and by primary
/// key, and the tree the mount shows, kept in memory so that a file operation on a known
/// name runs no SQL and decrypts nothing. It is a bounded cache of the store, not a copy:
/// an item is read when first looked up, a group whole when first listed (`complete`), the
/// root's names when first listed (`namesListed`), and the least recently used items go
/// (`evict`) except those with open files. Directories persist once made (by an item or by
/// mkdir) until rmdir or unmount, so `rm -r` can remove a directory whose last item it just
/// deleted; eviction leaves them. Directories are not stored, so their times live here:
/// made, or an entry added or removed, sets a directory's time to now; one first read from
/// the store has the time of the mount.
/// Not thread-safe; `ServedKeychain` guards it.
struct ItemIndex {
    private(set) var items: [Int64: KeychainItem] = [:]
    private(set) var ids: [ItemKey: Int64] = [:]
    private(set) var services: [ExactName: ServiceDirectory] = [:]
    private(set) var servers: [ExactName: ServerDirectory] = [:]
    private(set) var rootModified: Date
    private(set) var internetModified: Date
    /// Groups whose every item readable now is in `items`: their directories list from memory.
    private(set) var complete: Set<ItemGroup> = []
    /// Every group with a readable item of the default access group has its directory here.
    private(set) var namesListed = false
    /// Keys looked up and found in no row of the store: until a change puts one in `items`
    /// (every change goes through the owner, `ServedKeychain`), asking again needs no SQL.
    /// A shell loop creating new names looks each up before its create: without this, both
    /// would read the store. Forgotten with completeness, and whole past the index's limit.
    private(set) var absent: Set<ItemKey> = []
    /// The pending items (`KeychainItem.isPending`): not in the store until their first commit.
    private(set) var pending: Set<Int64> = []
    /// The classes of every row of a generic service in the store, readable now or not
    /// (`Keychain.groupClasses`), as a create there last read them: a shell loop creating
    /// names in one directory reads them once (`ServedKeychain.newItemClass`). Each change
    /// through the owner drops the services it touched, but for a create's own row, whose
    /// class is added (`storedClassesChanged`). The commit of a create reads them again in
    /// its own transaction all the same; a stale set could only show a pending file a class
    /// other than the one it will be stored with.
    private(set) var storedClasses: [ExactName: Set<AccessibilityClass>] = [:]
    private let mounted: Date
    /// Use order for eviction: an item's last use, from a counter.
    private var used: [Int64: UInt64] = [:]
    private var clock: UInt64 = 0

    init(now: Date = Date()) {
        rootModified = now
        internetModified = now
        mounted = now
    }

    /// Only the default access group is shown in the tree; the others are only in `items`.
    static func isShown(_ key: ItemKey) -> Bool { key.accessGroup.isEmpty }

    /// Adds or replaces an item changed by this mount: its directory's time becomes `now`.
    mutating func insert(_ item: KeychainItem, now: Date = Date()) {
        place(item.summary, now: now)
    }

    /// Adds an item read from the store, as it was there before: no directory time changes.
    mutating func install(_ item: KeychainItem) {
        place(item.summary, now: nil)
    }

    private mutating func place(_ item: KeychainItem, now: Date?) {
        clock += 1
        used[item.id] = clock
        absent.remove(item.key)
        if let old = items[item.id] {
            // Same key, same name: the directory's entries do not change, nor its times.
            if old.key == item.key {
                items[item.id] = item
                ids[item.key] = item.id
                return
            }
            remove(id: item.id, now: now)
        }
        // After the removal of any earlier version, which drops the id from `pending`.
        if item.isPending { pending.insert(item.id) }
        used[item.id] = clock
        items[item.id] = item
        ids[item.key] = item.id
        guard Self.isShown(item.key) else { return }
        switch item.key {
        case .generic(let g):
            makeService(g.service, now: now)
            services[g.service.exact]!.accounts[g.account.exact] = item.id
            if let now { services[g.service.exact]!.modified = now }
        case .internet(let i):
            let dir = makeDirectory(server: i.server, port: i.port, path: InternetPath.segments(i.path), now: now)
            dir.items[VariantKey(i)] = item.id
            if let now { dir.modified = now }
        }
    }

    /// Removes the item, and its name unless that already stands for another item (a pending
    /// one's name taken by an item the control socket stored). `now` nil (eviction): no
    /// directory time changes.
    mutating func remove(id: Int64, now: Date? = Date()) {
        used[id] = nil
        pending.remove(id)
        guard let old = items.removeValue(forKey: id) else { return }
        if ids[old.key] == id { ids[old.key] = nil }
        guard Self.isShown(old.key), entry(old.key) == id else { return }
        switch old.key {
        case .generic(let g):
            services[g.service.exact]!.accounts[g.account.exact] = nil
            if let now { services[g.service.exact]!.modified = now }
        case .internet(let i):
            let dir = directory(server: i.server, port: i.port, path: InternetPath.segments(i.path))!
            dir.items[VariantKey(i)] = nil
            if let now { dir.modified = now }
        }
    }

    /// A pending item (`KeychainItem.isPending`) is now stored as `item`: its name stands for
    /// the stored id, and no directory's entries or times change.
    mutating func store(pending id: Int64, as item: KeychainItem, now: Date = Date()) {
        guard let old = items[id], old.key == item.key, !Self.isShown(item.key) || entry(item.key) == id else {
            remove(id: id, now: now)
            insert(item, now: now)
            return
        }
        items[id] = nil
        used[id] = nil
        pending.remove(id)
        clock += 1
        used[item.id] = clock
        items[item.id] = item.summary
        ids[item.key] = item.id
        guard Self.isShown(item.key) else { return }
        switch item.key {
        case .generic(let g): services[g.service.exact]!.accounts[g.account.exact] = item.id
        case .internet(let i): directory(server: i.server, port: i.port, path: InternetPath.segments(i.path))!.items[VariantKey(i)] = item.id
        }
    }

    /// The id a shown name stands for in its directory.
    private func entry(_ key: ItemKey) -> Int64? {
        switch key {
        case .generic(let g): services[g.service.exact]?.accounts[g.account.exact]
        case .internet(let i): directory(server: i.server, port: i.port, path: InternetPath.segments(i.path))?.items[VariantKey(i)]
        }
    }

    mutating func removeAll() {
        items = [:]; ids = [:]; services = [:]; servers = [:]; used = [:]
        complete = []; namesListed = false; absent = []; pending = []; storedClasses = [:]
    }

    // MARK: the cache

    /// A group read whole from the store: its items replace those held of it, except pending
    /// items, which are not in the store until their first commit.
    mutating func install(group: ItemGroup, _ found: [KeychainItem]) {
        let fresh = Set(found.map(\.id))
        for (id, item) in items where !item.isPending && ItemGroup(item.key) == group && !fresh.contains(id) {
            remove(id: id, now: nil)
        }
        for item in found { install(item) }
        complete.insert(group)
    }

    /// A group the store shows no item of (`IndexFill.shown`): the index holds every one (none).
    mutating func noteNoneShown(_ group: ItemGroup) {
        complete.insert(group)
    }

    /// A service directory mkdir made where none was: its `covering` found the store showing no
    /// item of it (`noteNoneShown`), or the root's names were read without it (`namesListed`),
    /// so the index holds every one (none), and a shell loop creating names in it looks none of
    /// them up in the store.
    mutating func makeEmptyService(_ name: String, now: Date) {
        makeService(name, now: now)
        complete.insert(ItemGroup(kind: .generic, name: name))
    }

    /// The root's names read from the store; directories already known stay as they are.
    mutating func install(services names: Set<ExactName>, servers serverNames: Set<ExactName>) {
        for name in names { makeService(name.text, now: nil) }
        for name in serverNames { makeServer(name.text, now: nil) }
        namesListed = true
    }

    /// Whether nothing is `missing` for `location`; the item found there, if any, is marked
    /// used (what eviction goes by). The names of a known item are hashed once, not twice.
    mutating func covers(_ location: TreeLocation, listing: Bool) -> Bool {
        if case .genericItem(let s, let a) = location, let id = services[s.exact]?.accounts[a.exact] {
            touch(id)
            return true
        }
        return missing(location, listing: listing).isEmpty
    }

    /// Marks an item used, so that eviction takes others first.
    mutating func touch(_ id: Int64?) {
        // One hash of the id, not two: every open and stat passes here.
        guard let id, let i = used.index(forKey: id) else { return }
        clock += 1
        used.values[i] = clock
    }

    /// The first unlock makes names of every class readable: what was read whole or listed
    /// before holds only the `always` classes, so it is read again when next asked for.
    mutating func forgetCompleteness() {
        complete = []
        namesListed = false
        absent = []
        storedClasses = [:]
    }

    /// `classes`, read from the store with no change put in since (`generation`); past
    /// `limit` services, the others are forgotten.
    mutating func noteStoredClasses(_ classes: Set<AccessibilityClass>, service: String, limit: Int) {
        if storedClasses.count >= limit { storedClasses.removeAll(keepingCapacity: true) }
        storedClasses[service.exact] = classes
    }

    /// A change committed: the services it touched are read again, but a new row of
    /// `added` class (a create's) joins what was read of its service.
    mutating func storedClassesChanged(_ change: ItemChange, added: AccessibilityClass? = nil) {
        guard !storedClasses.isEmpty else { return }
        func service(_ key: ItemKey) -> ExactName? {
            if case .generic(let g) = key { g.service.exact } else { nil }
        }
        switch change {
        case .added(let key):
            guard let s = service(key) else { return }
            if let added { storedClasses[s]?.insert(added) } else { storedClasses[s] = nil }
        case .removed(let key), .updated(let key):
            service(key).map { storedClasses[$0] = nil }
        case .moved(let from, let to):
            service(from).map { storedClasses[$0] = nil }
            service(to).map { storedClasses[$0] = nil }
        case .lockStateChanged:
            return
        }
    }

    /// `key` is in no row of the store (`absent`); past `limit` such keys, the others are forgotten.
    mutating func noteAbsent(_ key: ItemKey, limit: Int) {
        if absent.count >= limit { absent.removeAll(keepingCapacity: true) }
        absent.insert(key)
    }

    /// Past `limit` items, drops the least recently used down to three quarters of it, but
    /// none of `pinned` (items with open files) and no pending item (the index is the only
    /// place one is until its commit). Directories stay; the groups they were in are then
    /// no longer complete.
    mutating func evict(limit: Int, pinned: Set<Int64>) {
        guard items.count > limit else { return }
        let target = limit - limit / 4
        let order = used.filter { !pinned.contains($0.key) && items[$0.key]?.isPending != true }.sorted { $0.value < $1.value }
        for (id, _) in order.prefix(max(items.count - target, 0)) {
            if let item = items[id] { complete.remove(ItemGroup(item.key)) }
            remove(id: id, now: nil)
        }
    }

    /// What must be read from the store before `location` resolves from memory alone; empty
    /// when it does. `listing`: its directory's entries are wanted, not just whether it exists.
    func missing(_ location: TreeLocation, listing: Bool) -> [IndexFill] {
        func group(_ g: ItemGroup, known: Bool) -> [IndexFill] {
            complete.contains(g) || (namesListed && !known) ? [] : [.group(g)]
        }
        switch location {
        case .root, .internetRoot:
            return namesListed ? [] : [.names]
        case .service(let s):
            let g = ItemGroup(kind: .generic, name: s)
            if listing { return group(g, known: services[s.exact] != nil) }
            return services[s.exact] != nil || namesListed || complete.contains(g) ? [] : [.shown(g)]
        case .genericItem(let s, let a):
            // The common case first, with no key built: a name already in its directory.
            if services[s.exact]?.accounts[a.exact] != nil { return [] }
            let g = ItemGroup(kind: .generic, name: s)
            guard let key = try? ItemKey.generic(GenericPasswordKey(service: s, account: a)) else { return [] }
            if ids[key] != nil || absent.contains(key) || complete.contains(g) || (namesListed && services[s.exact] == nil) { return [] }
            return services[s.exact] != nil || namesListed ? [.item(key)] : [.item(key), .shown(g)]
        case .server(let s), .port(let s, _), .internetEntry(let s, _, _, _):
            return group(ItemGroup(kind: .internet, name: s), known: servers[s.exact] != nil)
        }
    }

    // MARK: directories

    mutating func makeService(_ name: String, now: Date? = Date()) {
        guard services[name.exact] == nil else { return }
        services[name.exact] = ServiceDirectory(modified: now ?? mounted)
        if let now { rootModified = now }
    }

    mutating func removeService(_ name: String, now: Date = Date()) {
        guard services.removeValue(forKey: name.exact) != nil else { return }
        rootModified = now
    }

    mutating func makeServer(_ name: String, now: Date? = Date()) {
        guard servers[name.exact] == nil else { return }
        servers[name.exact] = ServerDirectory(modified: now ?? mounted)
        if let now { internetModified = now }
    }
    mutating func removeServer(_ name: String, now: Date = Date()) {
        guard servers.removeValue(forKey: name.exact) != nil else { return }
        internetModified = now
    }

    mutating func removePort(server: String, port: UInt16, now: Date = Date()) {
        guard servers[server.exact]?.ports.removeValue(forKey: port) != nil else { return }
        servers[server.exact]!.modified = now
    }

    /// Removes the path directory `segment` below `server`/`port`/`parent`.
    mutating func removePathDirectory(server: String, port: UInt16, parent: [String], segment: String, now: Date = Date()) {
        guard let dir = directory(server: server, port: port, path: parent),
              dir.directories.removeValue(forKey: segment.exact) != nil else { return }
        dir.modified = now
    }

    /// The directory at `server`/`port`/`path`, made (with any missing parent) if need be.
    /// With `now` nil (read from the store), what it makes has the mount's time and its parents keep theirs.
    @discardableResult
    mutating func makeDirectory(server: String, port: UInt16, path: [String], now: Date? = Date()) -> PathDirectory {
        makeServer(server, now: now)
        var dir: PathDirectory
        if let existing = servers[server.exact]!.ports[port] {
            dir = existing
        } else {
            dir = PathDirectory(modified: now ?? mounted)
            servers[server.exact]!.ports[port] = dir
            if let now { servers[server.exact]!.modified = now }
        }
        for segment in path {
            if let next = dir.directories[segment.exact] { dir = next; continue }
            let next = PathDirectory(modified: now ?? mounted)
            dir.directories[segment.exact] = next
            if let now { dir.modified = now }
            dir = next
        }
        return dir
    }

    func directory(server: String, port: UInt16, path: [String]) -> PathDirectory? {
        guard var dir = servers[server.exact]?.ports[port] else { return nil }
        for segment in path {
            guard let next = dir.directories[segment.exact] else { return nil }
            dir = next
        }
        return dir
    }

    func item(_ id: Int64?) -> KeychainItem? { id.flatMap { items[$0] } }
}
