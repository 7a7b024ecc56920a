import Foundation
import KeychainAccess
import KeychainCrypto
import KeychainModel
import KeychainStore
import Logging

/// Open files: open, create, read, write, truncate, commit.
extension KeychainTree {
    private static let log = Logger(label: "keychainfs.fs")

    /// Opens an item. A class whose key is not held answers ENOKEY here, at open().
    package func open(_ path: String, flags: Int32) throws(FileSystemError) -> UInt64 {
        try open(try TreeLocation.parse(path), flags: flags)
    }

    /// `open` for `caller`: an item with a non-empty access list is opened only for a program
    /// on it, or one the user allows (`ServedKeychain.authorize`); EACCES otherwise.
    package func open(_ location: TreeLocation, flags: Int32, caller: AccessCaller) throws(FileSystemError) -> UInt64 {
        try open(location, flags: flags, as: caller)
    }

    /// `open` of a path already parsed (the FUSE binding keeps each inode's).
    package func open(_ location: TreeLocation, flags: Int32) throws(FileSystemError) -> UInt64 {
        try open(location, flags: flags, as: .unidentified("a caller the tree was not told"))
    }

    /// An item found, then gone before its secret was read (a rename over it, `mv tmp item`
    /// or `sed -i`, commits in between): what the name holds now is opened, as a path walk
    /// just after the rename would; ENOENT only once the name itself is gone.
    private func open(_ location: TreeLocation, flags: Int32, as caller: AccessCaller) throws(FileSystemError) -> UInt64 {
        for _ in 0..<3 {
            if let handle = try openFound(location, flags: flags, as: caller) { return handle }
        }
        throw .notFound
    }

    /// `open`, or nil if the item found was gone when its secret was read.
    private func openFound(_ location: TreeLocation, flags: Int32, as caller: AccessCaller) throws(FileSystemError) -> UInt64? {
        let mode = OpenMode(flags: flags)
        let readsStored = mode.readable || !mode.truncate
        // The common case in one hold of `state`: the secret is cached, so the handle is
        // registered with no decryption and no second look at the index.
        let found = try served.covering(location) { s throws(FileSystemError) -> OpenLookup in
            guard case .item(let item) = try node(location, s.index) else { throw .isDirectory }
            // A guarded item is decided on outside `state` (the user may be asked), but for a
            // caller the gate allows at once (`allowsAtOnce`: one checked in the last 10 ms).
            if !served.allowsAtOnce(caller, item.record) { return .uncached(item) }
            guard readsStored, !item.isPending, let cached = s.plaintext.secret(item.id) else { return .uncached(item) }
            return .opened(try register(OpenFile(itemID: item.id, accessible: item.accessible, mode: mode, contents: cached,
                                                 shared: true, modified: item.record.attributes.modified), in: &s))
        }
        let item: KeychainItem
        switch found {
        case .opened(let handle): return handle
        case .uncached(let uncached): item = uncached
        }
        do { try served.authorize(caller, item, mode.writable ? .write : .read) } catch { throw .from(error) }
        // Allowed, and its secret cached: found and the handle registered in one hold of
        // `state`, not one to find the secret and another to register the handle.
        if readsStored, !item.isPending, let handle = try served.state.withLock({ s throws(FileSystemError) -> UInt64? in
            guard let cached = s.plaintext.secret(item.id) else { return nil }
            return try register(OpenFile(itemID: item.id, accessible: item.accessible, mode: mode, contents: cached,
                                         shared: true, modified: item.record.attributes.modified), in: &s)
        }) {
            return handle
        }
        guard served.isAvailable(item.accessible) else { throw .keyUnavailable }
        let contents: SecureBytes?
        if !readsStored {
            contents = nil
        } else {
            do { contents = try served.secret(of: item) } catch KeychainError.itemNotFound { return nil } catch { throw .from(error) }
        }
        return try register(OpenFile(itemID: item.id, accessible: item.accessible, mode: mode,
                                     contents: contents ?? SecureBytes(), shared: contents != nil,
                                     modified: item.record.attributes.modified))
    }

    /// What `open` finds under `state`: a handle already registered, or an item whose secret
    /// is to be read first.
    private enum OpenLookup {
        case opened(UInt64)
        case uncached(KeychainItem)
    }

    /// Creates a new, empty item and opens it. The item is pending: in the index (so lookup,
    /// `ls` and `stat` show a 0-byte file), not in the store until a commit of a handle on it
    /// (flush after a write, fsync, or the creator's release) inserts it with its secret, in
    /// one commit. Its class is the strictest of the mount's default and its directory's items
    /// (`AccessibilityClass.forNewItem`).
    package func create(_ path: String, flags: Int32) throws(FileSystemError) -> UInt64 {
        try create(try TreeLocation.parse(path), flags: flags)
    }

    package func create(_ location: TreeLocation, flags: Int32) throws(FileSystemError) -> UInt64 {
        let key = try itemKey(at: location)
        // The one rule (`ServedKeychain.newItemClass`), before the name is taken: it reads the
        // store's class column, and pending neighbours from the index.
        let accessible: AccessibilityClass
        do { accessible = try served.newItemClass(for: key, base: defaultClass) } catch { throw .from(error) }
        let item = try served.covering(location) { s throws(FileSystemError) -> KeychainItem in
            // Whatever exists there (an item, or a path directory of that name) is not replaced.
            if (try? node(location, s.index)) != nil { throw .exists }
            try requireParent(of: location, s.index)
            guard served.isAvailable(accessible) else { throw .keyUnavailable }
            return s.addPending(ItemRecord(key: key, attributes: ItemAttributes(accessible: accessible)))
        }
        let file = OpenFile(itemID: item.id, accessible: item.accessible, mode: OpenMode(flags: flags), contents: SecureBytes(),
                            modified: item.record.attributes.modified)
        file.createdItem = true
        do { return try register(file) } catch {
            served.state.withLock { $0.discardPending(item.id) }
            throw error
        }
    }

    private func requireParent(of location: TreeLocation, _ index: ItemIndex) throws(FileSystemError) {
        switch location {
        case .genericItem(let svc, _): if index.services[svc.exact] == nil { throw .notFound }
        case .internetEntry(let server, let port, let parent, _):
            if index.directory(server: server, port: port, path: parent) == nil { throw .notFound }
        default: break
        }
    }

    /// Adds the handle, unless a lock took the file's class key since it was opened: `lock()`
    /// takes the keys before it revokes open files, so checking here closes the gap.
    private func register(_ file: OpenFile) throws(FileSystemError) -> UInt64 {
        try served.state.withLock { s throws(FileSystemError) -> UInt64 in try register(file, in: &s) }
    }

    private func register(_ file: OpenFile, in s: inout ServedKeychain.State) throws(FileSystemError) -> UInt64 {
        guard served.isAvailable(file.accessible) else {
            file.revoke()
            throw .keyUnavailable
        }
        let h = s.nextHandle
        s.nextHandle += 1
        s.files[h] = file
        return h
    }

    private func withFile<T>(_ handle: UInt64, _ body: (OpenFile) throws(FileSystemError) -> T) throws(FileSystemError) -> T {
        try served.state.withLock { s throws(FileSystemError) -> T in
            guard let f = s.files[handle] else { throw .badHandle }
            return try body(f)
        }
    }

    package func read(_ handle: UInt64, offset: Int, count: Int, into buffer: UnsafeMutableRawPointer) throws(FileSystemError) -> Int {
        try withFile(handle) { f throws(FileSystemError) in try f.read(offset: offset, count: count, into: buffer) }
    }

    /// Hands `body` up to `count` bytes of the open file at `offset`, in place in its locked
    /// buffer: the FUSE binding replies from there, with no copy. A shared buffer (the cached
    /// secret) never changes in place, so `body` runs after `state` is let go; a private one,
    /// which a write on the same handle may grow and move, under it.
    package func withReadBytes(_ handle: UInt64, offset: Int, count: Int,
                               _ body: (UnsafeRawBufferPointer) -> Void) throws(FileSystemError) {
        let shared = try withFile(handle) { f throws(FileSystemError) -> SecureBytes? in
            try f.withReadBytes(offset: offset, count: count) { bytes, isShared in
                if isShared { return f.buffer }
                body(bytes)
                return nil
            }
        }
        guard let shared else { return }
        let range = OpenFile.readRange(offset: offset, count: count, size: shared.count)
        shared.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[range])) }
    }

    /// Whether reads through the handle still return its secret: open, and not revoked by a lock.
    package func isReadable(handle: UInt64) -> Bool {
        served.state.withLock { s in s.files[handle].map { $0.mode.readable && !$0.isRevoked } ?? false }
    }

    package func write(_ handle: UInt64, offset: Int, data: UnsafeRawBufferPointer) throws(FileSystemError) -> Int {
        try withFile(handle) { f throws(FileSystemError) in try f.write(data, offset: offset) }
    }

    /// ftruncate(2): changes the open copy, committed with it.
    package func truncate(handle: UInt64, size: Int) throws(FileSystemError) {
        try withFile(handle) { f throws(FileSystemError) in try f.truncate(to: size) }
    }

    /// truncate(2) on a path commits at once.
    package func truncate(_ path: String, size: Int) throws(FileSystemError) {
        try truncate(try TreeLocation.parse(path), size: size)
    }

    package func truncate(_ location: TreeLocation, size: Int,
                          caller: AccessCaller = .unidentified("a caller the tree was not told")) throws(FileSystemError) {
        let h = try open(location, flags: O_RDWR, caller: caller)
        defer { try? release(h) }
        try truncate(handle: h, size: size)
        try flush(h)
    }

    /// Commits the open copy as one atomic, durable update (at close(2) and fsync(2)).
    package func flush(_ handle: UInt64) throws(FileSystemError) {
        try commit(try withFile(handle) { $0 }, at: .flush)
    }

    /// fsync(2): everything, a pending O_TRUNC included, is committed. A new file whose insert
    /// fails here stays as it is (pending), for its close to try again or drop.
    package func sync(_ handle: UInt64) throws(FileSystemError) {
        try commit(try withFile(handle) { $0 }, at: .fsync)
    }

    package func release(_ handle: UInt64) throws(FileSystemError) {
        let f = try served.state.withLock { s throws(FileSystemError) -> OpenFile? in
            guard let f = s.files[handle] else { throw .badHandle }
            // A reader's close, the common case, commits nothing: done in this one hold.
            guard Self.commitNeeded(f, final: true, s) else {
                s.files[handle] = nil
                f.close()
                return nil
            }
            return f
        }
        guard let f else { return }
        // The handle stays open, its pending size what `stat` shows, until its commit is done:
        // the kernel sends the release after close(2) has returned, and a `stat` between the
        // two would otherwise show the old size, which the kernel would then keep (an O_TRUNC
        // with no write is committed only here).
        defer {
            served.state.withLock { s in
                s.files[handle] = nil
                f.close()
            }
        }
        try commit(f, at: .release)
    }

    /// What a commit of an open copy writes: taken under `state`, written without it.
    private enum Pending {
        case nothing
        case abandon(KeychainItem?)
        case update(KeychainItem, SecureBytes, writes: UInt64, modified: Date)
    }

    /// Whether a commit of `f` writes anything: its changes (at release and fsync, or at flush
    /// once written), the item it created while that is pending (at release and fsync: an
    /// empty create is stored too), or the removal of an abandoned create.
    private static func commitNeeded(_ f: OpenFile, final: Bool, _ s: ServedKeychain.State) -> Bool {
        if f.isAbandoned { return true }
        let insertsPending = f.createdItem && (f.lostName || (s.index.item(f.itemID)?.isPending ?? false))
        return (f.isDirty || insertsPending) && (final || f.hasWrites)
    }

    /// Where a commit comes from: close(2)'s FLUSH commits only written changes; fsync(2) and
    /// the RELEASE also an O_TRUNC and a pending create (`final`). At the two of a close a new
    /// file whose insert fails is dropped (`closing`); not at fsync(2), which holds the file's
    /// lock in the kernel, so that the kernel could not be told of the name's going before its
    /// reply (`FuseFileSystem.dropNameIfGone`).
    private enum CommitPoint {
        case flush, fsync, release
        var final: Bool { self != .flush }
        var closing: Bool { self != .fsync }
    }

    private func commit(_ f: OpenFile, at point: CommitPoint) throws(FileSystemError) {
        let final = point.final, closing = point.closing
        // A reader's close commits nothing, and must not wait for another item's commit.
        let needed = served.state.withLock { s in Self.commitNeeded(f, final: final, s) }
        guard needed else { return }
        try served.change(origin: .tree) { c throws(FileSystemError) -> Void in
            let pending = try served.state.withLock { s throws(FileSystemError) -> Pending in
                guard Self.commitNeeded(f, final: final, s) else { return .nothing }
                guard !f.isRevoked else {
                    // A pending item whose writer lost its key is never stored.
                    if closing { s.discardPending(f.itemID) }
                    throw .keyUnavailable
                }
                guard !f.isAbandoned else {
                    f.markCommitted(writes: f.writes)
                    return .abandon(f.createdItem && closing ? s.index.item(f.itemID) : nil)
                }
                if f.lostName {
                    // Told once, by whichever of the item's files commits first; it stores nothing.
                    for other in s.files.values where other.itemID == f.itemID { other.lostName = false }
                    f.markCommitted(writes: f.writes)
                    throw .exists
                }
                // Deleted or replaced while open: like a write to an unlinked file, it goes nowhere.
                guard let item = s.index.item(f.itemID) else {
                    f.markCommitted(writes: f.writes)
                    return .nothing
                }
                // A copy, so that writes on this handle may go on while it is sealed and committed.
                return .update(item, f.buffer.copy(), writes: f.writes, modified: f.modified)
            }
            switch pending {
            case .nothing: return
            case .abandon(let created):
                if let created { try? c.delete([created]) }
                throw .tooLarge
            case .update(let item, let value, let writes, let modified) where item.isPending:
                defer { value.wipe() }
                var record = item.record
                record.attributes.modified = modified
                do {
                    // A sibling stored after the create (which took no commit lock) may be
                    // stricter: the store applies the class rule again, where no commit can come.
                    _ = try c.store(pending: item, as: record, secret: value)
                } catch {
                    // Not stored (a full disk): at close the new file is gone, and close(2)
                    // says why, but not at a release, which no program waits for: the log
                    // does. No name. At fsync it stays pending, its writes to be tried again.
                    guard closing else { throw .from(error) }
                    Self.log.warning("a new file could not be stored: \(FileSystemError.from(error).description)")
                    served.state.withLock { s in
                        s.discardPending(item.id)
                        f.markCommitted(writes: f.writes)
                    }
                    throw .from(error)
                }
                served.state.withLock { _ in
                    f.markCommitted(writes: writes)
                    f.createdItem = false
                }
            case .update(let item, let value, let writes, let modified):
                defer { value.wipe() }
                do { _ = try c.update(item, secret: value, modified: modified) } catch { throw .from(error) }
                served.state.withLock { _ in
                    f.markCommitted(writes: writes)
                    f.createdItem = false
                }
            }
        }
    }

    // MARK: mode, owner, times

    /// chmod that keeps access at 0600 (files) / 0700 (directories) or narrower is accepted
    /// and changes nothing; anything wider is refused, so `cp -p` and `install -m 600` work.
    package func setMode(_ path: String, mode: UInt32) throws(FileSystemError) {
        try Self.checkMode(mode, of: try stat(path))
    }

    /// chown to the mounting user (or -1, "unchanged") is accepted; any other owner is refused.
    package func setOwner(_ path: String, uid: UInt32, gid: UInt32) throws(FileSystemError) {
        _ = try stat(path)
        try Self.checkOwner(uid: uid, gid: gid)
    }

    package static func checkMode(_ mode: UInt32, of st: FileStat) throws(FileSystemError) {
        let allowed: UInt32 = st.isDirectory ? 0o700 : 0o600
        guard mode & 0o7777 & ~allowed == 0 else { throw .notPermitted }
    }

    package static func checkOwner(uid: UInt32, gid: UInt32) throws(FileSystemError) {
        let keep = UInt32.max
        guard uid == keep || uid == getuid(), gid == keep || gid == getgid() else { throw .notPermitted }
    }
}
