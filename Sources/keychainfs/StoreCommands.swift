import ArgumentParser
import Foundation
import KeychainDaemon
import KeychainControl
import KeychainCrypto
import KeychainStore

struct InitCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "init",
        abstract: "Create a keychain store.",
        discussion: "At a terminal the passphrase is asked twice. --no-passphrase makes a store protected by this machine's device key alone; it refuses 'when-passcode-set-this-device-only' items.")

    @OptionGroup var storeOptions: StoreOptions
    @OptionGroup var passphrase: PassphraseOptions
    @Flag(help: "Protect the store with the device key only.")
    var noPassphrase = false
    @Option(help: ArgumentHelp("scrypt cost as log2(N), 10-22 (default \(ScryptCost.defaultSummary)); "
        + "each step doubles both, e.g. 20 needs \(ScryptCost.memoryText(logN: 20)).", valueName: "n"))
    var scryptLogN: UInt8?

    func validate() throws {
        if noPassphrase && passphrase.isGiven {
            throw ValidationError("--no-passphrase takes no --passphrase-fd or --passphrase-file")
        }
    }

    func run() throws {
        let path = storeOptions.path
        // Checked before asking, so nobody types a passphrase for nothing.
        if FileManager.default.fileExists(atPath: path) { throw KeychainError.storeExists(path) }
        let scrypt = scryptLogN.map { ScryptParameters(logN: $0) } ?? .default
        guard scrypt.isAcceptable else { throw KeychainError.invalidInput("--scrypt-log-n must be from 10 to 22") }
        if !noPassphrase { ScryptCost.warnIfExpensive(scrypt) }
        let secret = noPassphrase ? nil : try passphrase.readNew(prompt: "Passphrase for the new keychain: ")
        let keychain = try Keychain.create(at: path, passphrase: secret, scrypt: scrypt)
        keychain.forgetKeys()
        Output.line("created keychain store \(path)")
    }
}

struct PasswdCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "passwd",
        abstract: "Change, add or remove the store's passphrase.",
        discussion: """
            Starts a new generation of class keys: items added from now on are sealed under it, so \
            the old passphrase, even with an old copy of the store, opens none of them. Older items \
            keep their keys, which the new passphrase reaches, so the change takes the same time \
            however many items there are. --rekey also re-seals every item under the new keys \
            (with progress on a terminal), so the old passphrase opens nothing in this store. --remove makes the store device-key-only: it first deletes \
            the 'when-passcode-set-this-device-only' items (asking to confirm unless --yes), as iOS \
            does when the passcode is removed. --add gives a device-key-only store a passphrase. The \
            store must not be mounted (unmount it first).
            """)

    @OptionGroup var storeOptions: StoreOptions
    @OptionGroup var passphrase: PassphraseOptions
    @OptionGroup var newPassphrase: NewPassphraseOptions
    @Option(help: ArgumentHelp("New scrypt cost as log2(N), 10-22 (default: keep the current one). "
        + "init's default is \(ScryptCost.defaultSummary); each step up doubles both.", valueName: "n"))
    var scryptLogN: UInt8?
    @Flag(help: "Give a store made with --no-passphrase a passphrase.") var add = false
    @Flag(help: "Remove the passphrase: the store is then protected by this machine's device key only.") var remove = false
    @Flag(help: "With --remove: delete the 'when-passcode-set-this-device-only' items without asking.") var yes = false

    func validate() throws {
        if add && remove { throw ValidationError("give either --add or --remove, not both") }
        if add && passphrase.isGiven {
            throw ValidationError("--add takes the new passphrase (--new-passphrase-fd or --new-passphrase-file); the store has no current one")
        }
        if remove && newPassphrase.isGiven { throw ValidationError("--remove takes no new passphrase") }
        if remove && scryptLogN != nil { throw ValidationError("--remove takes no --scrypt-log-n") }
        if yes && !remove { throw ValidationError("--yes goes with --remove") }
    }

    @Flag(help: "Also re-seal every item under the new keys.")
    var rekey = false

    func run() throws {
        let path = storeOptions.path
        let scrypt = scryptLogN.map { ScryptParameters(logN: $0) }
        if let scrypt, !scrypt.isAcceptable { throw KeychainError.invalidInput("--scrypt-log-n must be from 10 to 22") }
        if let scrypt { ScryptCost.warnIfExpensive(scrypt) }
        if add { return try addPassphrase(path, scrypt: scrypt) }
        if remove { return try removePassphrase(path) }
        // A daemon holds the old keys and would go on sealing under them.
        try withStoreUnserved(path) { try change(path, scrypt: scrypt) }
    }

    private func change(_ path: String, scrypt: ScryptParameters?) throws {
        let keychain = try Keychain(openingAt: path)
        guard keychain.hasPassphrase else {
            throw KeychainError.invalidInput("\(path) has no passphrase (it was made with --no-passphrase); 'passwd --add' gives it one")
        }
        // Unlocked before the new one is asked, so a wrong passphrase is said at once (and
        // asked again at the terminal).
        let old = try unlock(keychain, path: path)
        let new = try newPassphrase.read()
        try keychain.changePassphrase(old: old, new: new, scrypt: scrypt)
        Output.line("changed the passphrase of \(path)")
        if rekey {
            let terminal = isatty(STDERR_FILENO) == 1
            let count = try keychain.rekey { done, total in
                if terminal { FileHandle.standardError.write(Data("\rre-sealed \(done) of \(total) items".utf8)) }
            }
            if terminal { FileHandle.standardError.write(Data("\n".utf8)) }
            Output.line("re-sealed \(count) item\(count == 1 ? "" : "s") under the new keys")
        }
        keychain.forgetKeys()
    }

    /// Adding or removing changes which keys a daemon could open and may delete items, so it
    /// is done only while no daemon serves the store, and holds the daemon's lock meanwhile.
    private func withStoreUnserved<T>(_ path: String, _ body: () throws -> T) throws -> T {
        guard FileManager.default.fileExists(atPath: path) else { throw KeychainError.noSuchStore(path) }
        let lock: Int32
        do { lock = try MountDaemon.lockStore(path) } catch KeychainError.storeBusy(let message) {
            throw KeychainError.storeBusy(message + "; unmount it before changing its passphrase ('keychainfs unmount')")
        }
        defer { close(lock) }
        return try body()
    }

    private func addPassphrase(_ path: String, scrypt: ScryptParameters?) throws {
        try withStoreUnserved(path) {
            let keychain = try Keychain(openingAt: path)
            guard !keychain.hasPassphrase else {
                throw KeychainError.invalidInput("\(path) already has a passphrase; 'keychainfs passwd' changes it")
            }
            try keychain.addPassphrase(try newPassphrase.read(), scrypt: scrypt ?? .default)
        }
        Output.line("added a passphrase to \(path)")
    }

    private func removePassphrase(_ path: String) throws {
        let removed = try withStoreUnserved(path) { () throws -> Int in
            let keychain = try Keychain(openingAt: path)
            guard keychain.hasPassphrase else {
                throw KeychainError.invalidInput("\(path) has no passphrase (it is protected by the device key only)")
            }
            let old = try unlock(keychain, path: path)
            let doomed = try keychain.countsByClass()[.whenPasscodeSetThisDeviceOnly] ?? 0
            if doomed > 0 && !yes { try confirmDeletion(of: doomed, path: path) }
            return try keychain.removePassphrase(old)
        }
        if removed > 0 {
            Output.line("deleted \(removed) 'when-passcode-set-this-device-only' item\(removed == 1 ? "" : "s")")
        }
        Output.line("removed the passphrase of \(path); it is now protected by this machine's device key only")
    }

    /// The current passphrase, checked by unlocking with it; at the terminal a wrong one is asked again.
    private func unlock(_ keychain: Keychain, path: String) throws -> SecureBytes {
        try passphrase.withRetries(prompt: "Current passphrase for \(path): ") { read in
            let old = try read()
            try keychain.unlock(passphrase: old)
            return old
        }
    }

    private func confirmDeletion(of count: Int, path: String) throws {
        let items = "\(count) 'when-passcode-set-this-device-only' item\(count == 1 ? "" : "s")"
        let terminal = try Terminal.open(purpose: "confirm deleting \(items)", alternatives: "--yes")
        let answer = try terminal.ask("Removing the passphrase deletes \(items) of \(path). Type 'yes' to go on: ")
        guard answer == "yes" else {
            throw KeychainError.invalidInput("not confirmed; nothing was changed")
        }
    }
}

struct DumpKeychain: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dump-keychain",
        abstract: "Show every item's attributes; -d adds the secrets.",
        discussion: """
            A secret is shown as "text" when it is UTF-8 without control characters, else as 0x and \
            hex. A secret that cannot be read is shown as <unavailable: ...> (its class is locked), \
            <access denied: ...> (this program is not on its access list, or a prompt said no) or \
            <integrity failure: ...>; the dump goes on, and exits at the end with status 93 if a secret \
            was damaged, else 77 if one was refused. With --json, bytes are base64 and an \
            unreadable secret is left out with a "secretError". Items whose attributes cannot be \
            read now are not listed ('verify' reports damaged ones).
            """)

    @Flag(name: .customShort("d"), help: "Include the secrets.")
    var withSecrets = false
    @Flag(help: "Write JSON.")
    var json = false
    @OptionGroup var storeOptions: StoreOptions
    @OptionGroup var passphrase: PassphraseOptions

    func run() throws {
        let items = try storeOptions.connect(passphrase).dump(withSecrets: withSecrets)
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            encoder.dateEncodingStrategy = .iso8601
            let splice = SecretSplice()
            var data = try encoder.encode(DumpDocument(store: storeOptions.path,
                                                       items: items.map { DumpedItem($0, splice: splice) }))
            data.append(UInt8(ascii: "\n"))
            Output.write(splice.splice(data))
            try Self.failIfUnread(items)
            return
        }
        // Item by item, each secret from its locked buffer: never joined into one String.
        for (n, item) in items.enumerated() {
            Output.write((n == 0 ? "" : "\n") + ItemPrinter.lines(for: item, storePath: storeOptions.path).joined(separator: "\n") + "\n")
            switch item.secret {
            case .value(let bytes):
                let line = Printable.secretLine(bytes)
                Output.write(line)
                line.wipe()
            default:
                if let line = ItemPrinter.secretLine(item.secret) { Output.line(line) }
            }
        }
        try Self.failIfUnread(items)
    }

    /// The dump shows everything it can, then still fails like `verify` if a secret was
    /// damaged, else as a read would if one was refused (naming the first).
    static func failIfUnread(_ items: [FoundItem]) throws {
        let damaged = items.filter { if case .damaged = $0.secret { true } else { false } }
        if !damaged.isEmpty {
            throw KeychainError.integrityFailure("\(damaged.count) secret\(damaged.count == 1 ? "" : "s") failed; see 'keychainfs verify'")
        }
        let refused = items.compactMap { if case .refused(let why) = $0.secret { why } else { nil } }
        if let first = refused.first {
            throw KeychainError.accessDenied(first + (refused.count > 1 ? "; \(refused.count) secrets in all were refused" : ""))
        }
    }
}

struct VerifyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Open every item that can be opened and report each integrity failure.",
        discussion: "Exits with status 93 if any item fails.")

    @OptionGroup var storeOptions: StoreOptions
    @OptionGroup var passphrase: PassphraseOptions

    func run() throws {
        let service = try storeOptions.connect(passphrase)
        let total = try service.status().itemCounts.values.reduce(0, +)
        let progress = ProgressLine(verb: "verifying")
        let report = try service.verify { progress.show($0, of: total) }
        progress.finish()
        for problem in report.problems { Output.line(Printable.text(problem.description)) }
        Output.line("checked \(report.checked) item\(report.checked == 1 ? "" : "s"), \(report.problems.count) failed")
        if !report.problems.isEmpty {
            throw KeychainError.integrityFailure("\(report.problems.count) of \(report.checked) items failed")
        }
    }
}

/// What an scrypt setting costs, said before a costly one is used: the memory is
/// 128 · r · 2^n bytes, and the time is measured here on a small run and scaled up.
enum ScryptCost {
    static var defaultSummary: String {
        "\(ScryptParameters.default.logN): \(memoryText(logN: ScryptParameters.default.logN)) of memory, about 0.3 s"
    }

    static func memoryBytes(_ p: ScryptParameters) -> UInt64 { (128 * UInt64(p.r) * UInt64(p.p)) << UInt64(p.logN) }

    static func memoryText(logN: UInt8) -> String { memoryText(memoryBytes(ScryptParameters(logN: logN))) }

    static func memoryText(_ bytes: UInt64) -> String {
        bytes >= 1 << 30 ? "\(bytes >> 30) GiB" : "\(bytes >> 20) MiB"
    }

    /// Above the default, writes the memory and the estimated time of every unlock to stderr,
    /// and a warning when that memory is more than the machine has available now.
    static func warnIfExpensive(_ p: ScryptParameters) {
        guard p.logN > ScryptParameters.default.logN else { return }
        let memory = memoryBytes(p)
        var text = "keychainfs: scrypt 2^\(p.logN) needs \(memoryText(memory)) of memory"
        if let seconds = estimatedSeconds(p) {
            text += " and about \(String(format: "%.1f", seconds)) s on this machine"
        }
        text += " for every unlock and mount (the default 2^\(ScryptParameters.default.logN): \(memoryText(logN: ScryptParameters.default.logN)), about 0.3 s)."
        if let available = availableMemory(), available < memory {
            text += " Only \(memoryText(available)) is available now, so it may fail."
        }
        Output.error(text)
    }

    /// A 2^14 run (16 MiB, a few tens of milliseconds) scaled linearly, as scrypt's time is.
    static func estimatedSeconds(_ p: ScryptParameters) -> Double? {
        let probe = ScryptParameters(logN: 14, r: p.r, p: p.p)
        let start = DispatchTime.now().uptimeNanoseconds
        guard (try? Scrypt.deriveKey(passphrase: SecureBytes(copying: Array("probe".utf8)), salt: Array(repeating: 0, count: 16),
                                     parameters: probe)) != nil else { return nil }
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        return elapsed * Double(UInt64(1) << UInt64(p.logN - 14))
    }

    /// MemAvailable from /proc/meminfo.
    static func availableMemory() -> UInt64? {
        guard let text = try? String(contentsOfFile: "/proc/meminfo", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("MemAvailable:") }),
              let kib = UInt64(line.split(separator: " ").dropFirst().first ?? "") else { return nil }
        return kib * 1024
    }
}
