import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStore
import Synchronization

/// What `stat` reports for a path.
public struct FileStat: Equatable, Sendable {
    public var isDirectory: Bool
    public var size: Int
    public var mode: UInt32
    public var modified: Date
    public var links: Int
}

public struct DirectoryEntry: Equatable, Sendable {
    public var name: String
    public var isDirectory: Bool
}

/// The filesystem semantics of the mount, in plain Swift: path mapping, directories, open
/// files and their buffers, rename, attributes and lock state. The FUSE binding only
/// translates C calls into these methods and errors into errno.
///
/// Thread-safe. Its state is `ServedKeychain`'s, and every change it makes goes through
/// `served.change`, the same path the control socket's requests take.
public final class KeychainTree: Sendable {
    package let served: ServedKeychain
    public var keychain: Keychain { served.keychain }
    public let defaultClass: AccessibilityClass
    /// Seconds without file access before the mount locks itself, 0 for never; changed at
    /// run time by `set-keychain-settings` or the root's `lock-after` attribute.
    private let lockAfterSeconds: Atomic<Int>
    /// Directories have no dates of their own; they show the time of mounting.
    let mountTime = Date()
    private let lastAccess = Atomic<Int64>(0)
    /// Run after every lock and after the keys are forgotten: the FUSE binding drops the
    /// kernel's cached pages of the files the lock revoked.
    private let afterLock = Mutex<(@Sendable () -> Void)?>(nil)

    package init(served: ServedKeychain, defaultClass: AccessibilityClass = .default, lockAfter: Int? = nil) {
        self.served = served
        self.defaultClass = defaultClass
        lockAfterSeconds = Atomic(max(lockAfter ?? 0, 0))
        noteAccess()
    }

    public convenience init(keychain: Keychain, defaultClass: AccessibilityClass = .default, lockAfter: Int? = nil) throws {
        self.init(served: try ServedKeychain(keychain: keychain), defaultClass: defaultClass, lockAfter: lockAfter)
    }

    // MARK: lock state

    /// Seconds since the monotonic clock's epoch of the last file operation.
    public func noteAccess() { lastAccess.store(Self.now(), ordering: .relaxed) }
    public var idleSeconds: Int64 { Self.now() - lastAccess.load(ordering: .relaxed) }
    private static func now() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec)
    }

    public var lockAfter: Int? {
        let s = lockAfterSeconds.load(ordering: .relaxed)
        return s > 0 ? s : nil
    }

    /// A new setting counts from now, so shortening it does not lock at once.
    public func setLockAfter(_ seconds: Int?) {
        noteAccess()
        lockAfterSeconds.store(max(seconds ?? 0, 0), ordering: .relaxed)
    }

    /// Locks if unlocked and idle for at least the lock-after setting; the daemon calls it
    /// twice a second.
    public func lockIfIdle() {
        guard let limit = lockAfter, served.lockState == .unlocked, idleSeconds >= Int64(limit) else { return }
        lock()
    }

    public func lock() {
        served.lock()
        afterLock.withLock { $0 }?()
    }

    package func setAfterLock(_ hook: (@Sendable () -> Void)?) { afterLock.withLock { $0 = hook } }

    public func unlock(passphrase: SecureBytes?) throws {
        // Not idle: the lock-after timer must not lock again while the names are reloaded.
        noteAccess()
        try served.unlock(passphrase: passphrase)
        noteAccess()
    }

    public func forgetEverything() {
        served.forgetEverything()
        afterLock.withLock { $0 }?()
    }

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
            guard index.services[s] != nil else { throw .notFound }
            return .service(s)
        case .genericItem(let s, let a):
            guard let item = index.item(index.services[s]?[a]) else { throw .notFound }
            return .item(item)
        case .server(let s):
            guard index.servers[s] != nil else { throw .notFound }
            return .server(s)
        case .port(let s, let p):
            guard index.servers[s]?[p] != nil else { throw .notFound }
            return .port(s, p)
        case .internetEntry(let s, let p, let parent, let name):
            guard let dir = index.directory(server: s, port: p, path: parent) else { throw .notFound }
            if !name.contains(InternetVariantName.marker), let segment = TreeName.unescape(name),
               let sub = dir.directories[segment] {
                return .pathDirectory(sub)
            }
            guard let parsed = InternetVariantName.parse(name, port: p),
                  let item = index.item(dir.items[VariantKey(parsed)]) else { throw .notFound }
            return .item(item)
        }
    }

    func resolve(_ path: String) throws(FileSystemError) -> (TreeLocation, Node) {
        let location = try TreeLocation.parse(path)
        let n = try served.state.withLock { s throws(FileSystemError) in try node(location, s.index) }
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

    /// A file's size is that of its stored secret, or of an open copy being written, so
    /// that `stat` during a copy does not report (and the kernel cache) a stale size.
    public func stat(_ path: String) throws(FileSystemError) -> FileStat {
        let location = try TreeLocation.parse(path)
        return try served.state.withLock { s throws(FileSystemError) in
            switch try node(location, s.index) {
            case .item(let item):
                let pending = s.files.values.first { $0.itemID == item.id && $0.isDirty }
                return FileStat(isDirectory: false, size: pending?.buffer.count ?? max(item.sealed.secret.count - AESGCM.overhead, 0),
                                mode: 0o100600, modified: item.record.attributes.modified, links: 1)
            default:
                return FileStat(isDirectory: true, size: 0, mode: 0o040700, modified: mountTime, links: 2)
            }
        }
    }

    public func list(_ path: String) throws(FileSystemError) -> [DirectoryEntry] {
        let location = try TreeLocation.parse(path)
        return try served.state.withLock { s throws(FileSystemError) in
            let index = s.index
            switch try node(location, index) {
            case .root:
                return [DirectoryEntry(name: TreeLocation.internetName, isDirectory: true)]
                    + index.services.keys.sorted().map { DirectoryEntry(name: TreeLocation.serviceFileName($0), isDirectory: true) }
            case .internetRoot:
                return index.servers.keys.sorted().map { DirectoryEntry(name: TreeName.escape($0), isDirectory: true) }
            case .service(let svc):
                return (index.services[svc] ?? [:]).keys.sorted().map { DirectoryEntry(name: TreeName.escape($0), isDirectory: false) }
            case .server(let server):
                return (index.servers[server] ?? [:]).keys.sorted().map { DirectoryEntry(name: String($0), isDirectory: true) }
            case .port(let server, let port):
                return Self.entries(of: index.servers[server]![port]!, index)
            case .pathDirectory(let dir):
                return Self.entries(of: dir, index)
            case .item:
                throw .notDirectory
            }
        }
    }

    /// A path directory's entries: sub-directories by name, items by their variant name,
    /// except that an item whose plain name a directory holds is listed by its tagged name.
    static func entries(of dir: PathDirectory, _ index: ItemIndex) -> [DirectoryEntry] {
        var out = dir.directories.keys.sorted().map { DirectoryEntry(name: TreeName.escape($0), isDirectory: true) }
        let dirNames = Set(dir.directories.keys.map(TreeName.escape))
        for id in dir.items.values {
            guard let item = index.item(id), case .internet(let key) = item.key else { continue }
            var name = InternetVariantName.fileName(for: key)
            if dirNames.contains(name) { name = InternetVariantName.taggedFileName(for: key) }
            out.append(DirectoryEntry(name: name, isDirectory: false))
        }
        return out.sorted { $0.name < $1.name }
    }

    // MARK: directories

    public func makeDirectory(_ path: String) throws(FileSystemError) {
        let location = try TreeLocation.parse(path)
        try served.state.withLock { s throws(FileSystemError) in
            if (try? node(location, s.index)) != nil { throw .exists }
            switch location {
            case .root, .internetRoot: throw .exists
            case .service(let name):
                guard !name.isEmpty else { throw .invalid }
                s.index.makeService(name)
            case .genericItem: throw .notPermitted
            case .server(let name):
                guard !name.isEmpty else { throw .invalid }
                s.index.makeServer(name)
            case .port(let server, let port):
                guard s.index.servers[server] != nil else { throw .notFound }
                s.index.makeDirectory(server: server, port: port, path: [])
            case .internetEntry(let server, let port, let parent, let name):
                guard !name.contains(InternetVariantName.marker) else { throw .invalid }
                let segment = try TreeLocation.segment(name)
                guard s.index.directory(server: server, port: port, path: parent) != nil else { throw .notFound }
                s.index.makeDirectory(server: server, port: port, path: parent + [segment])
            }
        }
    }

    public func removeDirectory(_ path: String) throws(FileSystemError) {
        let location = try TreeLocation.parse(path)
        try served.state.withLock { s throws(FileSystemError) in
            switch try node(location, s.index) {
            case .root, .internetRoot: throw .notPermitted
            case .service(let name):
                guard s.index.services[name]?.isEmpty ?? true else { throw .notEmpty }
                s.index.removeService(name)
            case .server(let name):
                guard s.index.servers[name]?.isEmpty ?? true else { throw .notEmpty }
                s.index.removeServer(name)
            case .port(let server, let port):
                guard s.index.servers[server]?[port]?.isEmpty ?? true else { throw .notEmpty }
                s.index.removePort(server: server, port: port)
            case .pathDirectory(let dir):
                guard dir.isEmpty else { throw .notEmpty }
                guard case .internetEntry(let server, let port, let parent, let name) = location,
                      let segment = TreeName.unescape(name) else { throw .invalid }
                s.index.directory(server: server, port: port, path: parent)?.directories[segment] = nil
            case .item: throw .notDirectory
            }
        }
    }

    // MARK: items

    public func remove(_ path: String) throws(FileSystemError) {
        let location = try TreeLocation.parse(path)
        try served.change { () throws(FileSystemError) -> Void in
            let item = try served.state.withLock { s throws(FileSystemError) -> KeychainItem in
                guard case .item(let item) = try node(location, s.index) else { throw .isDirectory }
                return item
            }
            do { try keychain.delete([item]) } catch { throw .from(error) }
            served.state.withLock { $0.deleted(item.id) }
        }
    }

    /// Moves or renames an item. Onto an existing item it replaces that item's secret in one
    /// transaction, keeping the target's attributes.
    /// Non-empty directories answer EXDEV, so `mv` copies them item by item instead.
    public func rename(_ from: String, to: String, noReplace: Bool, exchange: Bool) throws(FileSystemError) {
        guard !exchange else { throw .invalid }
        let src = try TreeLocation.parse(from), dst = try TreeLocation.parse(to)
        try served.change { () throws(FileSystemError) -> Void in
            let (source, target) = try served.state.withLock { s throws(FileSystemError) -> (Node, Node?) in
                (try node(src, s.index), try? node(dst, s.index))
            }
            guard case .item(let item) = source else {
                try served.state.withLock { s throws(FileSystemError) in
                    try renameDirectory(source, src, dst, target: target, &s.index)
                }
                return
            }
            if case .item(let existing)? = target {
                guard existing.id != item.id else { return }
                if noReplace { throw .exists }
            } else if target != nil {
                throw .isDirectory
            }
            let newKey = try itemKey(at: dst)
            guard newKey.kind == item.key.kind else { throw .crossDevice }
            var replaced: KeychainItem?
            if case .item(let existing)? = target { replaced = existing }
            // Onto an existing item, the secret moves but the target keeps its attributes and
            // class: editors save through a temporary file, and a save must not weaken an item.
            var record = replaced?.record ?? item.record
            record.key = newKey
            let moved: KeychainItem
            do { moved = try keychain.update(item, to: record, replacing: replaced) } catch { throw .from(error) }
            served.state.withLock { s in
                if let replaced { s.deleted(replaced.id) }
                s.saved(moved)
            }
        }
    }

    private func renameDirectory(_ source: Node, _ src: TreeLocation, _ dst: TreeLocation, target: Node?,
                                 _ index: inout ItemIndex) throws(FileSystemError) {
        guard case .service(let from) = source, case .service(let to) = dst else { throw .crossDevice }
        guard index.services[from]?.isEmpty ?? false else { throw .crossDevice }
        if let target {
            guard case .service(let t) = target, index.services[t]?.isEmpty ?? false else { throw .notEmpty }
        }
        guard !to.isEmpty else { throw .invalid }
        index.removeService(from)
        index.makeService(to)
    }
}
