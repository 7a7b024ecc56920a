// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif
import KeychainErrors

/// Files of this user's that keychainfs trusts: the device key, the rollback counters and the
/// logs in the state directory, the control sockets in the runtime directory. Trusted only if
/// this user owns them, they are not symlinks, and no one else can write them (the directory)
/// or read them either (a file): a directory another user could write lets them put their own
/// device key, counter or log in place of ours.
package enum PrivateFile {
    /// A directory (not a symlink) this user owns that no one else can write.
    package static func isPrivateDirectory(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0 && st.st_mode & S_IFMT == S_IFDIR && st.st_uid == geteuid()
            && st.st_mode & 0o022 == 0
    }

    /// Throws unless `path` is missing (to be made 0700 when needed) or, followed if it is a
    /// symlink (a state directory kept elsewhere), a directory of this user's that no one else
    /// can write: what another user could swap is the directory itself, whose owner says whose it is.
    package static func checkDirectory(_ path: String) throws(KeychainError) {
        var st = stat()
        guard stat(path, &st) == 0 else {
            if errno == ENOENT { return }
            throw .io("\(path): \(String(cString: strerror(errno)))")
        }
        guard st.st_mode & S_IFMT == S_IFDIR else { throw .io("\(path) is not a directory; refusing to use it") }
        guard st.st_uid == geteuid() else {
            throw .io("\(path) belongs to user \(st.st_uid), not to this one (\(geteuid())); refusing to use it "
                      + "(if it is yours, from a run as another user: chown -R \(geteuid()) \(path))")
        }
        guard st.st_mode & 0o022 == 0 else {
            throw .io("\(path) can be written by other users (mode \(String(st.st_mode & 0o777, radix: 8))); "
                      + "refusing to use it (chmod 700 \(path))")
        }
    }

    /// Opens `path` (followed if a symlink) read-only if it is a regular file this user owns
    /// that no one else can read or write; nil if it does not exist.
    package static func openForReading(_ path: String) throws(KeychainError) -> Int32? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            throw .io("cannot open \(path): \(String(cString: strerror(errno)))")
        }
        return try checked(fd, path)
    }

    /// Opens `path` for appending, made 0600 if missing, if it is such a file (not a symlink).
    package static func openForAppending(_ path: String) throws(KeychainError) -> Int32 {
        let fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .io("\(path): \(String(cString: strerror(errno)))") }
        return try checked(fd, path)
    }

    private static func checked(_ fd: Int32, _ path: String) throws(KeychainError) -> Int32 {
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            throw .io("\(path) is not a regular file; refusing to use it")
        }
        guard st.st_uid == geteuid(), st.st_mode & 0o077 == 0 else {
            close(fd)
            let fix = st.st_uid == geteuid() ? "chmod 600 \(path)" : "chown \(geteuid()) \(path) if it is yours"
            throw .io("\(path) is not a private regular file of ours (owned by this user, mode 0600; it is user \(st.st_uid)'s, "
                      + "mode \(String(st.st_mode & 0o777, radix: 8))); refusing to use it (\(fix))")
        }
        return fd
    }
}
