import ArgumentParser
import Foundation
import KeychainControl
import KeychainControlProtocol
import KeychainCrypto
import KeychainFileSystem
import KeychainModel
import KeychainStore
import KeychainSync
import KeychainSyncGit

struct SyncCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Sync synchronizable items with your other devices through a shared folder.",
        discussion: """
            A sync folder (kept in step between devices by Syncthing or git) holds a key envelope \
            sealed under the sync passphrase and one directory per device. Only items marked \
            synchronizable travel (--synchronizable, user.keychain.synchronizable, config.toml's \
            default-synchronizable); this-device-only items never do. See the README's Sync section.
            """,
        subcommands: [SyncInitCommand.self, SyncJoinCommand.self, SyncStatusCommand.self, SyncNowCommand.self,
                      SyncLeaveCommand.self, SyncGitCommand.self])
}

/// `--sync-passphrase-fd N` / `--sync-passphrase-file PATH`, else the terminal: the folder's
/// passphrase, which every device that joins it knows (not the store's).
struct SyncPassphraseOptions: ParsableArguments {
    @Option(name: .customLong("sync-passphrase-fd"), help: ArgumentHelp(
        "Read the sync folder's passphrase from file descriptor N, up to the first newline or end of file.", valueName: "n"))
    var syncPassphraseFD: Int32?

    @Option(name: .customLong("sync-passphrase-file"), help: ArgumentHelp(
        "Read the sync folder's passphrase from the first line of this file.", valueName: "path"))
    var syncPassphraseFile: String?

    func validate() throws {
        if syncPassphraseFD != nil && syncPassphraseFile != nil {
            throw ValidationError("give either --sync-passphrase-fd or --sync-passphrase-file, not both")
        }
    }

    func read(new: Bool) throws -> SecureBytes {
        let input = PassphraseInput.choose(fd: syncPassphraseFD, file: syncPassphraseFile)
        let p: SecureBytes
        if case .terminal = input {
            let terminal = try Terminal.open(purpose: "ask for the sync passphrase",
                                             alternatives: "--sync-passphrase-fd N or --sync-passphrase-file PATH")
            p = try terminal.readHidden(prompt: new ? "New sync passphrase: " : "Sync passphrase: ")
            if new, !p.isEqual(to: try terminal.readHidden(prompt: "Repeat the sync passphrase: ")) {
                throw KeychainError.invalidInput("the two sync passphrases differ")
            }
        } else {
            p = try input.read(prompt: "")
        }
        guard p.count > 0 else { throw KeychainError.invalidInput("the sync passphrase is empty") }
        return p
    }
}

/// The sync commands act through the store's owner, as every command does: the daemon's while
/// the store is mounted (which also syncs by itself, at every commit and when the folder
/// changes), else one of this command's own.
struct SyncOwnerOptions: ParsableArguments {
    @OptionGroup var storeOptions: StoreOptions
    @OptionGroup var passphrase: PassphraseOptions

    func service() throws -> KeychainService { try storeOptions.connect(passphrase) }
}

/// `--tombstone-days` of `init` and `join`: kept per device, in its local sync state.
struct TombstoneOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Days a delete's tombstone is kept once every device has merged it (default 90).", valueName: "days"))
    var tombstoneDays: Int?

    /// Bad input (exit 65), as other commands' values; not ArgumentParser's `validate`.
    func check() throws {
        if let d = tombstoneDays, !(1...36_500).contains(d) { throw KeychainError.invalidInput("--tombstone-days must be from 1 to 36500") }
    }

    func apply(forStore store: String) throws {
        if let d = tombstoneDays { try SyncLocalState.setTombstoneExpiry(days: d, forStore: store) }
    }
}

struct SyncInitCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "init",
        abstract: "Make a new sync folder, with this keychain as its first device.",
        discussion: """
            DIR gets the key envelope (sync.key: a new random sync key sealed under the sync \
            passphrase, as backups are) and this device's directory; the sync key is kept in \
            the keychain as a this-device-only item (keychainfs-sync/<folder id>). A folder that \
            has an envelope already is refused (exit 48): join it instead.
            """)

    @Argument(help: ArgumentHelp("The sync folder (made if missing).", valueName: "dir")) var dir: String
    @Option(help: ArgumentHelp("scrypt cost of the sync passphrase as log2(N), 10-22 (default \(ScryptParameters.default.logN)).", valueName: "n"))
    var scryptLogN: UInt8?
    @OptionGroup var tombstones: TombstoneOptions
    @OptionGroup var owner: SyncOwnerOptions
    @OptionGroup var syncPassphrase: SyncPassphraseOptions

    func run() throws {
        try tombstones.check()
        let scrypt = scryptLogN.map { ScryptParameters(logN: $0) } ?? .default
        guard (10...22).contains(scrypt.logN) else { throw KeychainError.invalidInput("--scrypt-log-n must be from 10 to 22") }
        // Refused before a new sync passphrase is asked for, and with the next step.
        let envelope = SyncFolder(path: dir).envelopePath
        if FileManager.default.fileExists(atPath: envelope) {
            FileHandle.standardError.write(Data(("keychainfs: \(KeychainLocations.absolute(dir)) is a sync folder already (it has \(envelope)); "
                + "to sync this keychain with it: keychainfs sync join \(dir)\n").utf8))
            throw ExitCode(KeychainError.storeExists(envelope).exitCode)
        }
        let service = try owner.service()
        let o = try service.sync(.initialize, folder: KeychainLocations.absolute(dir), passphrase: try syncPassphrase.read(new: true),
                                 scryptLogN: scrypt.logN)
        try tombstones.apply(forStore: owner.storeOptions.path)
        Output.line("sync folder \(o.folder) made; this device is \(o.device)")
    }
}

struct SyncJoinCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "join",
        abstract: "Join an existing sync folder from this device, with its sync passphrase.",
        discussion: "A wrong sync passphrase changes nothing (exit 51). The first exchange runs at once.")

    @Argument(help: ArgumentHelp("The sync folder.", valueName: "dir")) var dir: String
    @OptionGroup var tombstones: TombstoneOptions
    @OptionGroup var owner: SyncOwnerOptions
    @OptionGroup var syncPassphrase: SyncPassphraseOptions

    func run() throws {
        try tombstones.check()
        let service = try owner.service()
        let folder = KeychainLocations.absolute(dir)
        // A clone of a `sync git` remote: its files as they are in git before the envelope is read.
        try GitSyncEngine(folder: folder, remote: "", sharedFiles: [SyncFolder.envelopeName]).protectClone()
        let o = try service.sync(.join, folder: folder, passphrase: try syncPassphrase.read(new: false),
                                 scryptLogN: nil)
        try tombstones.apply(forStore: owner.storeOptions.path)
        Output.line("joined \(o.folder); this device is \(o.device)")
    }
}

struct SyncNowCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "now",
        abstract: "Exchange with the sync folder now (a mounted store's daemon also does it by itself).",
        discussion: """
            Publishes this keychain's changes of synchronizable items and merges the other \
            devices' versions. A tampered, truncated or replayed file, a rolled-back device \
            directory and a version implausibly far ahead are refused and named; the rest \
            still merges, and the command then exits 93.
            """)

    @OptionGroup var owner: SyncOwnerOptions

    func run() throws {
        let report = try owner.service().sync(.exchange, folder: nil, passphrase: nil, scryptLogN: nil)
        Output.line(Self.counts(report))
        Self.sayWaiting(report.heldByItemThatDoesNotSync)
        let refused = report.refusals + [report.ownDirectoryRewritten].compactMap { $0 }
        if !refused.isEmpty {
            for r in refused { FileHandle.standardError.write(Data("keychainfs: refused: \(r)\n".utf8)) }
            throw KeychainError.integrityFailure("\(refused.count) refused in the sync folder (the rest was merged)")
        }
    }
}

extension SyncNowCommand {
    /// What an exchange did, as `sync now` and `sync git` print it.
    static func counts(_ o: SyncOutcome) -> String {
        "published \(o.published), applied \(o.applied), deleted \(o.deleted), conflict copies \(o.conflictCopies)"
            + (o.deferred > 0 ? ", deferred \(o.deferred)" : "")
    }

    /// Why an item of the folder is deferred at every exchange: a name it would take here is
    /// held by an item that does not sync. Said, not a failure.
    static func sayWaiting(_ keys: [ItemKey]) {
        for key in keys {
            FileHandle.standardError.write(Data(("keychainfs: waiting: \(ItemKeyText.of(key)) is an item here that does not sync "
                + "(not synchronizable, or this-device-only); the folder's item of that name waits until it is made "
                + "synchronizable (both are then kept, one as a conflict copy), renamed or deleted\n").utf8))
        }
    }
}

struct SyncLeaveCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "leave",
        abstract: "Stop syncing: this device's directory leaves the folder; its items stay here.")

    @OptionGroup var owner: SyncOwnerOptions

    func run() throws {
        let o = try owner.service().sync(.leave, folder: nil, passphrase: nil, scryptLogN: nil)
        Output.line("left \(o.folder)")
    }
}

struct SyncStatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the sync folder's devices, the last exchange, pending changes and conflicts.",
        discussion: """
            Pending changes and the conflict copies' names need the store's owner: they are \
            shown when the store is not mounted (unlocking it), and left out (null) when it is, \
            since its daemon exchanges at every commit. Exit 69 when this keychain does not sync.
            """)

    @Flag(help: "Write JSON.") var json = false
    @OptionGroup var storeOptions: StoreOptions
    @OptionGroup var passphrase: PassphraseOptions

    struct Report: Encodable {
        struct Device: Encodable {
            var id: String
            var this: Bool
            var lastMergedState: UInt64?
        }
        struct Conflict: Encodable {
            var item: String
            var device: String
            var version: UInt64
            var copy: String?
        }
        var folder: String
        var device: String
        var devices: [Device]
        var lastExchange: String?
        var pendingChanges: Int?
        var conflicts: [Conflict]
        var refused: [String]
    }

    func run() throws {
        guard let state = try SyncLocalState.load(forStore: storeOptions.path) else {
            throw KeychainError.notMounted("this keychain does not sync (set it up with 'keychainfs sync init DIR' or 'sync join DIR')")
        }
        let folder = SyncFolder(path: state.folder)
        let ids = Set(folder.devices() + [state.device]).sorted()
        var pending: Int?
        var names: [SyncItemID: ItemKey] = [:]
        if let owner = try storeOptions.ownOwner(passphrase) {
            let session = SyncSession(owner: owner, storePath: storeOptions.path)
            (pending, names) = try session.pendingChanges()
        }
        let iso = ISO8601DateFormatter()
        let report = Report(
            folder: state.folder, device: state.device.hex,
            devices: ids.map { Report.Device(id: $0.hex, this: $0 == state.device, lastMergedState: $0 == state.device ? state.seq : state.seen[$0.hex]) },
            lastExchange: state.lastExchange.map { iso.string(from: Date(timeIntervalSince1970: TimeInterval($0))) },
            pendingChanges: pending,
            conflicts: state.conflicts.map { c in
                Report.Conflict(item: c.item.hex, device: c.order.device.hex, version: c.order.lamport,
                                copy: SyncSession.conflictCopy(of: c, among: names).map(ServedKeychain.treePath))
            },
            refused: state.refusals)
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            Output.write(String(decoding: try encoder.encode(report), as: UTF8.self) + "\n")
            return
        }
        var lines = ["folder: \(report.folder)", "this device: \(report.device)"]
        for d in report.devices {
            lines.append("device: \(d.id)\(d.this ? " (this one)" : "") state \(d.lastMergedState.map(String.init) ?? "not merged yet")")
        }
        lines.append("last exchange: \(report.lastExchange ?? "never")")
        lines.append("pending changes: \(report.pendingChanges.map(String.init) ?? "unknown (mounted: the daemon exchanges at every commit)")")
        for c in report.conflicts {
            lines.append("conflict: \(c.copy ?? "item \(c.item.prefix(12))…") from device \(String(c.device.prefix(8))) (version \(c.version))")
        }
        for r in report.refused { lines.append("refused: \(r)") }
        Output.write(lines.map { $0 + "\n" }.joined())
    }
}
