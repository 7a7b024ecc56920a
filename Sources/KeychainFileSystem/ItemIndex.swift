import Foundation
import KeychainModel
import KeychainStore

/// Identifies one internet password among those in the same directory.
struct VariantKey: Hashable {
    var account: String
    var `protocol`: InternetProtocol
    var authenticationType: AuthenticationType
    var securityDomain: String

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
    var directories: [String: PathDirectory] = [:]
    var items: [VariantKey: Int64] = [:]
    /// When an entry was last added or removed (or the directory made): its mtime and ctime.
    var modified: Date
    var isEmpty: Bool { directories.isEmpty && items.isEmpty }
    init(modified: Date) { self.modified = modified }
}

/// A generic service's directory: its accounts, and when one was last added or removed.
struct ServiceDirectory {
    var accounts: [String: Int64] = [:]
    var modified: Date
}

/// An internet server's directory: its ports, and when one was last added or removed.
struct ServerDirectory {
    var ports: [UInt16: PathDirectory] = [:]
    var modified: Date
}

/// Every item whose name can be read now, by id and by primary key, and the tree the mount
/// shows, kept in memory so that no file operation runs SQL or decrypts names. Directories
/// persist once made (by an item or by mkdir) until rmdir or unmount, so `rm -r` can remove a
/// directory whose last item it just deleted. Directories are not stored, so their times
/// live here: made, or an entry added or removed, sets a directory's time to now.
/// Not thread-safe; `ServedKeychain` guards it.
struct ItemIndex {
    private(set) var items: [Int64: KeychainItem] = [:]
    private(set) var ids: [ItemKey: Int64] = [:]
    private(set) var services: [String: ServiceDirectory] = [:]
    private(set) var servers: [String: ServerDirectory] = [:]
    private(set) var rootModified: Date
    private(set) var internetModified: Date

    init(now: Date = Date()) {
        rootModified = now
        internetModified = now
    }

    /// Only the default access group is shown in the tree; the others are only in `items`.
    static func isShown(_ key: ItemKey) -> Bool { key.accessGroup.isEmpty }

    mutating func insert(_ item: KeychainItem, now: Date = Date()) {
        // Same key, same name: the directory's entries do not change, nor its times.
        if let old = items[item.id], old.key == item.key {
            items[item.id] = item
            ids[item.key] = item.id
            return
        }
        remove(id: item.id, now: now)
        items[item.id] = item
        ids[item.key] = item.id
        guard Self.isShown(item.key) else { return }
        switch item.key {
        case .generic(let g):
            makeService(g.service, now: now)
            services[g.service]!.accounts[g.account] = item.id
            services[g.service]!.modified = now
        case .internet(let i):
            let dir = makeDirectory(server: i.server, port: i.port, path: InternetPath.segments(i.path), now: now)
            dir.items[VariantKey(i)] = item.id
            dir.modified = now
        }
    }

    /// Removes the item, and its name unless that already stands for another item (a pending
    /// one's name taken by an item the control socket stored).
    mutating func remove(id: Int64, now: Date = Date()) {
        guard let old = items.removeValue(forKey: id) else { return }
        if ids[old.key] == id { ids[old.key] = nil }
        guard Self.isShown(old.key), entry(old.key) == id else { return }
        switch old.key {
        case .generic(let g):
            services[g.service]!.accounts[g.account] = nil
            services[g.service]!.modified = now
        case .internet(let i):
            let dir = directory(server: i.server, port: i.port, path: InternetPath.segments(i.path))!
            dir.items[VariantKey(i)] = nil
            dir.modified = now
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
        items[item.id] = item
        ids[item.key] = item.id
        guard Self.isShown(item.key) else { return }
        switch item.key {
        case .generic(let g): services[g.service]!.accounts[g.account] = item.id
        case .internet(let i): directory(server: i.server, port: i.port, path: InternetPath.segments(i.path))!.items[VariantKey(i)] = item.id
        }
    }

    /// The id a shown name stands for in its directory.
    private func entry(_ key: ItemKey) -> Int64? {
        switch key {
        case .generic(let g): services[g.service]?.accounts[g.account]
        case .internet(let i): directory(server: i.server, port: i.port, path: InternetPath.segments(i.path))?.items[VariantKey(i)]
        }
    }

    mutating func removeAll() {
        items = [:]; ids = [:]; services = [:]; servers = [:]
    }

    /// Items that match, in the documented order. Pending items are not in the store yet, so
    /// not among them.
    func items(matching query: ItemQuery) -> [KeychainItem] {
        if let key = query.exactKey {
            return item(ids[key]).map { !$0.isPending && query.matches($0.record) ? [$0] : [] } ?? []
        }
        return items.values.filter { !$0.isPending && query.matches($0.record) }.sorted(by: ItemOrder.precedes)
    }

    // MARK: directories

    mutating func makeService(_ name: String, now: Date = Date()) {
        guard services[name] == nil else { return }
        services[name] = ServiceDirectory(modified: now)
        rootModified = now
    }

    mutating func removeService(_ name: String, now: Date = Date()) {
        guard services.removeValue(forKey: name) != nil else { return }
        rootModified = now
    }

    mutating func makeServer(_ name: String, now: Date = Date()) {
        guard servers[name] == nil else { return }
        servers[name] = ServerDirectory(modified: now)
        internetModified = now
    }

    mutating func removeServer(_ name: String, now: Date = Date()) {
        guard servers.removeValue(forKey: name) != nil else { return }
        internetModified = now
    }

    mutating func removePort(server: String, port: UInt16, now: Date = Date()) {
        guard servers[server]?.ports.removeValue(forKey: port) != nil else { return }
        servers[server]!.modified = now
    }

    /// Removes the path directory `segment` below `server`/`port`/`parent`.
    mutating func removePathDirectory(server: String, port: UInt16, parent: [String], segment: String, now: Date = Date()) {
        guard let dir = directory(server: server, port: port, path: parent),
              dir.directories.removeValue(forKey: segment) != nil else { return }
        dir.modified = now
    }

    /// The directory at `server`/`port`/`path`, made (with any missing parent) if need be.
    @discardableResult
    mutating func makeDirectory(server: String, port: UInt16, path: [String], now: Date = Date()) -> PathDirectory {
        makeServer(server, now: now)
        var dir: PathDirectory
        if let existing = servers[server]!.ports[port] {
            dir = existing
        } else {
            dir = PathDirectory(modified: now)
            servers[server]!.ports[port] = dir
            servers[server]!.modified = now
        }
        for segment in path {
            if let next = dir.directories[segment] { dir = next; continue }
            let next = PathDirectory(modified: now)
            dir.directories[segment] = next
            dir.modified = now
            dir = next
        }
        return dir
    }

    func directory(server: String, port: UInt16, path: [String]) -> PathDirectory? {
        guard var dir = servers[server]?.ports[port] else { return nil }
        for segment in path {
            guard let next = dir.directories[segment] else { return nil }
            dir = next
        }
        return dir
    }

    func item(_ id: Int64?) -> KeychainItem? { id.flatMap { items[$0] } }
}
