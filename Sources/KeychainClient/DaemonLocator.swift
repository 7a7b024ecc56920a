// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif
import KeychainControlProtocol
import KeychainModel

/// How a command reaches a store.
package enum StoreRoute {
    /// A daemon serves the store: every request goes to it.
    case daemon(RemoteKeychainService, MountRecord)
    /// No daemon holds the store: the command may open it itself, for as long as it keeps the
    /// lease (which keeps a daemon from starting under it).
    case direct(StoreLease)
}

/// Finds the daemon that serves a store from the store path alone: the store's flock says
/// whether one holds it, and the record beside the store says where it listens. When a daemon
/// holds the store but cannot be reached, this refuses (`storeBusy`, exit 75) rather than
/// letting a command read or write the store behind it.
package enum DaemonLocator {
    /// How long to wait for a daemon that holds the store to publish its record (it does so
    /// once its mount serves, after the unlock).
    package static let startupGrace: Double = 3

    package static func route(forStore path: String) throws -> StoreRoute {
        let store = MountRegistry.canonicalPath(path)
        let fd = open(store, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            let e = errno
            throw e == ENOENT ? KeychainError.noSuchStore(store) : KeychainError.io("cannot open \(store): \(String(cString: strerror(e)))")
        }
        var leased = false
        defer { if !leased { close(fd) } }
        let deadline = Deadline.after(seconds: startupGrace)
        while true {
            if let lease = try StoreLock.sharedLease(fd) {
                leased = true
                return .direct(lease)
            }
            let holder = StoreLock.holders(of: fd).first(where: \.exclusive)?.pid
            // A record whose process is gone, or is not the holder, is a dead daemon's leftover.
            if let record = MountRegistry.record(forStore: store), ProcessState.isRunning(record.pid),
               holder == nil || holder == record.pid {
                guard record.protocolVersion == ControlProtocol.version else {
                    throw KeychainError.daemonVersionMismatch(running: record.version == ControlProtocol.softwareVersion
                        ? "\(record.version) (control protocol \(record.protocolVersion))" : record.version)
                }
                // The connection that shows the daemon answers carries the command's first request.
                let probe: Int32?
                do { probe = try RemoteKeychainService.connect(record.socketPath, deadline: .after(seconds: 2)) } catch {
                    guard error as? KeychainError == RemoteKeychainService.silent else { throw error }
                    throw unreachable(store, holder: record.pid, socket: record.socketPath)
                }
                if let probe {
                    return .daemon(RemoteKeychainService(socketPath: record.socketPath, connection: probe), record)
                }
                throw unreachable(store, holder: record.pid, socket: record.socketPath)
            }
            if deadline.hasPassed { throw unreachable(store, holder: holder, socket: nil) }
            usleep(50_000)
        }
    }

    /// The daemon serving the store, or nil when none holds it. Throws when one holds it but
    /// cannot be reached, or speaks another version.
    package static func daemon(forStore path: String) throws -> (RemoteKeychainService, MountRecord)? {
        switch try route(forStore: path) {
        case .daemon(let service, let record): (service, record)
        case .direct: nil
        }
    }

    static func unreachable(_ store: String, holder: Int32?, socket: String?) -> KeychainError {
        let who = holder.map(ProcessState.describe) ?? "another process"
        let where_ = socket.map { " on its control socket \($0)" } ?? " (it has published no control socket)"
        return .storeBusy("\(store) is held by \(who), which does not answer\(where_); nothing was read or written. "
            + "Run 'keychainfs unmount --store \(store)' to detach its mount, or end that process.")
    }
}
