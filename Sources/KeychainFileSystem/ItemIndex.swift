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

/// A directory below a port: path segments and the items whose path ends here.
// @unchecked Sendable because it is only reached through `ServedKeychain.state`, under its mutex.
final class PathDirectory: @unchecked Sendable {
    var directories: [String: PathDirectory] = [:]
    var items: [VariantKey: Int64] = [:]
    var isEmpty: Bool { directories.isEmpty && items.isEmpty }
}

/// Every item whose name can be read now, by id and by primary key, and the tree the mount
/// shows, kept in memory so that no file operation runs SQL or decrypts names. Directories
/// persist once made (by an item or by mkdir) until rmdir or unmount, so `rm -r` can remove a
/// directory whose last item it just deleted.
/// Not thread-safe; `ServedKeychain` guards it.
struct ItemIndex {
    private(set) var items: [Int64: KeychainItem] = [:]
    private(set) var ids: [ItemKey: Int64] = [:]
    private(set) var services: [String: [String: Int64]] = [:]
    private(set) var servers: [String: [UInt16: PathDirectory]] = [:]

    /// Only the default access group is shown in the tree; the others are only in `items`.
    static func isShown(_ key: ItemKey) -> Bool { key.accessGroup.isEmpty }

    mutating func insert(_ item: KeychainItem) {
        remove(id: item.id)
        items[item.id] = item
        ids[item.key] = item.id
        guard Self.isShown(item.key) else { return }
        switch item.key {
        case .generic(let g): services[g.service, default: [:]][g.account] = item.id
        case .internet(let i):
            makeDirectory(server: i.server, port: i.port, path: InternetPath.segments(i.path)).items[VariantKey(i)] = item.id
        }
    }

    mutating func remove(id: Int64) {
        guard let old = items.removeValue(forKey: id) else { return }
        if ids[old.key] == id { ids[old.key] = nil }
        guard Self.isShown(old.key) else { return }
        switch old.key {
        case .generic(let g): services[g.service]?[g.account] = nil
        case .internet(let i):
            directory(server: i.server, port: i.port, path: InternetPath.segments(i.path))?.items[VariantKey(i)] = nil
        }
    }

    mutating func removeAll() {
        items = [:]; ids = [:]; services = [:]; servers = [:]
    }

    /// Items that match, in the documented order.
    func items(matching query: ItemQuery) -> [KeychainItem] {
        if let key = query.exactKey { return item(ids[key]).map { query.matches($0.record) ? [$0] : [] } ?? [] }
        return items.values.filter { query.matches($0.record) }.sorted(by: ItemOrder.precedes)
    }

    // MARK: directories

    mutating func makeService(_ name: String) { if services[name] == nil { services[name] = [:] } }
    mutating func removeService(_ name: String) { services[name] = nil }
    mutating func makeServer(_ name: String) { if servers[name] == nil { servers[name] = [:] } }
    mutating func removeServer(_ name: String) { servers[name] = nil }
    mutating func removePort(server: String, port: UInt16) { servers[server]?[port] = nil }

    @discardableResult
    mutating func makeDirectory(server: String, port: UInt16, path: [String]) -> PathDirectory {
        var dir = servers[server, default: [:]][port] ?? {
            let d = PathDirectory()
            servers[server, default: [:]][port] = d
            return d
        }()
        for segment in path {
            if let next = dir.directories[segment] { dir = next } else {
                let next = PathDirectory()
                dir.directories[segment] = next
                dir = next
            }
        }
        return dir
    }

    func directory(server: String, port: UInt16, path: [String]) -> PathDirectory? {
        guard var dir = servers[server]?[port] else { return nil }
        for segment in path {
            guard let next = dir.directories[segment] else { return nil }
            dir = next
        }
        return dir
    }

    func item(_ id: Int64?) -> KeychainItem? { id.flatMap { items[$0] } }
}
