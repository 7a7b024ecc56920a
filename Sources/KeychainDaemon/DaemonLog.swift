import Foundation
import KeychainModel
import Logging
import Synchronization

/// Where the daemon's log goes: stderr when it runs in the foreground or under systemd (the
/// journal takes stderr), else `$XDG_STATE_HOME/keychainfs/daemon.log`. It records mounts,
/// lock changes, refused peers and the cause of every EIO or EBADMSG, by item id, never a
/// name or a secret.
package enum DaemonLog {
    package static var path: String { KeychainLocations.stateDirectory + "/daemon.log" }

    /// swift-log allows one bootstrap per process, and `mount --foreground` runs a daemon again
    /// after a wrong passphrase: the first one sets where the process logs.
    private static let bootstrapped = Mutex(false)
    /// Why the log file was refused (not private), and the log went to stderr instead: a
    /// background daemon's is /dev/null, so `mount` says this to its caller (`DaemonLauncher`).
    private static let refused = Mutex<String?>(nil)
    package static var refusal: String? { refused.withLock { $0 } }

    static func bootstrap(foreground: Bool) {
        let first = bootstrapped.withLock { done in
            defer { done = true }
            return !done
        }
        guard first else { return }
        let toStderr = foreground || ProcessInfo.processInfo.environment["JOURNAL_STREAM"] != nil
        var file: LogFile?
        if !toStderr {
            do { file = try LogFile(path: path) } catch {
                refused.withLock { $0 = "\(error); the daemon logs nothing" }
            }
        }
        LoggingSystem.bootstrap { label in
            if let file { return FileLogHandler(label: label, file: file) }
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = .info
            return handler
        }
    }
}

/// An append-only log file (0600). Each entry is one write(2), so lines from several threads
/// never interleave.
final class LogFile: Sendable {
    private let fd: Int32

    /// Refused where the log cannot be private (a directory or file of someone else's): it
    /// names items and programs.
    init(path: String) throws {
        try KeychainLocations.makeDirectory(PathText.parent(path))
        fd = try PrivateFile.openForAppending(path)
    }

    deinit { close(fd) }

    func append(_ line: String) {
        var bytes = Array(line.utf8)
        bytes.append(0x0a)
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }
}

struct FileLogHandler: LogHandler {
    let label: String
    let file: LogFile
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata?, source: String,
             file _: String, function _: String, line _: UInt) {
        file.append("\(Self.timestamp(time(nil))) \(level) \(label)[\(getpid())]: \(message)")
    }

    /// ISO 8601 in UTC, `2026-11-25T23:54:28Z`, from `gmtime_r`: Foundation's date formatter
    /// loaded ICU's locale data and code for the first line, megabytes of the daemon's resident
    /// size (docs/performance-notes.md).
    static func timestamp(_ seconds: time_t) -> String {
        var t = tm()
        var s = seconds
        guard gmtime_r(&s, &t) != nil else { return "?" }
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(t.tm_year + 1900)-\(two(t.tm_mon + 1))-\(two(t.tm_mday))T"
            + "\(two(t.tm_hour)):\(two(t.tm_min)):\(two(t.tm_sec))Z"
    }
}
