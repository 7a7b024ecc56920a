import Foundation
import KeychainStore

/// A FUSE mount whose daemon died: every access fails with ENOTCONN ("Transport endpoint is
/// not connected") until it is detached.
public enum StaleMount {
    public static func isStale(_ mountpoint: String) -> Bool {
        var st = stat()
        return stat(mountpoint, &st) != 0 && errno == ENOTCONN
    }

    /// Detaches a stale mount lazily, so that a process still sitting in the directory does
    /// not block it.
    public static func detach(_ mountpoint: String) throws {
        do { try Fusermount.unmount(mountpoint, lazy: true) } catch {
            guard isStale(mountpoint) else { return }
            throw error
        }
    }
}

/// `fusermount3 -u`, which unmounts a FUSE mount for the user who made it (root or not).
public enum Fusermount {
    public static func unmount(_ mountpoint: String, lazy: Bool = false) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/fusermount3")
        process.arguments = ["-u"] + (lazy ? ["-z"] : []) + [mountpoint]
        let err = Pipe()
        process.standardError = err
        do { try process.run() } catch { throw KeychainError.io("cannot run fusermount3: \(error)") }
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            let why = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                .trimmingCharacters(in: .whitespacesAndNewlines)
            if why.isEmpty || why.localizedCaseInsensitiveContains("busy") {
                throw KeychainError.mountpointBusy(
                    "cannot unmount \(mountpoint): it is busy (a process has a file open or its working directory there); "
                    + "'fuser -vm \(mountpoint)' lists them")
            }
            throw KeychainError.storeBusy("cannot unmount \(mountpoint): \(why)")
        }
    }
}
