// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif
import KeychainCrypto
import KeychainModel

/// Where a daemon says it serves a store, found from the store path alone, whatever the
/// environment of whoever asks: the record is `<store>.daemon`, beside the store in its own
/// directory. The control socket is `<store>.sock` beside it when that directory is trusted
/// (this user's, writable by no one else) and the path fits in `sun_path`; otherwise it is in
/// the daemon's runtime directory, and the record names it.
package enum MountRegistry {
    /// The store's real path, or its absolute path when it cannot be resolved (it may not exist).
    package static func canonicalPath(_ path: String) -> String {
        let absolute = KeychainLocations.absolute(path)
        if let resolved = realpath(absolute, nil) {
            defer { free(resolved) }
            return String(cString: resolved)
        }
        // A dead FUSE mount fails realpath (ENOTCONN); its parent still resolves.
        let parent = PathText.parent(absolute)
        let name = PathText.lastComponent(absolute)
        guard parent != absolute, let resolvedParent = realpath(parent, nil) else {
            return PathText.standardized(absolute)
        }
        defer { free(resolvedParent) }
        let p = String(cString: resolvedParent)
        return p == "/" ? "/" + name : p + "/" + name
    }

    /// The first 16 hex digits of the SHA-256 of the store's real path.
    package static func storeID(forStore path: String) -> String {
        SHA256Digest.hash(Array(canonicalPath(path).utf8)).prefix(8).map { PathText.hex($0, width: 2) }.joined()
    }

    package static func recordPath(forStore path: String) -> String { canonicalPath(path) + ".daemon" }

    /// Where a daemon for this store listens.
    package static func socketPath(forStore path: String) -> String {
        let store = canonicalPath(path)
        let beside = store + ".sock"
        if beside.utf8.count < UnixSocket.maxPathBytes,
           PrivateFile.isPrivateDirectory(PathText.parent(store)) {
            return beside
        }
        return KeychainLocations.runtimeDirectory + "/" + storeID(forStore: store) + ".sock"
    }

    /// Publishes a daemon's record (0600), replacing an older one for the same store.
    package static func register(_ record: MountRecord) throws {
        let path = recordPath(forStore: record.storePath)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data: Data
        do { data = try encoder.encode(record) } catch { throw KeychainError.io("cannot encode the mount record: \(error)") }
        // One another user planted (possible only in a sticky directory such as /tmp, since a
        // store in a directory others can write is refused) is never replaced or trusted.
        var st = stat()
        if lstat(path, &st) == 0, st.st_mode & S_IFMT != S_IFREG || st.st_uid != getuid() {
            throw KeychainError.io("\(path) is not this store's daemon record (it is not a regular file of this user); "
                + "refusing to use it. Remove it if you know where it came from")
        }
        let temp = path + ".\(getpid()).tmp"
        unlink(temp)
        let fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw KeychainError.io("cannot write \(temp): \(String(cString: strerror(errno)))") }
        let written = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        // Renamed into place so that readers never see half a record.
        guard written == data.count, rename(temp, path) == 0 else {
            let why = String(cString: strerror(errno))
            unlink(temp)
            throw KeychainError.io("cannot write \(path): \(why)")
        }
    }

    /// Removes the record of `record`'s store, if it is still this one.
    package static func unregister(_ record: MountRecord) {
        let path = recordPath(forStore: record.storePath)
        if self.record(forStore: record.storePath) == record { unlink(path) }
    }

    /// The record beside the store, if it is a trusted file (see `TrustedPath`) about this store.
    /// It may name a daemon that is gone; `StoreLock` says whether one holds the store.
    package static func record(forStore path: String) -> MountRecord? {
        let store = canonicalPath(path)
        guard let bytes = TrustedPath.readOwnFile(store + ".daemon"),
              let record = MountRecord(json: bytes),
              record.storePath.isSame(as: store) else { return nil }
        return record
    }
}
