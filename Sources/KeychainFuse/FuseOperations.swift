import CFuseShim
import Foundation
import Glibc
import KeychainAccess
import KeychainFileSystem
import KeychainModel

/// The libfuse low-level callbacks, one named function per operation as in libfuse's
/// `passthrough_hp`. Each one translates: the inode into its parsed location (kept by the
/// inode table) or an open handle, the call into a `KeychainTree` method, and its result or
/// `FileSystemError` into a reply. The low-level API, not the high-level one, because only
/// with inode numbers can an open file whose name is gone still be answered (`fstat` after
/// `unlink`).
enum FuseOperations {
    /// How long the kernel may keep names and attributes. Every change it did not make itself
    /// is told to it at once (`KernelCacheNotifier`), so these only save round trips; reads are
    /// never cached (direct I/O). `KEYCHAINFS_CACHE_SECONDS` overrides both, for the bench.
    static let cacheSeconds: Double = ProcessInfo.processInfo.environment["KEYCHAINFS_CACHE_SECONDS"]
        .flatMap(Double.init).flatMap { $0 >= 0 && $0 <= 86_400 ? $0 : nil } ?? 60
    static var entryTimeout: Double { cacheSeconds }
    static var attrTimeout: Double { cacheSeconds }

    // From <fuse_lowlevel.h> and <linux/fs.h>, whose macros Swift does not import.
    static let setMode: Int32 = 1 << 0
    static let setUID: Int32 = 1 << 1
    static let setGID: Int32 = 1 << 2
    static let setSize: Int32 = 1 << 3
    static let renameNoReplace: UInt32 = 1
    static let renameExchange: UInt32 = 2
    static let xattrCreate: Int32 = 1
    static let xattrReplace: Int32 = 2
    /// What readdir reports as d_ino for a name the kernel has not looked up.
    static let unknownInode: UInt64 = 0xffff_ffff

    static func fileSystem(_ req: fuse_req_t?) -> FuseFileSystem {
        Unmanaged<FuseFileSystem>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
    }

    /// Who made the request, for per-program access: the calling thread's id (fuse_req_ctx),
    /// which the gate maps to its process and pins.
    static func caller(_ req: fuse_req_t?) -> AccessCaller { .thread(fuse_req_ctx(req).pointee.pid) }

    /// Runs one request; `body` sends the reply on success, and a thrown error is the reply.
    static func answer(_ req: fuse_req_t?, _ body: (FuseFileSystem) throws(FileSystemError) -> Void) {
        let fs = fileSystem(req)
        fs.tree.noteAccess()
        do { try body(fs) } catch { fuse_reply_err(req, error.errno) }
    }

    static func name(_ p: UnsafePointer<CChar>?) throws(FileSystemError) -> String {
        guard let p, let s = String(validatingCString: p) else { throw .invalid }
        return s
    }

    /// unlink and rmdir: `remove` takes the name out of the tree, then the inode table lets it go.
    static func removeEntry(_ req: fuse_req_t?, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>?,
                            _ remove: (KeychainTree, TreeLocation) throws(FileSystemError) -> Void) {
        answer(req) { fs throws(FileSystemError) in
            let n = try FuseOperations.name(name)
            try remove(fs.tree, try fs.location(parent, n))
            fs.inodes.withLock { $0.unlink(parent, n) }
            fuse_reply_err(req, 0)
        }
    }

    static func make() -> fuse_lowlevel_ops {
        var ops = fuse_lowlevel_ops()
        ops.lookup = { FuseOperations.lookup($0, $1, $2) }
        ops.forget = { FuseOperations.forget($0, $1, $2) }
        ops.forget_multi = { FuseOperations.forgetMulti($0, $1, $2) }
        ops.getattr = { FuseOperations.getattr($0, $1, $2) }
        ops.access = { FuseOperations.access($0, $1, $2) }
        ops.setattr = { FuseOperations.setattr($0, $1, $2, $3, $4) }
        ops.mkdir = { req, parent, name, _ in FuseOperations.mkdir(req, parent, name) }
        ops.unlink = { req, parent, name in
            FuseOperations.removeEntry(req, parent, name) { tree, location throws(FileSystemError) in
                try tree.remove(location, caller: FuseOperations.caller(req))
            }
        }
        ops.rmdir = { req, parent, name in
            FuseOperations.removeEntry(req, parent, name) { tree, location throws(FileSystemError) in try tree.removeDirectory(location) }
        }
        ops.rename = { FuseOperations.rename($0, $1, $2, $3, $4, $5) }
        // Items are only ever regular files made by FuseOperations.create().
        ops.link = { req, _, _, _ in fuse_reply_err(req, EPERM) }
        ops.symlink = { req, _, _, _ in fuse_reply_err(req, EPERM) }
        ops.mknod = { req, _, _, _, _ in fuse_reply_err(req, EPERM) }
        ops.create = { req, parent, name, _, fi in FuseOperations.create(req, parent, name, fi) }
        ops.open = { FuseOperations.open($0, $1, $2) }
        ops.read = { FuseOperations.read($0, $1, $2, $3, $4) }
        ops.write = { req, _, buf, size, offset, fi in FuseOperations.write(req, buf, size, offset, fi) }
        ops.lseek = { req, _, offset, whence, fi in FuseOperations.lseek(req, offset, whence, fi) }
        ops.flush = { FuseOperations.flush($0, $1, $2) }
        ops.fsync = { req, _, _, fi in FuseOperations.fsync(req, fi) }
        ops.release = { FuseOperations.release($0, $1, $2) }
        ops.opendir = { FuseOperations.opendir($0, $1, $2) }
        ops.readdir = { FuseOperations.readdir($0, $1, $2, $3, $4) }
        ops.readdirplus = { FuseOperations.readdirplus($0, $1, $2, $3, $4) }
        ops.releasedir = { req, _, fi in FuseOperations.releasedir(req, fi) }
        ops.statfs = { req, _ in FuseOperations.statfs(req) }
        ops.getxattr = { FuseOperations.getxattr($0, $1, $2, $3) }
        ops.listxattr = { FuseOperations.listxattr($0, $1, $2) }
        ops.setxattr = { FuseOperations.setxattr($0, $1, $2, $3, $4, $5) }
        ops.removexattr = { FuseOperations.removexattr($0, $1, $2) }
        return ops
    }

    // MARK: names and inodes

    static func lookup(_ req: fuse_req_t?, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>?) {
        answer(req) { fs throws(FileSystemError) in
            let n = try FuseOperations.name(name)
            let location = try fs.location(parent, n)
            let st = try fs.tree.stat(location)
            let alias = !location.isListedSpelling(n, isDirectory: st.isDirectory)
            replyEntry(req, fs, fs.inodes.withLock { $0.entry(parent, n, alias: alias) }, st)
        }
    }

    static func forget(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ count: UInt64) {
        fileSystem(req).inodes.withLock { $0.forget(ino, count) }
        fuse_reply_none(req)
    }

    static func forgetMulti(_ req: fuse_req_t?, _ count: Int, _ forgets: UnsafeMutablePointer<fuse_forget_data>?) {
        fileSystem(req).inodes.withLock { t in
            for i in 0..<count { t.forget(forgets![i].ino, forgets![i].nlookup) }
        }
        fuse_reply_none(req)
    }

    // MARK: attributes

    static func getattr(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        answer(req) { fs throws(FileSystemError) in
            let st = try fs.stat(ino, handle: fs.fileHandle(ino, fi))
            var attr = attributes(st, ino)
            fuse_reply_attr(req, &attr, fs.attrTimeout(ino, st))
        }
    }

    /// access(2), chdir: the kernel asks only without `default_permissions` (`FuseMount.mount`),
    /// and, unanswered, would allow everything, `test -x` of a file too. Modes are fixed (files
    /// 0600, directories 0700) and every caller is the owner (or root, with allow_root): only
    /// the execution of a file is refused, as its mode says.
    static func access(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ mask: Int32) {
        answer(req) { fs throws(FileSystemError) in
            if mask & X_OK != 0, try !fs.stat(ino, handle: nil).isDirectory { throw FileSystemError(EACCES) }
            fuse_reply_err(req, 0)
        }
    }

    static func setattr(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ attr: UnsafeMutablePointer<stat>?, _ toSet: Int32,
                        _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        answer(req) { fs throws(FileSystemError) in
            let handle = fs.fileHandle(ino, fi)
            let current = try fs.stat(ino, handle: handle)
            let wanted = attr!.pointee
            if toSet & setMode != 0 { try KeychainTree.checkMode(wanted.st_mode, of: current) }
            if toSet & (setUID | setGID) != 0 {
                try KeychainTree.checkOwner(uid: toSet & setUID != 0 ? wanted.st_uid : UInt32.max,
                                            gid: toSet & setGID != 0 ? wanted.st_gid : UInt32.max)
            }
            if toSet & setSize != 0 {
                guard !current.isDirectory else { throw .isDirectory }
                // ftruncate(2) names the open file, whose name may be gone by then.
                if let handle {
                    try fs.tree.truncate(handle: handle, size: Int(wanted.st_size))
                } else {
                    try fs.tree.truncate(try fs.location(ino), size: Int(wanted.st_size), caller: caller(req))
                }
            }
            // Times are accepted and not kept: an item's times are those of its secret.
            let st = try fs.stat(ino, handle: handle)
            var reply = attributes(st, ino)
            fuse_reply_attr(req, &reply, fs.attrTimeout(ino, st))
        }
    }

    // MARK: directories

    static func mkdir(_ req: fuse_req_t?, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>?) {
        answer(req) { fs throws(FileSystemError) in
            let n = try FuseOperations.name(name)
            let location = try fs.location(parent, n)
            try fs.tree.makeDirectory(location)
            let st = try fs.tree.stat(location)
            let alias = !location.isListedSpelling(n, isDirectory: true)
            replyEntry(req, fs, fs.inodes.withLock { $0.entry(parent, n, alias: alias) }, st)
        }
    }

    static func rename(_ req: fuse_req_t?, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>?,
                       _ newParent: fuse_ino_t, _ newName: UnsafePointer<CChar>?, _ flags: UInt32) {
        answer(req) { fs throws(FileSystemError) in
            let from = try FuseOperations.name(name), to = try FuseOperations.name(newName)
            let target = try fs.location(newParent, to)
            try fs.tree.rename(try fs.location(parent, from), to: target,
                               noReplace: flags & renameNoReplace != 0, exchange: flags & renameExchange != 0,
                               caller: caller(req))
            let isDirectory = (try? fs.tree.stat(target))?.isDirectory ?? false
            let alias = !target.isListedSpelling(to, isDirectory: isDirectory)
            fs.inodes.withLock { $0.move(parent, from, to: newParent, to, alias: alias) }
            fuse_reply_err(req, 0)
        }
    }

    /// A service directory's listing is kept by the kernel (`cache_readdir`, across opens:
    /// `keep_cache`), so an `ls` that finds nothing changed asks only for what it reads beyond
    /// names. It stays true: the kernel drops it itself at a create, unlink, rename, mkdir or
    /// rmdir in that directory (the directory's version moves on), and the daemon at every
    /// other change of its names (`KernelCacheNotifier`: `notify_inval_inode` of the directory,
    /// which drops its cached pages). Only service directories: in the internet tree an item's
    /// name can change with another's (its variant name) or by an xattr (protocol, authtype,
    /// domain), which the kernel does not count as a change of the directory.
    static func opendir(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        answer(req) { fs throws(FileSystemError) in
            let (handle, isService) = try fs.openListing(ino)
            fi!.pointee.fh = handle
            if isService {
                fi!.pointee.cache_readdir = 1
                fi!.pointee.keep_cache = 1
            }
            fuse_reply_open(req, fi)
        }
    }

    static func readdir(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ size: Int, _ offset: off_t,
                        _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        answer(req) { fs throws(FileSystemError) in
            let fh = fi!.pointee.fh
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: max(size, 1))
            defer { buffer.deallocate() }
            var used = 0
            var scanned = Int64(offset)
            // A page at a time (a paged listing reads the store as it goes), about a
            // buffer's worth: an entry here takes 24 bytes and its name.
            fill: while true {
                let page = try fs.entries(fh, of: ino, after: scanned, limit: max(size / 32, 8))
                if page.isEmpty { break }
                let inodes = fs.inodes.withLock { t in
                    page.map { e -> UInt64 in
                        switch e.entry.name {
                        case ".": ino
                        case "..": t.nodes[ino].map { $0.parent == 0 ? InodeTable.root : $0.parent } ?? InodeTable.root
                        default: t.child(ino, e.entry.name) ?? unknownInode
                        }
                    }
                }
                for (i, e) in page.enumerated() {
                    var st = stat()
                    st.st_ino = UInt(inodes[i])
                    st.st_mode = e.entry.isDirectory ? S_IFDIR : S_IFREG
                    let n = fuse_add_direntry(req, buffer + used, size - used, e.entry.name, &st, off_t(e.offset))
                    if n > size - used { break fill }
                    used += n
                    scanned = e.offset
                    if e.isPending { fs.listedPending(fh, e.entry.name) }
                }
            }
            fuse_reply_buf(req, buffer, used)
        }
    }

    /// With attributes in the listing, `ls -l` costs one request per buffer of entries, not
    /// a lookup per name: each entry the reply holds counts as a lookup of it.
    static func readdirplus(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ size: Int, _ offset: off_t,
                            _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        answer(req) { fs throws(FileSystemError) in
            let fh = fi!.pointee.fh
            let directory = try fs.location(ino)
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: max(size, 1))
            defer { buffer.deallocate() }
            var used = 0
            var counted: [UInt64] = []
            var scanned = Int64(offset)
            // An entry here takes about 150 bytes with its attributes.
            fill: while true {
                let page = try fs.entries(fh, of: ino, after: scanned, limit: max(size / 128, 8))
                if page.isEmpty { break }
                for listed in page {
                    // Past an entry left out, the next page starts after it all the same. (Not the
                    // largest offset: a paged listing's pending entries come first, with the
                    // largest offsets.)
                    defer { scanned = listed.offset }
                    let name = listed.entry.name
                    var e = fuse_entry_param()
                    var child: UInt64?
                    if name == "." || name == ".." {
                        // The kernel takes neither as a lookup; inode 0 says so.
                        e.attr.st_ino = UInt(ino)
                        e.attr.st_mode = S_IFDIR
                    } else {
                        // A name gone since the listing was taken is left out, as readdir would
                        // leave it to the lookup that follows. A page read in one go with no
                        // change since carries its entries' attributes.
                        guard let st = listed.stat ?? (try? fs.tree.stat(try directory.child(name))) else { continue }
                        let n = fs.inodes.withLock { $0.lookedUp(ino, name) }
                        e = entry(n, st)
                        child = n
                    }
                    let n = fuse_add_direntry_plus(req, buffer + used, size - used, name, &e, off_t(listed.offset))
                    if n > size - used {
                        if let child { fs.inodes.withLock { $0.forget(child, 1) } }
                        break fill
                    }
                    used += n
                    if let child { counted.append(child) }
                    if listed.isPending { fs.listedPending(fh, name) }
                }
            }
            if fuse_reply_buf(req, buffer, used) != 0 {
                fs.inodes.withLock { t in for c in counted { t.forget(c, 1) } }
            }
        }
    }

    static func releasedir(_ req: fuse_req_t?, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        fileSystem(req).closeListing(fi!.pointee.fh)
        fuse_reply_err(req, 0)
    }

    static func statfs(_ req: fuse_req_t?) {
        answer(req) { fs throws(FileSystemError) in
            let store = fs.tree.storePath
            let dir = PathText.parent(store)
            var st = statvfs()
            if statvfs(dir.isEmpty ? "/" : dir, &st) != 0 { st = statvfs() }
            st.f_namemax = 255
            fuse_reply_statfs(req, &st)
        }
    }

    // MARK: files

    static func create(_ req: fuse_req_t?, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>?,
                       _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        answer(req) { fs throws(FileSystemError) in
            let n = try FuseOperations.name(name)
            let location = try fs.location(parent, n)
            let h = try fs.tree.create(location, flags: fi!.pointee.flags)
            let st: FileStat
            do throws(FileSystemError) { st = try fs.tree.stat(handle: h) } catch {
                try? fs.tree.release(h)
                throw error
            }
            fi!.pointee.fh = h
            fi!.pointee.direct_io = 1
            let spelledOtherwise = !location.isListedSpelling(n, isDirectory: false)
            let (ino, alias) = fs.inodes.withLock { t in
                let ino = t.created(parent, n, alias: spelledOtherwise)
                t.opened(ino, h)
                return (ino, t.isAlias(ino))
            }
            var e = entry(ino, st, alias: alias)
            // Interrupted: the kernel knows neither the inode nor the handle.
            if fuse_reply_create(req, &e, fi) != 0 {
                fs.inodes.withLock { t in
                    t.released(ino, h)
                    t.forget(ino, 1)
                }
                try? fs.tree.release(h)
            }
        }
    }

    static func open(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        answer(req) { fs throws(FileSystemError) in
            let flags = fi!.pointee.flags
            let h = try fs.tree.open(try fs.locationOrReplaced(ino), flags: flags, caller: caller(req))
            // Secrets are never kept in the page cache: every read reaches the daemon, so a
            // lock takes effect at once.
            fi!.pointee.fh = h
            fi!.pointee.direct_io = 1
            // A handle that cannot write has nothing to commit at close(2), so the kernel
            // need not wait for a flush round trip (a reader's close costs one request less).
            if flags & O_ACCMODE == O_RDONLY { fi!.pointee.noflush = 1 }
            fs.inodes.withLock { $0.opened(ino, h) }
            if fuse_reply_open(req, fi) != 0 {
                fs.inodes.withLock { $0.released(ino, h) }
                try? fs.tree.release(h)
            }
        }
    }

    /// The reply goes out straight from the open file's locked buffer: no copy of the secret
    /// is made, in our memory or libfuse's (the shim uses no splice).
    static func read(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ size: Int, _ offset: off_t,
                     _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        answer(req) { fs throws(FileSystemError) in
            let h = fi!.pointee.fh
            try fs.tree.withReadBytes(h, offset: Int(offset), count: size) { bytes in
                _ = fuse_reply_buf(req, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), bytes.count)
            }
            fs.noteRead(ino, handle: h)
        }
    }

    static func write(_ req: fuse_req_t?, _ buf: UnsafePointer<CChar>?, _ size: Int, _ offset: off_t,
                      _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        answer(req) { fs throws(FileSystemError) in
            let n = try fs.tree.write(fi!.pointee.fh, offset: Int(offset), data: UnsafeRawBufferPointer(start: buf, count: size))
            fuse_reply_write(req, n)
        }
    }

    static func lseek(_ req: fuse_req_t?, _ offset: off_t, _ whence: Int32, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        answer(req) { fs throws(FileSystemError) in
            fuse_reply_lseek(req, off_t(try fs.tree.seek(handle: fi!.pointee.fh, offset: Int(offset), whence: whence)))
        }
    }

    static func flush(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        answer(req) { fs throws(FileSystemError) in
            try committing(fs, ino, entryBeforeReply: true) { () throws(FileSystemError) in try fs.tree.flush(fi!.pointee.fh) }
            fuse_reply_err(req, 0)
        }
    }

    static func fsync(_ req: fuse_req_t?, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        answer(req) { fs throws(FileSystemError) in
            // A failed fsync drops nothing (`KeychainTree.sync`).
            try fs.tree.sync(fi!.pointee.fh)
            fuse_reply_err(req, 0)
        }
    }

    static func release(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        let h = fi!.pointee.fh
        answer(req) { fs throws(FileSystemError) in
            defer { fs.inodes.withLock { $0.released(ino, h) } }
            try committing(fs, ino, entryBeforeReply: false) { () throws(FileSystemError) in try fs.tree.release(h) }
            fuse_reply_err(req, 0)
        }
    }

    /// A close's commit (FLUSH, RELEASE) that fails may drop a new file the kernel made with its
    /// create, and holds: a pending item whose writer a lock revoked, or that a full disk or its
    /// size refused (`KeychainTree.commit`). Its name is gone then, and the kernel is told
    /// (`FuseFileSystem.dropNameIfGone`).
    private static func committing(_ fs: FuseFileSystem, _ ino: fuse_ino_t, entryBeforeReply: Bool,
                                   _ commit: () throws(FileSystemError) -> Void) throws(FileSystemError) {
        do { try commit() } catch {
            fs.dropNameIfGone(ino, entryBeforeReply: entryBeforeReply)
            throw error
        }
    }

    // MARK: extended attributes

    static func getxattr(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ name: UnsafePointer<CChar>?, _ size: Int) {
        answer(req) { fs throws(FileSystemError) in
            guard let name else { throw .invalid }
            guard KeychainTree.isKeychainAttribute(name) else { throw .noData }
            try replyXattr(req, try fs.tree.attribute(try fs.location(ino), name: String(cString: name)), size)
        }
    }

    static func listxattr(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ size: Int) {
        answer(req) { fs throws(FileSystemError) in
            let bytes = try fs.tree.listAttributes(try fs.location(ino)).flatMap { name -> [UInt8] in Array(name.utf8) + [0] }
            try replyXattr(req, bytes, size)
        }
    }

    static func setxattr(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ name: UnsafePointer<CChar>?,
                         _ value: UnsafePointer<CChar>?, _ size: Int, _ flags: Int32) {
        answer(req) { fs throws(FileSystemError) in
            guard let name else { throw .invalid }
            let location = try fs.location(ino), n = String(cString: name)
            let exists = (try? fs.tree.attribute(location, name: n)) != nil
            if flags & xattrCreate != 0 && exists { throw .exists }
            if flags & xattrReplace != 0 && !exists { throw .noData }
            let bytes = value.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
            try fs.tree.setAttribute(location, name: n, value: bytes, caller: caller(req))
            fuse_reply_err(req, 0)
        }
    }

    static func removexattr(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ name: UnsafePointer<CChar>?) {
        answer(req) { fs throws(FileSystemError) in
            guard let name else { throw .invalid }
            try fs.tree.removeAttribute(try fs.location(ino), name: String(cString: name), caller: caller(req))
            fuse_reply_err(req, 0)
        }
    }

    // MARK: replies

    /// An entry the kernel may keep for the timeouts, being told of every change to it; an
    /// `alias` (a spelling the tree does not list, of which it is never told) for none.
    static func entry(_ ino: UInt64, _ st: FileStat, alias: Bool = false) -> fuse_entry_param {
        var e = fuse_entry_param()
        e.ino = ino
        e.attr = attributes(st, ino)
        e.attr_timeout = alias ? 0 : attrTimeout
        e.entry_timeout = alias ? 0 : entryTimeout
        return e
    }

    /// Replies with a new entry; if the reply fails (the request was interrupted), the kernel
    /// never counted the lookup.
    static func replyEntry(_ req: fuse_req_t?, _ fs: FuseFileSystem, _ node: (ino: UInt64, alias: Bool), _ st: FileStat) {
        var e = entry(node.ino, st, alias: node.alias)
        if fuse_reply_entry(req, &e) != 0 { fs.inodes.withLock { $0.forget(node.ino, 1) } }
    }

    /// getxattr/listxattr convention: size 0 asks for the length; too small a buffer is ERANGE.
    static func replyXattr(_ req: fuse_req_t?, _ bytes: [UInt8], _ size: Int) throws(FileSystemError) {
        if size == 0 {
            fuse_reply_xattr(req, bytes.count)
            return
        }
        guard size >= bytes.count else { throw FileSystemError(ERANGE) }
        _ = bytes.withUnsafeBytes { fuse_reply_buf(req, $0.baseAddress?.assumingMemoryBound(to: CChar.self), bytes.count) }
    }

    /// The daemon's own ids, which its files show: read at the first request, after any change
    /// of user at start. Two system calls per attribute reply were two of each `ls -l` entry's.
    private static let owner = (uid: getuid(), gid: getgid())

    static func attributes(_ s: FileStat, _ ino: UInt64) -> stat {
        var st = stat()
        st.st_ino = UInt(ino)
        st.st_mode = s.mode
        st.st_nlink = UInt(s.links)
        st.st_size = s.size
        st.st_uid = owner.uid
        st.st_gid = owner.gid
        st.st_blksize = 4096
        st.st_blocks = (s.size + 511) / 512
        let seconds = s.modified.timeIntervalSince1970.rounded(.down)
        let t = timespec(tv_sec: Int(seconds), tv_nsec: min(Int((s.modified.timeIntervalSince1970 - seconds) * 1e9), 999_999_999))
        st.st_mtim = t
        st.st_ctim = t
        st.st_atim = t
        return st
    }
}
