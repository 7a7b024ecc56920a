import ArgumentParser
import Foundation
import KeychainConfig
import KeychainControl
import KeychainModel
import KeychainStore

struct StatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show whether the keychain is mounted, its lock state, store, daemon and item counts.",
        discussion: """
            Without a mount it still shows the store (whether it exists, whether it has a \
            passphrase), the configured mountpoint and any stale mount left by a killed daemon, \
            and exits with status 69 (not mounted). It never changes anything: a stale mount is \
            only named ('keychainfs unmount' detaches it).
            """)

    @OptionGroup var target: MountTarget
    @Flag(help: "Write JSON.") var json = false

    func run() throws {
        let report = try StatusReport.gather(target: target)
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            Output.write(String(decoding: try encoder.encode(report), as: UTF8.self) + "\n")
        } else {
            Output.write(report.lines.map { $0 + "\n" }.joined())
        }
        guard report.mounted else {
            // On stderr too, with what to run, as every command that needs the mount says it.
            if report.staleMount != nil { throw target.notMounted(store: report.store) }
            throw ExitCode(KeychainError.notMounted("").exitCode)
        }
    }
}

/// What `status` shows, gathered without changing anything.
struct StatusReport: Encodable {
    struct Daemon: Encodable {
        var pid: Int32?
        var version: String?
        var memoryLocked: Bool?
    }

    var store: String
    var storeExists: Bool
    /// Nil when the store does not exist or cannot be read.
    var hasPassphrase: Bool?
    /// Why the store could not be opened, if it could not.
    var storeError: String?
    var mounted: Bool
    /// `locked`, `unlocked`, `before-first-unlock`, or `not-mounted`.
    var state: String
    var mountpoint: String?
    var configuredMountpoint: String
    var configError: String?
    /// A mountpoint whose daemon is gone ("Transport endpoint is not connected").
    var staleMount: String?
    var lockAfter: Int?
    var allowRoot: Bool?
    var daemon: Daemon?
    var memory: MemoryStatus?
    /// Seconds before a passphrase would be judged, after wrong ones in a row.
    var passphraseWait: Int?
    var items: [String: Int]?

    static func gather(target: MountTarget) throws -> StatusReport {
        let storePath = (try? target.storePath()) ?? target.storeOptions.path
        var live: (RemoteKeychainService, MountRecord)?
        // Held while the store is read here, so that no daemon starts writing it meanwhile.
        var lease: StoreLease?
        defer { withExtendedLifetime(lease) {} }
        if FileManager.default.fileExists(atPath: storePath) {
            // A daemon that holds the store but does not answer, or speaks another version, is
            // said as every command says it (75, 76); anything else is shown in the report.
            do {
                switch try DaemonLocator.route(forStore: storePath) {
                case .daemon(let service, let record): live = (service, record)
                case .direct(let held): lease = held
                }
            } catch let e as KeychainError
                where e.exitCode == KeychainError.storeBusy("").exitCode
                || e.exitCode == KeychainError.daemonVersionMismatch(running: "").exitCode {
                throw e
            } catch { live = nil }
        }
        var configError: String?
        let config: KeychainConfig
        do { config = try KeychainConfig.load() } catch {
            configError = (error as? KeychainError)?.description ?? "\(error)"
            config = KeychainConfig()
        }
        var report = StatusReport(store: storePath, storeExists: FileManager.default.fileExists(atPath: storePath),
                                  mounted: false, state: "not-mounted", configuredMountpoint: config.effectiveMountpoint,
                                  configError: configError)
        if let (daemon, record) = live {
            do {
                let s = try daemon.status()
                report.store = s.storePath
                report.storeExists = true
                report.hasPassphrase = s.hasPassphrase
                report.mounted = true
                report.state = s.state.rawValue
                report.mountpoint = s.mountpoint ?? record.mountpoint
                report.lockAfter = s.lockAfter
                report.allowRoot = s.allowRoot
                report.memory = s.memory
                report.passphraseWait = s.passphraseWait
                report.daemon = Daemon(pid: s.daemonPID ?? record.pid, version: s.daemonVersion, memoryLocked: s.memoryLocked)
                report.items = Dictionary(uniqueKeysWithValues: AccessibilityClass.allCases.map { ($0.rawValue, s.itemCounts[$0] ?? 0) })
                return report
            } catch {
                report.storeError = "the daemon (pid \(record.pid)) did not answer: \((error as? KeychainError)?.description ?? "\(error)")"
            }
        }
        if report.storeExists {
            // Read only: `status` changes nothing, not even the store's WAL or its records here.
            do { report.hasPassphrase = try StoreProbe(readingAt: storePath).hasPassphrase } catch {
                report.storeError = (error as? KeychainError)?.description ?? "\(error)"
            }
        }
        report.staleMount = target.staleMounts(store: storePath).first?.mountpoint
        return report
    }

    var lines: [String] {
        var out: [String] = []
        let passphrase = hasPassphrase.map { $0 ? "yes" : "no (device key only)" }
        if mounted {
            out.append("state: \(state)")
            out.append("store: \(store)")
            out.append("mountpoint: \(mountpoint ?? "?")")
            out.append("lock-after: \(lockAfter.map { "\($0) s" } ?? "never")")
            out.append("passphrase: \(passphrase ?? "?")"
                + (passphraseWait.map { ", wrong ones in a row: the next is heard in \($0) s" } ?? ""))
            out.append("allow-root: \(allowRoot == true ? "yes" : "no")")
            if let daemon {
                var parts = ["pid \(daemon.pid.map(String.init) ?? "?")"]
                if let v = daemon.version {
                    let own = KeychainFS.configuration.version
                    parts.append("version \(v)" + (v == own ? "" : " (this keychainfs is \(own); remount to use it)"))
                }
                if let locked = daemon.memoryLocked {
                    parts.append(locked ? "memory locked" : "memory NOT locked (raise RLIMIT_MEMLOCK: ulimit -l)")
                }
                out.append("daemon: " + parts.joined(separator: ", "))
            }
            if let memory { out += Self.describe(memory) }
            let counts = items ?? [:]
            out.append("items: \(counts.values.reduce(0, +))")
            for c in AccessibilityClass.allCases { out.append("    \(c.rawValue): \(counts[c.rawValue] ?? 0)") }
        } else {
            out.append("state: not mounted")
            out.append("store: \(store)" + (storeExists ? "" : " (does not exist; create it with 'keychainfs init')"))
            if let passphrase { out.append("passphrase: \(passphrase)") }
            out.append("mountpoint: \(configuredMountpoint) (configured; 'keychainfs mount' mounts there)")
        }
        if let storeError { out.append("store error: \(storeError)") }
        if let configError { out.append("config error: \(configError)") }
        if let staleMount {
            out.append("stale mount: \(staleMount) (its daemon is gone; 'keychainfs unmount \(staleMount)' detaches it)")
        }
        return out
    }

    static func describe(_ m: MemoryStatus) -> [String] {
        func kib(_ n: Int) -> String { n < 1024 ? "\(n) bytes" : "\((n + 1023) / 1024) KiB" }
        var lines = [
            "locked memory: \(kib(m.lockedBytes)) (limit \(m.limit.map(kib) ?? "none")), unlocked: \(kib(m.unlockedBytes))"
                + (m.refusals > 0 ? ", refused \(m.refusals) times" : ""),
            "cached secrets: \(m.cachedSecrets), \(kib(m.cachedBytes)) of \(kib(m.cacheBudget))",
        ]
        let remedy = "raise the daemon's RLIMIT_MEMLOCK (ulimit -l, or LimitMEMLOCK= under systemd) and mount again"
        if m.isExhausted {
            lines.append("warning: locked memory is exhausted: \(kib(m.unlockedBytes)) of keys and secrets may be swapped out; \(remedy)")
        } else if m.refusals > 0 {
            lines.append("warning: locked memory ran out (the kernel refused to lock pages \(m.refusals) times): "
                + "keys and secrets may have been swapped out; \(remedy)")
        }
        return lines
    }
}
