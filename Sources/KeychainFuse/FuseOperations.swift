import CFuseShim
import Foundation
import Glibc
import KeychainAccess
import KeychainFileSystem

/// The libfuse low-level callbacks. Each one translates: the inode into a path (or an open
/// handle), the call into a `KeychainTree` method, and its result or `FileSystemError` into
/// a reply. The low-level API, not the high-level one, because only with inode numbers can an
/// open file whose name is gone still be answered (`fstat` after `unlink`).
enum FuseOperations {
    /// How long the kernel may keep names and attributes: changes made through the control
    /// socket may take that long to show in `stat`; reads are never cached (direct I/O).
    static let entryTimeout = 1.0
    static let attrTimeout = 1.0

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
                            _ remove: (KeychainTree, String) throws(FileSystemError) -> Void) {
        answer(req) { fs throws(FileSystemError) in
            let n = try FuseOperations.name(name)
            try remove(fs.tree, try fs.path(parent, n))
            fs.inodes.withLock { $0.unlink(parent, n) }
            fuse_reply_err(req, 0)
        }
    }

    static func make() -> fuse_lowlevel_ops {
        var ops = fuse_lowlevel_ops()
        ops.lookup = { req, parent, name in
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                let n = try FuseOperations.name(name)
                let st = try fs.tree.stat(try fs.path(parent, n))
                FuseOperations.replyEntry(req, fs, fs.inodes.withLock { $0.lookedUp(parent, n) }, st)
            }
        }
        ops.forget = { req, ino, count in
            FuseOperations.fileSystem(req).inodes.withLock { $0.forget(ino, count) }
            fuse_reply_none(req)
        }
        ops.forget_multi = { req, count, forgets in
            FuseOperations.fileSystem(req).inodes.withLock { t in
                for i in 0..<count { t.forget(forgets![i].ino, forgets![i].nlookup) }
            }
            fuse_reply_none(req)
        }
        ops.getattr = { req, ino, fi in
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                var attr = FuseOperations.attributes(try fs.stat(ino, handle: fs.fileHandle(ino, fi)), ino)
                fuse_reply_attr(req, &attr, FuseOperations.attrTimeout)
            }
        }
        ops.setattr = { req, ino, attr, toSet, fi in
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                let handle = fs.fileHandle(ino, fi)
                let current = try fs.stat(ino, handle: handle)
                let wanted = attr!.pointee
                if toSet & FuseOperations.setMode != 0 { try KeychainTree.checkMode(wanted.st_mode, of: current) }
                if toSet & (FuseOperations.setUID | FuseOperations.setGID) != 0 {
                    try KeychainTree.checkOwner(uid: toSet & FuseOperations.setUID != 0 ? wanted.st_uid : UInt32.max,
                                                gid: toSet & FuseOperations.setGID != 0 ? wanted.st_gid : UInt32.max)
                }
                if toSet & FuseOperations.setSize != 0 {
                    guard !current.isDirectory else { throw .isDirectory }
                    // ftruncate(2) names the open file, whose name may be gone by then.
                    if let handle {
                        try fs.tree.truncate(handle: handle, size: Int(wanted.st_size))
                    } else {
                        try fs.tree.truncate(try fs.path(ino), size: Int(wanted.st_size), caller: FuseOperations.caller(req))
                    }
                }
                // Times are accepted and not kept: an item's times are those of its secret.
                var reply = FuseOperations.attributes(try fs.stat(ino, handle: handle), ino)
                fuse_reply_attr(req, &reply, FuseOperations.attrTimeout)
            }
        }
        ops.mkdir = { req, parent, name, _ in
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                let n = try FuseOperations.name(name)
                let path = try fs.path(parent, n)
                try fs.tree.makeDirectory(path)
                let st = try fs.tree.stat(path)
                FuseOperations.replyEntry(req, fs, fs.inodes.withLock { $0.lookedUp(parent, n) }, st)
            }
        }
        ops.unlink = { req, parent, name in
            FuseOperations.removeEntry(req, parent, name) { tree, path throws(FileSystemError) in
                try tree.remove(path, caller: FuseOperations.caller(req))
            }
        }
        ops.rmdir = { req, parent, name in
            FuseOperations.removeEntry(req, parent, name) { tree, path throws(FileSystemError) in try tree.removeDirectory(path) }
        }
        ops.rename = { req, parent, name, newParent, newName, flags in
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                let from = try FuseOperations.name(name), to = try FuseOperations.name(newName)
                try fs.tree.rename(try fs.path(parent, from), to: try fs.path(newParent, to),
                                   noReplace: flags & FuseOperations.renameNoReplace != 0, exchange: flags & FuseOperations.renameExchange != 0,
                                   caller: FuseOperations.caller(req))
                fs.inodes.withLock { $0.move(parent, from, to: newParent, to) }
                fuse_reply_err(req, 0)
            }
        }
        // Items are only ever regular files made by create().
        ops.link = { req, _, _, _ in fuse_reply_err(req, EPERM) }
        ops.symlink = { req, _, _, _ in fuse_reply_err(req, EPERM) }
        ops.mknod = { req, _, _, _, _ in fuse_reply_err(req, EPERM) }
        ops.create = { req, parent, name, _, fi in
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                let n = try FuseOperations.name(name)
                let h = try fs.tree.create(try fs.path(parent, n), flags: fi!.pointee.flags)
                let st: FileStat
                do throws(FileSystemError) { st = try fs.tree.stat(handle: h) } catch {
                    try? fs.tree.release(h)
                    throw error
                }
                fi!.pointee.fh = h
                fi!.pointee.direct_io = 1
                let ino = fs.inodes.withLock { t in
                    let ino = t.created(parent, n)
                    t.opened(ino, h)
                    return ino
                }
                var e = FuseOperations.entry(ino, st)
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
        ops.open = { req, ino, fi in
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                let flags = fi!.pointee.flags
                let h = try fs.tree.open(try fs.location(ino), flags: flags, caller: FuseOperations.caller(req))
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
        // libfuse's buffers that carry the bytes are wiped by the shim once the reply is sent;
        // this one, the binding's own, here.
        ops.read = { req, ino, size, offset, fi in
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                let buffer = UnsafeMutableRawPointer.allocate(byteCount: max(size, 1), alignment: 16)
                var n = 0
                defer {
                    explicit_bzero(buffer, n)
                    buffer.deallocate()
                }
                let h = fi!.pointee.fh
                n = try fs.tree.read(h, offset: Int(offset), count: size, into: buffer)
                fs.noteRead(ino, handle: h)
                fuse_reply_buf(req, buffer.assumingMemoryBound(to: CChar.self), n)
            }
        }
        ops.write = { req, _, buf, size, offset, fi in
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                let n = try fs.tree.write(fi!.pointee.fh, offset: Int(offset), data: UnsafeRawBufferPointer(start: buf, count: size))
                fuse_reply_write(req, n)
            }
        }
        ops.lseek = { req, _, offset, whence, fi in
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                fuse_reply_lseek(req, off_t(try fs.tree.seek(handle: fi!.pointee.fh, offset: Int(offset), whence: whence)))
            }
        }
        ops.flush = { req, _, fi in
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                try fs.tree.flush(fi!.pointee.fh)
                fuse_reply_err(req, 0)
            }
        }
        ops.fsync = { req, _, _, fi in
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                try fs.tree.sync(fi!.pointee.fh)
                fuse_reply_err(req, 0)
            }
        }
        ops.release = { req, ino, fi in
            let h = fi!.pointee.fh
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                defer { fs.inodes.withLock { $0.released(ino, h) } }
                try fs.tree.release(h)
                fuse_reply_err(req, 0)
            }
        }
        ops.opendir = { req, ino, fi in
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                fi!.pointee.fh = try fs.openListing(ino)
                fuse_reply_open(req, fi)
            }
        }
        ops.readdir = { req, ino, size, offset, fi in
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                let entries = try fs.entries(fi!.pointee.fh, of: ino, offset: Int(offset))
                let inodes = fs.inodes.withLock { t in
                    entries.map { e -> UInt64 in
                        switch e.name {
                        case ".": ino
                        case "..": t.nodes[ino].map { $0.parent == 0 ? InodeTable.root : $0.parent } ?? InodeTable.root
                        default: t.child(ino, e.name) ?? FuseOperations.unknownInode
                        }
                    }
                }
                let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: max(size, 1))
                defer { buffer.deallocate() }
                var used = 0
                var i = Int(offset)
                while i < entries.count {
                    var st = stat()
                    st.st_ino = UInt(inodes[i])
                    st.st_mode = entries[i].isDirectory ? S_IFDIR : S_IFREG
                    let n = fuse_add_direntry(req, buffer + used, size - used, entries[i].name, &st, off_t(i + 1))
                    if n > size - used { break }
                    used += n
                    i += 1
                }
                fuse_reply_buf(req, buffer, used)
            }
        }
        // With attributes in the listing, `ls -l` costs one request per buffer of entries, not
        // a lookup per name: each entry the reply holds counts as a lookup of it.
        ops.readdirplus = { req, ino, size, offset, fi in
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                let entries = try fs.entries(fi!.pointee.fh, of: ino, offset: Int(offset))
                let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: max(size, 1))
                defer { buffer.deallocate() }
                var used = 0
                var counted: [UInt64] = []
                var i = Int(offset)
                while i < entries.count {
                    defer { i += 1 }
                    var e = fuse_entry_param()
                    var child: UInt64?
                    if entries[i].name == "." || entries[i].name == ".." {
                        // The kernel takes neither as a lookup; inode 0 says so.
                        e.attr.st_ino = UInt(ino)
                        e.attr.st_mode = S_IFDIR
                    } else {
                        // A name gone since the listing was taken is left out, as readdir would
                        // leave it to the lookup that follows.
                        guard let st = try? fs.tree.stat(try fs.path(ino, entries[i].name)) else { continue }
                        let n = fs.inodes.withLock { $0.lookedUp(ino, entries[i].name) }
                        e = FuseOperations.entry(n, st)
                        child = n
                    }
                    let n = fuse_add_direntry_plus(req, buffer + used, size - used, entries[i].name, &e, off_t(i + 1))
                    if n > size - used {
                        if let child { fs.inodes.withLock { $0.forget(child, 1) } }
                        break
                    }
                    used += n
                    if let child { counted.append(child) }
                }
                if fuse_reply_buf(req, buffer, used) != 0 {
                    fs.inodes.withLock { t in for c in counted { t.forget(c, 1) } }
                }
            }
        }
        ops.releasedir = { req, _, fi in
            FuseOperations.fileSystem(req).closeListing(fi!.pointee.fh)
            fuse_reply_err(req, 0)
        }
        ops.statfs = { req, _ in
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                let store = fs.tree.storePath
                let dir = String(store.prefix(upTo: store.lastIndex(of: "/") ?? store.endIndex))
                var st = statvfs()
                if statvfs(dir.isEmpty ? "/" : dir, &st) != 0 { st = statvfs() }
                st.f_namemax = 255
                fuse_reply_statfs(req, &st)
            }
        }
        ops.getxattr = { req, ino, name, size in
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                guard let name else { throw .invalid }
                try FuseOperations.replyXattr(req, try fs.tree.attribute(try fs.path(ino), name: String(cString: name)), size)
            }
        }
        ops.listxattr = { req, ino, size in
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                let bytes = try fs.tree.listAttributes(try fs.path(ino)).flatMap { name -> [UInt8] in Array(name.utf8) + [0] }
                try FuseOperations.replyXattr(req, bytes, size)
            }
        }
        ops.setxattr = { req, ino, name, value, size, flags in
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                guard let name else { throw .invalid }
                let path = try fs.path(ino), n = String(cString: name)
                let exists = (try? fs.tree.attribute(path, name: n)) != nil
                if flags & FuseOperations.xattrCreate != 0 && exists { throw .exists }
                if flags & FuseOperations.xattrReplace != 0 && !exists { throw .noData }
                let bytes = value.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
                try fs.tree.setAttribute(path, name: n, value: bytes, caller: FuseOperations.caller(req))
                fuse_reply_err(req, 0)
            }
        }
        ops.removexattr = { req, ino, name in
            FuseOperations.answer(req) { fs throws(FileSystemError) in
                guard let name else { throw .invalid }
                try fs.tree.removeAttribute(try fs.path(ino), name: String(cString: name), caller: FuseOperations.caller(req))
                fuse_reply_err(req, 0)
            }
        }
        return ops
    }

    static func entry(_ ino: UInt64, _ st: FileStat) -> fuse_entry_param {
        var e = fuse_entry_param()
        e.ino = ino
        e.attr = attributes(st, ino)
        e.attr_timeout = attrTimeout
        e.entry_timeout = entryTimeout
        return e
    }

    /// Replies with a new entry; if the reply fails (the request was interrupted), the kernel
    /// never counted the lookup.
    static func replyEntry(_ req: fuse_req_t?, _ fs: FuseFileSystem, _ ino: UInt64, _ st: FileStat) {
        var e = entry(ino, st)
        if fuse_reply_entry(req, &e) != 0 { fs.inodes.withLock { $0.forget(ino, 1) } }
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

    static func attributes(_ s: FileStat, _ ino: UInt64) -> stat {
        var st = stat()
        st.st_ino = UInt(ino)
        st.st_mode = s.mode
        st.st_nlink = UInt(s.links)
        st.st_size = s.size
        st.st_uid = getuid()
        st.st_gid = getgid()
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
