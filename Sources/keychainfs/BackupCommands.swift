import ArgumentParser
import Foundation
import KeychainBackup
import KeychainControl
import KeychainCrypto
import KeychainModel
import KeychainStore

struct ExportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write every exportable item, secrets included, into a file sealed under a backup passphrase.",
        discussion: """
            '*-this-device-only' items are left out and counted: they never leave this device (a \
            full backup is an export, or the store file plus device.key). Git's extras (expiry, \
            refresh token) go with their items. The backup passphrase is \
            asked twice at a terminal; with --passphrase-fd and --backup-passphrase-fd on the same \
            descriptor, the store's passphrase comes first. FILE is written atomically, mode 0600; \
            an existing FILE is refused (exit 48, before any passphrase is asked, and left as it \
            was) unless --force is given, which replaces it only with a complete backup. Damaged \
            items are left out and counted (exit 93): such a backup is written only to a new file. While \
            the store is mounted, the items are read through its daemon, which must be unlocked.
            """)

    @Argument(help: ArgumentHelp("The backup file to write.", valueName: "file"))
    var file: String
    @Option(help: ArgumentHelp("scrypt cost of the backup passphrase as log2(N), 10-22 (default \(ScryptParameters.default.logN)).", valueName: "n"))
    var scryptLogN: UInt8?
    @Flag(name: [.customLong("force"), .customShort("f")], help: "Replace FILE if it exists (otherwise an existing FILE is refused).")
    var force = false
    @OptionGroup var storeOptions: StoreOptions
    @OptionGroup var passphrase: PassphraseOptions
    @OptionGroup var backupPassphrase: BackupPassphraseOptions

    /// Items per request to the store or the daemon; a page also stops at about 8 MiB of secrets.
    static let pageItems = 2_000

    func run() throws {
        let scrypt = scryptLogN.map { ScryptParameters(logN: $0) } ?? .default
        guard BackupFile.isAcceptable(scrypt) else { throw KeychainError.invalidInput("--scrypt-log-n must be from 10 to 22") }
        // Before any passphrase is asked; the writer refuses again at its rename, should one appear meanwhile.
        var existing = stat()
        if !force && lstat(file, &existing) == 0 { throw BackupFile.Writer.exists(file) }
        let service = try storeOptions.connect(passphrase)
        let key = try backupPassphrase.readNew()
        let progress = ProgressLine(verb: "exporting")
        // Each page is sealed into the file as it comes, so memory stays that of one page.
        let writer = try BackupFile.Writer(path: file, passphrase: key, scrypt: scrypt, replacing: force)
        var damaged = 0
        var afterID: Int64? = 0
        while let after = afterID {
            let page = try service.exportItems(afterID: after, limit: Self.pageItems)
            var payload = BackupPayload()
            for entry in page.batch.entries {
                page.batch.withSecretAndExtras(entry) { payload.append(entry.record, secret: $0, extras: $1) }
            }
            try writer.append(payload)
            damaged += page.damaged.count
            progress.show(writer.count, of: nil)
            afterID = page.next
        }
        let leftOut = try service.status().itemCounts.filter { $0.key.isThisDeviceOnly }.values.reduce(0, +)
        progress.show(writer.count, of: nil, force: true)
        let notExported = "\(Count.items(damaged, "damaged")) could not be exported"
        do {
            try writer.finish(complete: damaged == 0)
        } catch KeychainError.fileExists where damaged > 0 {
            progress.finish()
            throw KeychainError.integrityFailure("\(notExported), so \(file) was left as it was: a backup with items missing "
                + "never replaces one (see 'keychainfs verify'; export to a new file to keep the rest)")
        }
        progress.finish()
        Output.line("exported \(Count.items(writer.count)) to \(file)")
        Output.line("left out \(Count.items(leftOut, "this-device-only")): they never leave this device")
        if damaged > 0 {
            throw KeychainError.integrityFailure("\(notExported); see 'keychainfs verify'")
        }
    }
}

struct ImportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Add the items of a backup made by 'export'.",
        discussion: """
            The whole file is checked first: a wrong backup passphrase (exit 51), a file cut short \
            or altered (exit 93) changes nothing. An item that exists already is skipped and \
            reported; -U overwrites it with the backup's (secret, class and attributes). Into a \
            store with no item (a restore), the whole file is one transaction: stopped part way, \
            it leaves the store empty. Otherwise items are committed in batches, so an import \
            stopped part way can be run again: what was added is then skipped. While the store is \
            mounted, the items go through its daemon, which must be unlocked, in batches.
            """)

    @Argument(help: ArgumentHelp("The backup file to read.", valueName: "file"))
    var file: String
    @Flag(name: .customShort("U"), help: "Overwrite items that exist already (otherwise they are skipped).")
    var overwrite = false
    @OptionGroup var storeOptions: StoreOptions
    @OptionGroup var passphrase: PassphraseOptions
    @OptionGroup var backupPassphrase: BackupPassphraseOptions

    /// One request to the daemon, and one transaction, each. The daemon's stay small, since
    /// a transaction holds up the mount's other writes. Without a daemon they are ten times
    /// bigger: each commit writes every index page its items touched, and new items land at
    /// random places in the blind and attribute indexes, so at a million items a commit of
    /// 5,000 wrote about a page per index per item; 50,000 took the import from 11,000 to
    /// 22,000 items/s (memory: the batch's cache, `Keychain.batchCacheKiB`, and its sealed rows).
    static let daemonSlice = (items: 5_000, secretBytes: 8 << 20)
    static let localSlice = (items: 50_000, secretBytes: 64 << 20)

    func run() throws {
        let sealed = try BackupFile.read(from: file)
        let service = try storeOptions.connect(passphrase)
        let key = try backupPassphrase.read(prompt: "Backup passphrase for \(file): ")
        let batch: ItemBatch
        do {
            batch = try BackupFile.open(sealed, named: file, passphrase: key)
        } catch KeychainError.wrongPassphrase {
            FileHandle.standardError.write(Data("keychainfs: the backup passphrase does not open \(file) (or its header is damaged); nothing was imported\n".utf8))
            throw ExitCode(KeychainError.wrongPassphrase.exitCode)
        }
        key.wipe()
        try Self.checkWritable(batch, into: service)
        let progress = ProgressLine(verb: "importing")
        var report = ImportReport()
        let local = service as? ServedKeychainService
        if let local, let whole = try local.importIntoEmptyStore(batch, overwrite: overwrite,
                                                                   progress: { progress.show($0, of: batch.count) }) {
            report = whole
        } else {
            let limits = local != nil ? Self.localSlice : Self.daemonSlice
            for slice in batch.slices(maxItems: limits.items, maxSecretBytes: limits.secretBytes) {
                report.add(try service.importItems(slice, overwrite: overwrite))
                progress.show(report.added + report.replaced + report.skipped.count, of: batch.count)
            }
        }
        progress.finish()
        for skipped in report.skipped { Output.line("exists, skipped: \(ItemKeyText.of(skipped))") }
        var summary = "imported \(Count.items(report.added + report.replaced)) from \(file)"
        if report.replaced > 0 { summary += " (\(report.replaced) overwritten)" }
        if !report.skipped.isEmpty { summary += "; skipped \(report.skipped.count) that exist already (-U overwrites them)" }
        Output.line(summary)
    }

    /// Refuses, before anything is written, what would fail part way through the batches.
    static func checkWritable(_ batch: ItemBatch, into service: KeychainService) throws {
        let classes = Set(batch.entries.map(\.record.attributes.accessible))
        if let c = classes.first(where: \.isThisDeviceOnly) {
            throw KeychainError.invalidInput("the backup holds '\(c.rawValue)' items, which a backup never carries; nothing was imported")
        }
        if let local = service as? ServedKeychainService {
            if let c = classes.sorted().first(where: { !local.isAvailable($0) }) { throw KeychainError.unavailable(c) }
        } else {
            let state = try service.status().state
            if let c = classes.sorted().first(where: { !$0.isAvailable(in: state) }) { throw KeychainError.unavailable(c) }
        }
    }
}

/// How `import` names an item it skipped: its primary key on one line.
enum ItemKeyText {
    static func of(_ key: ItemKey) -> String {
        func q(_ s: String) -> String { "\"" + Printable.text(s) + "\"" }
        let group = key.accessGroup.isEmpty ? "" : " access-group \(q(key.accessGroup))"
        switch key {
        case .generic(let g):
            return "generic-password service \(q(g.service)) account \(q(g.account))" + group
        case .internet(let i):
            var s = "internet-password server \(q(i.server)) port \(i.port)"
            if !i.path.isEmpty { s += " path \(q(i.path))" }
            s += " protocol \(i.protocol.name)"
            if i.authenticationType != .default { s += " authentication-type \(i.authenticationType.name)" }
            if !i.securityDomain.isEmpty { s += " security-domain \(q(i.securityDomain))" }
            return s + " account \(q(i.account))" + group
        }
    }
}

/// `--backup-passphrase-fd N` / `--backup-passphrase-file PATH`, else the terminal; distinct
/// from the store's own passphrase options.
struct BackupPassphraseOptions: ParsableArguments {
    @Option(name: .customLong("backup-passphrase-fd"), help: ArgumentHelp(
        "Read the backup passphrase from file descriptor N, up to the first newline or end of file.", valueName: "n"))
    var backupPassphraseFD: Int32?

    @Option(name: .customLong("backup-passphrase-file"), help: ArgumentHelp(
        "Read the backup passphrase from the first line of this file.", valueName: "path"))
    var backupPassphraseFile: String?

    func validate() throws {
        if backupPassphraseFD != nil && backupPassphraseFile != nil {
            throw ValidationError("give either --backup-passphrase-fd or --backup-passphrase-file, not both")
        }
    }

    func read(prompt: String, confirm: Bool = false) throws -> SecureBytes {
        let input = PassphraseInput.choose(fd: backupPassphraseFD, file: backupPassphraseFile)
        guard case .terminal = input else { return try input.read(prompt: prompt) }
        // The terminal is opened here so that its refusal names these options, not the store's.
        let terminal = try Terminal.open(purpose: "ask for the backup passphrase",
                                         alternatives: "--backup-passphrase-fd N or --backup-passphrase-file PATH")
        let first = try terminal.readHidden(prompt: prompt)
        guard confirm else { return first }
        guard first.isEqual(to: try terminal.readHidden(prompt: "Repeat the backup passphrase: ")) else {
            throw KeychainError.invalidInput("the two backup passphrases differ")
        }
        return first
    }

    /// For a new backup: asked twice at a terminal, never empty.
    func readNew() throws -> SecureBytes {
        let p = try read(prompt: "New backup passphrase: ", confirm: true)
        guard p.count > 0 else { throw KeychainError.invalidInput("the backup passphrase is empty") }
        return p
    }
}

/// "1 item", "3 this-device-only items".
enum Count {
    static func items(_ n: Int, _ adjective: String = "") -> String {
        (adjective.isEmpty ? "\(n) " : "\(n) \(adjective) ") + (n == 1 ? "item" : "items")
    }
}

/// A progress line on standard error, only when it is a terminal, redrawn at most ten times
/// a second.
final class ProgressLine {
    private let verb: String
    private let enabled = isatty(2) == 1
    private var last = Date.distantPast
    private var drawn = false

    init(verb: String) { self.verb = verb }

    func show(_ done: Int, of total: Int?, force: Bool = false) {
        guard enabled, force || Date().timeIntervalSince(last) >= 0.1 else { return }
        last = Date()
        drawn = true
        let text = "\r\(verb) " + (total.map { "\(done) of \(Count.items($0))" } ?? Count.items(done))
        FileHandle.standardError.write(Data((text + "\u{1b}[K").utf8))
    }

    func finish() {
        if drawn { FileHandle.standardError.write(Data("\r\u{1b}[K".utf8)) }
    }
}
