import Foundation
import KeychainCrypto

/// The per-machine key that `*-this-device-only` and `always*` items depend on. It lives in a
/// 0600 file outside the store and is never written into it.
enum DeviceKey {
    /// The key; nil if there is none. A key, or a state directory, that another user could
    /// have put in place (not this user's, or open to others) is refused: a store wrapped with
    /// their key is theirs to open, and their directory holds the store's rollback counter.
    static func load(path: String) throws -> SecureBytes? {
        try PrivateFile.checkDirectory(PathText.parent(path))
        guard let fd = try PrivateFile.openForReading(path) else { return nil }
        defer { close(fd) }
        let key = SecureBytes(count: AESGCM.keyBytes)
        let n = key.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        return n == AESGCM.keyBytes ? key : nil
    }

    /// Loads the key, creating it first if there is none.
    static func loadOrCreate(path: String) throws -> SecureBytes {
        if let key = try load(path: path) { return key }
        try KeychainLocations.makeDirectory(PathText.parent(path))
        let key = SecureRandom.bytes(AESGCM.keyBytes)
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            // Lost a race with another process creating it: use theirs.
            if errno == EEXIST, let key = try load(path: path) { return key }
            throw KeychainError.io("cannot create the device key \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        let n = key.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard n == AESGCM.keyBytes, fsync(fd) == 0 else {
            throw KeychainError.io("cannot write the device key \(path)")
        }
        return key
    }
}
