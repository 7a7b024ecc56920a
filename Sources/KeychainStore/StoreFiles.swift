import Foundation
import KeychainModel

/// The files of a store, private from their first byte.
///
/// SQLite creates its side files with the database's mode, and a file once opened by another
/// user stays readable through that descriptor for good: a new store's files are therefore
/// made here, `O_CREAT|O_EXCL|O_NOFOLLOW` with mode 0600, before SQLite opens any of them. A
/// side file that already exists is used only if it is ours: a regular file, not a symlink,
/// owned by this user and readable by no one else. And a store's directory that another user
/// can write to is refused unless it is sticky: there they could replace any of these files.
/// In a sticky directory (/tmp) another user can at worst plant a name that makes us refuse,
/// and the error names it.
enum StoreFiles {
    /// SQLite's files beside the database, and the disk reserve (`WriteAheadLog`).
    static let sideSuffixes = ["-wal", "-shm", "-journal", "-reserve"]

    /// Checks the directory and any side file left from before, and makes the side files
    /// SQLite is about to open, empty and 0600, where they are missing; with `create`, the
    /// database too, which must not exist. Returns what it made, for `removeUnused`.
    ///
    /// At every open, not only at `init`: SQLite deletes `-wal` and `-shm` when the store is
    /// closed and makes them again at the next open with the database's mode, which for a
    /// database copied with a wider mode would be readable by others.
    static func prepare(storePath path: String, create: Bool) throws -> [String] {
        try checkDirectory(of: path)
        for suffix in sideSuffixes { try checkExisting(path + suffix) }
        var made: [String] = []
        do {
            // The reserve is made by `WriteAheadLog.keepReserve` with the same flags; a
            // `-journal` only SQLite's first transaction of a new store uses, before WAL mode.
            if create {
                try createPrivate(path, existsError: .storeExists(path))
                made.append(path)
                try createPrivate(path + "-journal", existsError: .io(notOurs(path + "-journal", "it appeared while the store was made")))
                made.append(path + "-journal")
            }
            made += try makeMissingWAL(storePath: path)
        } catch {
            removeUnused(made)
            throw error
        }
        return made
    }

    /// The path SQLite gives the database, with every symbolic link resolved: its side files
    /// (`-wal`, `-shm`, `-journal`) are made beside that, not beside a link to the store, and
    /// keychainfs must make, check and watch those same files. A store not yet made resolves by
    /// its directory.
    static func resolved(_ path: String) -> String {
        let absolute = KeychainLocations.absolute(path)
        if let real = realpath(absolute, nil) {
            defer { free(real) }
            return String(cString: real)
        }
        let parent = PathText.parent(absolute)
        guard parent != absolute, let real = realpath(parent, nil) else { return absolute }
        defer { free(real) }
        let directory = String(cString: real)
        return (directory == "/" ? "" : directory) + "/" + PathText.lastComponent(absolute)
    }

    /// Whether the WAL may hold frames: not when it is missing, empty, or emptied by the store's
    /// VFS, which overwrites an emptied WAL's header and frames with zeros (CStoreVFS); its
    /// header is then no WAL's, and SQLite reads it as an empty WAL.
    static func walHoldsFrames(storePath: String) -> Bool {
        let fd = open(storePath + "-wal", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var header = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        let n = withUnsafeMutableBytes(of: &header) { pread(fd, $0.baseAddress, 32, 0) }
        return n != 0 && !(n == 32 && header == (0, 0, 0, 0))
    }

    /// Makes `-wal` and `-shm`, empty and 0600, where they are missing. Again after a
    /// connection closed (the read-only format probe): the last one to close deletes them.
    static func makeMissingWAL(storePath path: String) throws -> [String] {
        var made: [String] = []
        for suffix in ["-wal", "-shm"] {
            let file = path + suffix
            do {
                // Another command opening the store at the same moment (two `find`s, say) may
                // make the file between a look and the create: one found is checked as such,
                // whoever made it, rather than refused as planted.
                if try createPrivateIfMissing(file) { made.append(file) } else { try checkExisting(file) }
            } catch {
                removeUnused(made)
                throw error
            }
        }
        return made
    }

    /// Removes what `prepare` made: an open that failed (a file that is not a store, say)
    /// leaves nothing beside it. A `-shm` goes even if the format probe wrote to it (it is only
    /// an index of the WAL, and no connection is left); anything else only while empty.
    static func removeUnused(_ made: [String]) {
        for path in made {
            var st = stat()
            if lstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_uid == getuid(),
               st.st_size == 0 || path.hasSuffix("-shm") { unlink(path) }
        }
    }

    /// Creates an empty file of this user's, 0600, that did not exist, never through a symlink.
    static func createPrivate(_ path: String, existsError: KeychainError) throws {
        guard try createPrivateIfMissing(path) else { throw existsError }
    }

    /// `createPrivate`, but false when something is there already (a symlink included).
    static func createPrivateIfMissing(_ path: String) throws -> Bool {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            if errno == EEXIST { return false }
            throw KeychainError.io("cannot create \(path): \(String(cString: strerror(errno)))")
        }
        // A umask never widens 0600, but a default ACL of the directory could.
        _ = fchmod(fd, 0o600)
        close(fd)
        return true
    }

    /// Opens a store side file for writing (the reserve), creating it 0600 if missing; nil when
    /// it exists but is not ours, or cannot be opened.
    static func openPrivate(_ path: String) -> Int32? {
        var fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        if fd < 0 && errno == EEXIST { fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK) }
        guard fd >= 0 else { return nil }
        var st = stat()
        guard fstat(fd, &st) == 0, isOurs(st) else {
            close(fd)
            return nil
        }
        return fd
    }

    /// A side file that exists must be ours; a missing one is made by SQLite with the database's mode.
    static func checkExisting(_ path: String) throws {
        var st = stat()
        guard lstat(path, &st) == 0 else { return }
        if st.st_mode & S_IFMT == S_IFLNK { throw KeychainError.io(notOurs(path, "it is a symbolic link")) }
        guard st.st_mode & S_IFMT == S_IFREG else { throw KeychainError.io(notOurs(path, "it is not a regular file")) }
        guard st.st_uid == getuid() else {
            throw KeychainError.io(notOurs(path, "it belongs to user \(st.st_uid)"))
        }
        guard st.st_mode & 0o077 == 0 else {
            throw KeychainError.io("\(path) can be read or written by other users (mode \(String(st.st_mode & 0o7777, radix: 8))); "
                + "refusing to use it. If it is this store's own file, make it private with 'chmod 600 \(path)'")
        }
    }

    /// SQLite gives its side files the database's mode, even ones made here (it widens an
    /// empty one to match): a store others can read would have a readable WAL. Checked once the
    /// file is known to be a store, so that any other file is still told apart as not one.
    static func checkDatabase(_ path: String) throws {
        var st = stat()
        guard stat(path, &st) == 0 else { return }
        guard st.st_uid == getuid() else { throw KeychainError.io(notOurs(path, "it belongs to user \(st.st_uid)")) }
        guard st.st_mode & 0o077 == 0 else {
            throw KeychainError.io("\(path) can be read or written by other users (mode \(String(st.st_mode & 0o7777, radix: 8))); "
                + "refusing to use it, since SQLite would give its -wal and -shm files that mode too. "
                + "Make it private with 'chmod 600 \(path)'")
        }
    }

    static func isOurs(_ st: stat) -> Bool {
        st.st_mode & S_IFMT == S_IFREG && st.st_uid == getuid() && st.st_mode & 0o077 == 0
    }

    private static func notOurs(_ path: String, _ why: String) -> String {
        "\(path) is not this store's file (\(why)); refusing to use it. Remove it if you know where it came from"
    }

    /// OpenSSH's StrictModes for the store's directory: another user who can write to it
    /// could replace the store's files, unless the directory is sticky.
    static func checkDirectory(of path: String) throws {
        let directory = PathText.parent(KeychainLocations.absolute(path))
        var st = stat()
        // A missing directory is made by `init`, private.
        guard stat(directory, &st) == 0 else { return }
        let sticky = st.st_mode & S_ISVTX != 0
        if st.st_uid != getuid() && st.st_uid != 0 && !sticky {
            throw KeychainError.io("the store's directory \(directory) belongs to another user (\(st.st_uid)), who could "
                + "replace the store's files; refusing to use it. Keep the store in a directory of your own")
        }
        if st.st_mode & 0o022 != 0 && !sticky {
            let mode = String(st.st_mode & 0o7777, radix: 8)
            throw KeychainError.io("the store's directory \(directory) can be written by other users (mode \(mode)), who "
                + "could replace the store's files; refusing to use it. Fix: 'chmod go-w \(directory)', or keep the "
                + "store in a directory of your own")
        }
    }
}
