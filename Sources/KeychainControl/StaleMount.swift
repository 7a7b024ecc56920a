import Foundation
import KeychainStore

/// A FUSE mount whose daemon died: every access fails with ENOTCONN ("Transport endpoint is
/// not connected") until it is detached.
public enum StaleMount {
    public static func isStale(_ mountpoint: String) -> Bool {
        var st = stat()
        return stat(mountpoint, &st) != 0 && errno == ENOTCONN
    }

    /// Detaches a stale mount with `fusermount3 -u -z` (lazily, so that a process still
    /// sitting in the directory does not block it).
    public static func detach(_ mountpoint: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/fusermount3")
        process.arguments = ["-u", "-z", mountpoint]
        do { try process.run() } catch {
            throw KeychainError.io("cannot run fusermount3 to detach the stale mount at \(mountpoint): \(error)")
        }
        process.waitUntilExit()
        guard process.terminationStatus == 0 || !isStale(mountpoint) else {
            throw KeychainError.io("fusermount3 could not detach the stale mount at \(mountpoint)")
        }
    }
}
