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
        return lstat(path, &st) == 0 && st.st_mode & S_IFMT == S_IFDIR && st.st_uid == getuid()
            && st.st_mode & 0o022 == 0
    }

    /// Throws unless `path` is missing (to be made 0700 when needed) or a private directory.
    package static func checkDirectory(_ path: String) throws(KeychainError) {
        var st = stat()
        guard lstat(path, &st) == 0 else {
            if errno == ENOENT { return }
            throw .io("\(path): \(String(cString: strerror(errno)))")
        }
        guard isPrivateDirectory(path) else {
            throw .io("\(path) is not a directory of this user's that only it can write "
                      + "(chmod 700 it if it is yours); refusing to use it")
        }
    }

    /// Opens `path` read-only if it is a regular file this user owns that no one else can read
    /// or write; nil if it does not exist.
    package static func openForReading(_ path: String) throws(KeychainError) -> Int32? {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            throw .io("cannot open \(path): \(String(cString: strerror(errno)))")
        }
        return try checked(fd, path)
    }

    /// Opens `path` for appending, made 0600 if missing, if it is such a file.
    package static func openForAppending(_ path: String) throws(KeychainError) -> Int32 {
        let fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .io("\(path): \(String(cString: strerror(errno)))") }
        return try checked(fd, path)
    }

    private static func checked(_ fd: Int32, _ path: String) throws(KeychainError) -> Int32 {
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_uid == geteuid(), st.st_mode & 0o077 == 0 else {
            close(fd)
            throw .io("\(path) is not a private regular file of ours (owned by this user, mode 0600); refusing to use it")
        }
        return fd
    }
}
