import CFuseShim
import Glibc
import KeychainFileSystem

/// The libfuse high-level callbacks. Each one only translates: C arguments into a
/// `KeychainTree` call, and its result or `FileSystemError` back into libfuse's convention.
enum FuseOperations {
    static func context() -> MountContext {
        Unmanaged<MountContext>.fromOpaque(kcfs_private_data()!).takeUnretainedValue()
    }

    static func tree() -> KeychainTree { context().tree }

    /// Runs one operation: 0 or a byte count on success, -errno on failure.
    static func call(_ path: UnsafePointer<CChar>?, _ body: (KeychainTree, String) throws(FileSystemError) -> Int32) -> Int32 {
        guard let path, let p = String(validatingCString: path) else { return -EINVAL }
        let t = tree()
        t.noteAccess()
        do { return try body(t, p) } catch { return -error.errno }
    }

    /// Runs one operation on an open file.
    static func onHandle(_ fi: UnsafeMutablePointer<fuse_file_info>?,
                         _ body: (KeychainTree, UInt64) throws(FileSystemError) -> Int32) -> Int32 {
        guard let fi else { return -EBADF }
        let t = tree()
        t.noteAccess()
        do { return try body(t, fi.pointee.fh) } catch { return -error.errno }
    }

    // From <linux/fs.h>, which Glibc does not export to Swift.
    static let renameNoReplace: UInt32 = 1
    static let renameExchange: UInt32 = 2
    static let xattrCreate: Int32 = 1
    static let xattrReplace: Int32 = 2

    static func make() -> fuse_operations {
        var ops = fuse_operations()
        ops.`init` = { _, cfg in
            if let cfg {
                // Secrets are never kept in the page cache: every read reaches the daemon, so a
                // lock takes effect at once.
                cfg.pointee.direct_io = 1
                cfg.pointee.kernel_cache = 0
                cfg.pointee.hard_remove = 1
                cfg.pointee.entry_timeout = 1
                cfg.pointee.attr_timeout = 1
                cfg.pointee.negative_timeout = 0
            }
            return kcfs_private_data()
        }
        ops.getattr = { path, st, _ in
            FuseOperations.call(path) { t, p throws(FileSystemError) in
                let s = try t.stat(p)
                FuseOperations.fill(st!, s)
                return 0
            }
        }
        ops.readdir = { path, buf, filler, _, _, _ in
            FuseOperations.call(path) { t, p throws(FileSystemError) in
                let entries = try t.list(p)
                _ = filler!(buf, ".", nil, 0, fuse_fill_dir_flags(rawValue: 0))
                _ = filler!(buf, "..", nil, 0, fuse_fill_dir_flags(rawValue: 0))
                for e in entries { _ = filler!(buf, e.name, nil, 0, fuse_fill_dir_flags(rawValue: 0)) }
                return 0
            }
        }
        ops.mkdir = { path, _ in FuseOperations.call(path) { t, p throws(FileSystemError) in try t.makeDirectory(p); return 0 } }
        ops.rmdir = { path in FuseOperations.call(path) { t, p throws(FileSystemError) in try t.removeDirectory(p); return 0 } }
        ops.unlink = { path in FuseOperations.call(path) { t, p throws(FileSystemError) in try t.remove(p); return 0 } }
        ops.rename = { from, to, flags in
            FuseOperations.call(from) { t, p throws(FileSystemError) in
                guard let to, let dst = String(validatingCString: to) else { throw .invalid }
                try t.rename(p, to: dst, noReplace: flags & FuseOperations.renameNoReplace != 0, exchange: flags & FuseOperations.renameExchange != 0)
                return 0
            }
        }
        // Items are only ever regular files made by create().
        ops.link = { _, _ in -EPERM }
        ops.symlink = { _, _ in -EPERM }
        ops.mknod = { _, _, _ in -EPERM }
        ops.chmod = { path, mode, _ in FuseOperations.call(path) { t, p throws(FileSystemError) in try t.setMode(p, mode: mode); return 0 } }
        ops.chown = { path, uid, gid, _ in
            FuseOperations.call(path) { t, p throws(FileSystemError) in try t.setOwner(p, uid: uid, gid: gid); return 0 }
        }
        ops.utimens = { path, _, _ in FuseOperations.call(path) { t, p throws(FileSystemError) in _ = try t.stat(p); return 0 } }
        ops.truncate = { path, size, fi in
            // ftruncate(2) names the open file; its path may be gone (NULL) by then.
            if let fi {
                return FuseOperations.onHandle(fi) { t, h throws(FileSystemError) in try t.truncate(handle: h, size: Int(size)); return 0 }
            }
            return FuseOperations.call(path) { t, p throws(FileSystemError) in
                try t.truncate(p, size: Int(size))
                return 0
            }
        }
        ops.open = { path, fi in
            FuseOperations.call(path) { t, p throws(FileSystemError) in
                fi!.pointee.fh = try t.open(p, flags: fi!.pointee.flags)
                fi!.pointee.direct_io = 1
                return 0
            }
        }
        ops.create = { path, _, fi in
            FuseOperations.call(path) { t, p throws(FileSystemError) in
                fi!.pointee.fh = try t.create(p, flags: fi!.pointee.flags)
                fi!.pointee.direct_io = 1
                return 0
            }
        }
        // libfuse's buffers that carry the bytes are wiped by the shim once the reply is sent.
        ops.read = { _, buf, size, offset, fi in
            FuseOperations.onHandle(fi) { t, h throws(FileSystemError) in
                let n = try t.read(h, offset: Int(offset), count: size, into: buf!)
                FuseOperations.context().noteRead(node: kcfs_current_nodeid(), handle: h)
                return Int32(n)
            }
        }
        ops.write = { _, buf, size, offset, fi in
            FuseOperations.onHandle(fi) { t, h throws(FileSystemError) in
                Int32(try t.write(h, offset: Int(offset), data: UnsafeRawBufferPointer(start: buf, count: size)))
            }
        }
        ops.flush = { _, fi in FuseOperations.onHandle(fi) { t, h throws(FileSystemError) in try t.flush(h); return 0 } }
        ops.fsync = { _, _, fi in FuseOperations.onHandle(fi) { t, h throws(FileSystemError) in try t.sync(h); return 0 } }
        ops.release = { _, fi in FuseOperations.onHandle(fi) { t, h throws(FileSystemError) in try t.release(h); return 0 } }
        ops.statfs = { path, st in
            FuseOperations.call(path) { t, _ throws(FileSystemError) in
                let dir = String(t.keychain.path.prefix(upTo: t.keychain.path.lastIndex(of: "/") ?? t.keychain.path.endIndex))
                if statvfs(dir.isEmpty ? "/" : dir, st!) != 0 { st!.pointee = statvfs() }
                st!.pointee.f_namemax = 255
                return 0
            }
        }
        ops.getxattr = { path, name, value, size in
            FuseOperations.call(path) { t, p throws(FileSystemError) in
                guard let name else { throw .invalid }
                return try FuseOperations.copyOut(try t.attribute(p, name: String(cString: name)), value, size)
            }
        }
        ops.listxattr = { path, list, size in
            FuseOperations.call(path) { t, p throws(FileSystemError) in
                let bytes: [UInt8] = try t.listAttributes(p).flatMap { name -> [UInt8] in Array(name.utf8) + [0] }
                return try FuseOperations.copyOut(bytes, list, size)
            }
        }
        ops.setxattr = { path, name, value, size, flags in
            FuseOperations.call(path) { t, p throws(FileSystemError) in
                guard let name else { throw .invalid }
                let n = String(cString: name)
                let exists = (try? t.attribute(p, name: n)) != nil
                if flags & FuseOperations.xattrCreate != 0 && exists { throw .exists }
                if flags & FuseOperations.xattrReplace != 0 && !exists { throw .noData }
                let bytes = value.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
                try t.setAttribute(p, name: n, value: bytes)
                return 0
            }
        }
        ops.removexattr = { path, name in
            FuseOperations.call(path) { t, p throws(FileSystemError) in
                guard let name else { throw .invalid }
                try t.removeAttribute(p, name: String(cString: name))
                return 0
            }
        }
        return ops
    }

    /// getxattr/listxattr convention: size 0 asks for the length; too small a buffer is ERANGE.
    static func copyOut(_ bytes: [UInt8], _ dst: UnsafeMutablePointer<CChar>?, _ size: Int) throws(FileSystemError) -> Int32 {
        if size == 0 { return Int32(bytes.count) }
        guard size >= bytes.count else { throw FileSystemError(ERANGE) }
        bytes.withUnsafeBytes { UnsafeMutableRawPointer(dst!).copyMemory(from: $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!, byteCount: bytes.count) }
        return Int32(bytes.count)
    }

    static func fill(_ st: UnsafeMutablePointer<stat>, _ s: FileStat) {
        st.pointee = stat()
        st.pointee.st_mode = s.mode
        st.pointee.st_nlink = UInt(s.links)
        st.pointee.st_size = s.size
        st.pointee.st_uid = getuid()
        st.pointee.st_gid = getgid()
        st.pointee.st_blksize = 4096
        st.pointee.st_blocks = (s.size + 511) / 512
        let t = timespec(tv_sec: Int(s.modified.timeIntervalSince1970), tv_nsec: 0)
        st.pointee.st_mtim = t
        st.pointee.st_ctim = t
        st.pointee.st_atim = t
    }
}
