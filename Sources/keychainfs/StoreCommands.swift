import ArgumentParser
import Foundation
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
        abstract: "Change the store's passphrase.",
        discussion: """
            Only the class keys are re-wrapped, so it takes the same time however many items there \
            are. It acts on the store file directly even while it is mounted: the daemon keeps the \
            same class keys and reads the new wrapping at its next unlock.
            """)

    @OptionGroup var storeOptions: StoreOptions
    @OptionGroup var passphrase: PassphraseOptions
    @OptionGroup var newPassphrase: NewPassphraseOptions
    @Option(help: ArgumentHelp("New scrypt cost as log2(N), 10-22 (default: keep the current one). "
        + "init's default is \(ScryptCost.defaultSummary); each step up doubles both.", valueName: "n"))
    var scryptLogN: UInt8?

    func run() throws {
        let path = storeOptions.path
        // A daemon that holds the store but cannot be reached is a refusal, as for every command.
        // Without a daemon, the shared lock keeps one from starting while the keybag changes.
        let route = try DaemonLocator.route(forStore: path)
        try withExtendedLifetime(route) { try change(path) }
    }

    private func change(_ path: String) throws {
        let keychain = try Keychain(openingAt: path)
        guard keychain.hasPassphrase else {
            throw KeychainError.invalidInput("\(path) has no passphrase (it was made with --no-passphrase)")
        }
        let scrypt = scryptLogN.map { ScryptParameters(logN: $0) }
        if let scrypt, !scrypt.isAcceptable { throw KeychainError.invalidInput("--scrypt-log-n must be from 10 to 22") }
        if let scrypt { ScryptCost.warnIfExpensive(scrypt) }
        // Unlocked before the new one is asked, so a wrong passphrase is said at once (and
        // asked again at the terminal).
        let old = try passphrase.withRetries(prompt: "Current passphrase for \(path): ") { read in
            let old = try read()
            try keychain.unlock(passphrase: old)
            return old
        }
        let new = try newPassphrase.read()
        try keychain.changePassphrase(old: old, new: new, scrypt: scrypt)
        keychain.forgetKeys()
        Output.line("changed the passphrase of \(path)")
    }
}

struct DumpKeychain: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dump-keychain",
        abstract: "Show every item's attributes; -d adds the secrets.",
        discussion: """
            A secret is shown as "text" when it is UTF-8 without control characters, else as 0x and \
            hex. A secret that cannot be read is shown as <unavailable: ...> (its class is locked) or \
            <integrity failure: ...>; the dump goes on, and exits with status 93 at the end. With --json, bytes are base64 and an \
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
            var data = try encoder.encode(DumpDocument(store: storeOptions.path, items: items.map(DumpedItem.init)))
            data.append(UInt8(ascii: "\n"))
            let bytes = SecureBytes(copying: data)
            data.resetBytes(in: 0..<data.count)
            Output.write(bytes)
            try Self.failIfDamaged(items)
            return
        }
        let blocks = items.map { item in
            (ItemPrinter.lines(for: item, storePath: storeOptions.path) + [ItemPrinter.secretLine(item.secret)].compactMap { $0 })
                .joined(separator: "\n")
        }
        if !blocks.isEmpty { Output.write(blocks.joined(separator: "\n\n") + "\n") }
        try Self.failIfDamaged(items)
    }

    /// The dump shows everything it can, then still fails like `verify` if a secret was damaged.
    static func failIfDamaged(_ items: [FoundItem]) throws {
        let damaged = items.filter { if case .damaged = $0.secret { true } else { false } }
        if !damaged.isEmpty {
            throw KeychainError.integrityFailure("\(damaged.count) secret\(damaged.count == 1 ? "" : "s") failed; see 'keychainfs verify'")
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
        let report = try storeOptions.connect(passphrase).verify()
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
