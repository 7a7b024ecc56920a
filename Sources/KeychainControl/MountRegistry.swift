import Foundation
import KeychainCrypto
import KeychainStore

/// The mount records and control sockets in the runtime directory, one pair per served store,
/// both named after the store's id.
public enum MountRegistry {
    public static var directory: String { KeychainLocations.runtimeDirectory }

    /// The store's real path, or its absolute path when it cannot be resolved (it may not exist).
    public static func canonicalPath(_ path: String) -> String {
        let absolute = KeychainLocations.absolute(path)
        if let resolved = realpath(absolute, nil) {
            defer { free(resolved) }
            return String(cString: resolved)
        }
        // A dead FUSE mount fails realpath (ENOTCONN); its parent still resolves.
        let parent = (absolute as NSString).deletingLastPathComponent
        let name = (absolute as NSString).lastPathComponent
        guard parent != absolute, let resolvedParent = realpath(parent, nil) else {
            return (absolute as NSString).standardizingPath
        }
        defer { free(resolvedParent) }
        let p = String(cString: resolvedParent)
        return p == "/" ? "/" + name : p + "/" + name
    }

    /// The first 16 hex digits of the SHA-256 of the store's real path.
    public static func storeID(forStore path: String) -> String {
        SHA256Digest.hash(Array(canonicalPath(path).utf8)).prefix(8).map { String(format: "%02x", $0) }.joined()
    }

    public static func socketPath(forStore path: String) -> String { directory + "/" + storeID(forStore: path) + ".sock" }
    public static func recordPath(forStore path: String) -> String { directory + "/" + storeID(forStore: path) + ".json" }

    /// Publishes a daemon's record (0600), replacing an older one for the same store.
    public static func register(_ record: MountRecord) throws {
        try KeychainLocations.makeDirectory(directory)
        let path = recordPath(forStore: record.storePath)
        let data: Data
        do { data = try JSONEncoder().encode(record) } catch { throw KeychainError.io("cannot encode the mount record: \(error)") }
        let temp = path + ".\(getpid()).tmp"
        unlink(temp)
        let fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw KeychainError.io("cannot write \(temp): \(String(cString: strerror(errno)))") }
        let written = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        // Renamed into place so that readers never see half a record.
        guard written == data.count, rename(temp, path) == 0 else {
            unlink(temp)
            throw KeychainError.io("cannot write \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// Removes the record of `record`'s store, if it is still this one.
    public static func unregister(_ record: MountRecord) {
        let path = recordPath(forStore: record.storePath)
        if read(path) == record { unlink(path) }
    }

    public static func record(forStore path: String) -> MountRecord? { read(recordPath(forStore: path)) }

    public static func record(forMountpoint mountpoint: String) -> MountRecord? {
        let wanted = canonicalPath(mountpoint)
        return allRecords().first { canonicalPath($0.mountpoint) == wanted }
    }

    /// Every record in the runtime directory, live or not.
    public static func allRecords() -> [MountRecord] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { $0.hasSuffix(".json") }.sorted().compactMap { read(directory + "/" + $0) }
    }

    /// The daemon process exists and its socket accepts a connection.
    public static func isAlive(_ record: MountRecord) -> Bool {
        guard record.pid > 0, kill(record.pid, 0) == 0 || errno == EPERM else { return false }
        guard let fd = try? UnixSocket.connect(path: record.socketPath) else { return false }
        close(fd)
        return true
    }

    /// Cleans up after a daemon that is gone: detaches its mount if that is stale (whoever
    /// notices first, so the mountpoint never stays "Transport endpoint is not connected"),
    /// then removes its socket and record. Each is checked again just before, so that a
    /// daemon starting up meanwhile keeps its own.
    public static func removeStale(_ record: MountRecord) {
        if StaleMount.isStale(record.mountpoint) { try? StaleMount.detach(record.mountpoint) }
        if let fd = try? UnixSocket.connect(path: record.socketPath) { close(fd) } else { unlink(record.socketPath) }
        unregister(record)
    }

    /// Removes every record whose daemon is gone; returns those it removed.
    @discardableResult
    public static func removeStaleRecords() -> [MountRecord] {
        allRecords().filter { !isAlive($0) }.map { removeStale($0); return $0 }
    }

    /// The live daemon serving the store, if any (a stale record is cleaned up on the way).
    public static func liveRecord(forStore path: String) -> MountRecord? {
        guard let record = record(forStore: path) else { return nil }
        guard isAlive(record) else { removeStale(record); return nil }
        return record
    }

    /// The service of the daemon serving the store, or nil when none does.
    public static func servingDaemon(forStore path: String) -> RemoteKeychainService? {
        liveRecord(forStore: path).map { RemoteKeychainService(socketPath: $0.socketPath) }
    }

    private static func read(_ path: String) -> MountRecord? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        return try? JSONDecoder().decode(MountRecord.self, from: data)
    }
}
