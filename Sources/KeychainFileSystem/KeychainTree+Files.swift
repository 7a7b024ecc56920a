import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStore

/// Open files: open, create, read, write, truncate, commit.
extension KeychainTree {
    /// Opens an item. A class whose key is not held answers ENOKEY here, at open().
    public func open(_ path: String, flags: Int32) throws(FileSystemError) -> UInt64 {
        let location = try TreeLocation.parse(path)
        let mode = OpenMode(flags: flags)
        return try state.withLock { s throws(FileSystemError) in
            guard case .item(let item) = try node(location, s.index) else { throw .isDirectory }
            guard keychain.isAvailable(item.accessible) else { throw .keyUnavailable }
            if mode.truncate && !mode.readable {
                return Self.register(OpenFile(itemID: item.id, accessible: item.accessible, mode: mode,
                                              contents: SecureBytes()), &s)
            }
            let contents: SecureBytes
            if let cached = s.plaintext[item.id] {
                contents = cached
            } else {
                do { contents = try keychain.secret(of: item) } catch { throw .from(error) }
                s.plaintext[item.id] = contents
            }
            return Self.register(OpenFile(itemID: item.id, accessible: item.accessible, mode: mode,
                                          contents: contents, shared: true), &s)
        }
    }

    /// Creates an empty item (committed at once, so that it is visible while being written)
    /// and opens it. Its class is the strictest of the mount's default and its directory's
    /// items (`AccessibilityClass.forNewItem`).
    public func create(_ path: String, flags: Int32) throws(FileSystemError) -> UInt64 {
        let location = try TreeLocation.parse(path)
        let key = try itemKey(at: location)
        return try state.withLock { s throws(FileSystemError) in
            // Whatever exists there (an item, or a path directory of that name) is not replaced.
            if (try? node(location, s.index)) != nil { throw .exists }
            try requireParent(of: location, s.index)
            let siblings: [Int64] = switch location {
            case .genericItem(let svc, _): Array((s.index.services[svc] ?? [:]).values)
            case .internetEntry(let server, let port, let parent, _):
                Array(s.index.directory(server: server, port: port, path: parent)?.items.values ?? [:].values)
            default: []
            }
            let accessible = AccessibilityClass.forNewItem(mountDefault: defaultClass,
                                                           siblings: siblings.compactMap { s.index.item($0)?.accessible })
            guard keychain.isAvailable(accessible) else { throw .keyUnavailable }
            let item: KeychainItem
            do {
                item = try keychain.add(ItemRecord(key: key, attributes: ItemAttributes(accessible: accessible)),
                                        secret: SecureBytes())
            } catch { throw .from(error) }
            s.index.insert(item)
            let file = OpenFile(itemID: item.id, accessible: accessible, mode: OpenMode(flags: flags), contents: SecureBytes())
            file.createdItem = true
            return Self.register(file, &s)
        }
    }

    private func requireParent(of location: TreeLocation, _ index: ItemIndex) throws(FileSystemError) {
        switch location {
        case .genericItem(let svc, _): if index.services[svc] == nil { throw .notFound }
        case .internetEntry(let server, let port, let parent, _):
            if index.directory(server: server, port: port, path: parent) == nil { throw .notFound }
        default: break
        }
    }

    private static func register(_ file: OpenFile, _ s: inout TreeState) -> UInt64 {
        let h = s.nextHandle
        s.nextHandle += 1
        s.files[h] = file
        return h
    }

    private func file(_ handle: UInt64, _ s: TreeState) throws(FileSystemError) -> OpenFile {
        guard let f = s.files[handle] else { throw .badHandle }
        return f
    }

    public func read(_ handle: UInt64, offset: Int, count: Int, into buffer: UnsafeMutableRawPointer) throws(FileSystemError) -> Int {
        try state.withLock { s throws(FileSystemError) in try file(handle, s).read(offset: offset, count: count, into: buffer) }
    }

    public func write(_ handle: UInt64, offset: Int, data: UnsafeRawBufferPointer) throws(FileSystemError) -> Int {
        try state.withLock { s throws(FileSystemError) in try file(handle, s).write(data, offset: offset) }
    }

    /// ftruncate(2): changes the open copy, committed with it.
    public func truncate(handle: UInt64, size: Int) throws(FileSystemError) {
        try state.withLock { s throws(FileSystemError) in try file(handle, s).truncate(to: size) }
    }

    /// truncate(2) on a path commits at once.
    public func truncate(_ path: String, size: Int) throws(FileSystemError) {
        let h = try open(path, flags: O_RDWR)
        defer { try? release(h) }
        try state.withLock { s throws(FileSystemError) in try file(h, s).truncate(to: size) }
        try flush(h)
    }

    /// Commits the open copy as one atomic, durable update (at close(2) and fsync(2)).
    public func flush(_ handle: UInt64) throws(FileSystemError) {
        try state.withLock { s throws(FileSystemError) in try commit(try file(handle, s), &s, final: false) }
    }

    /// fsync(2): everything, a pending O_TRUNC included, is committed.
    public func sync(_ handle: UInt64) throws(FileSystemError) {
        try state.withLock { s throws(FileSystemError) in try commit(try file(handle, s), &s, final: true) }
    }

    public func release(_ handle: UInt64) throws(FileSystemError) {
        try state.withLock { s throws(FileSystemError) in
            guard let f = s.files.removeValue(forKey: handle) else { throw .badHandle }
            defer { f.close() }
            try commit(f, &s, final: true)
        }
    }

    private func commit(_ f: OpenFile, _ s: inout TreeState, final: Bool) throws(FileSystemError) {
        guard f.isDirty || f.isAbandoned else { return }
        guard final || f.hasWrites || f.isAbandoned else { return }
        guard !f.isRevoked else { throw .keyUnavailable }
        guard !f.isAbandoned else {
            f.markCommitted()
            if f.createdItem, let item = s.index.item(f.itemID) {
                try? keychain.delete([item])
                s.index.remove(id: item.id)
            }
            throw .tooLarge
        }
        // Deleted or replaced while open: like a write to an unlinked file, it goes nowhere.
        guard let item = s.index.item(f.itemID) else { f.markCommitted(); return }
        do {
            s.index.insert(try keychain.update(item, to: item.record, secret: f.buffer))
            f.markCommitted()
            f.createdItem = false
        } catch {
            // A create whose first write could not be stored (a full disk) leaves no empty item.
            if f.createdItem, (try? keychain.delete([item])) != nil {
                s.index.remove(id: item.id)
                f.markCommitted()
            }
            throw .from(error)
        }
        s.forgetPlaintext(f.itemID)
    }

    // MARK: mode, owner, times

    /// chmod that keeps access at 0600 (files) / 0700 (directories) or narrower is accepted
    /// and changes nothing; anything wider is refused, so `cp -p` and `install -m 600` work.
    public func setMode(_ path: String, mode: UInt32) throws(FileSystemError) {
        let st = try stat(path)
        let allowed: UInt32 = st.isDirectory ? 0o700 : 0o600
        guard mode & 0o7777 & ~allowed == 0 else { throw .notPermitted }
    }

    /// chown to the mounting user (or -1, "unchanged") is accepted; any other owner is refused.
    public func setOwner(_ path: String, uid: UInt32, gid: UInt32) throws(FileSystemError) {
        _ = try stat(path)
        let keep = UInt32.max
        guard uid == keep || uid == getuid(), gid == keep || gid == getgid() else { throw .notPermitted }
    }
}
