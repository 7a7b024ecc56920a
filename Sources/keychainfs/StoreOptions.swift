import ArgumentParser
import KeychainControl
import KeychainConfig
import KeychainFileSystem
import KeychainStore

/// `--store PATH`, shared by every command that acts on a store.
struct StoreOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp(
        "The keychain store (default: $KEYCHAINFS_STORE, else $XDG_DATA_HOME/keychainfs/keychain.db).",
        valueName: "path"), completion: .file())
    var store: String?

    var path: String { KeychainLocations.store(store) }

    /// The daemon serving the store when it is mounted, else the store opened here; the
    /// passphrase is read only in the second case, and only if the store has one (at the
    /// terminal, a wrong one is asked again).
    func connect(_ passphrase: PassphraseOptions) throws -> KeychainService {
        let path = self.path
        return try passphrase.withRetries(prompt: "Passphrase for \(path): ") { read in
            try KeychainEndpoint.connect(storePath: path, defaultClass: Self.configuredDefaultClass,
                                         defaultSynchronizable: Self.configuredDefaultSynchronizable, passphraseSource: read)
        }
    }

    /// The store's owner in this process when no daemon serves it, else nil (`KeychainEndpoint.ownOwner`).
    func ownOwner(_ passphrase: PassphraseOptions) throws -> ServedKeychain? {
        let path = self.path
        return try passphrase.withRetries(prompt: "Passphrase for \(path): ") { read in
            try KeychainEndpoint.ownOwner(storePath: path, defaultClass: Self.configuredDefaultClass,
                                          defaultSynchronizable: Self.configuredDefaultSynchronizable, passphraseSource: read)
        }
    }

    /// A new item's default class without a daemon: the configuration's `default-accessible`,
    /// as `mount` takes it, else `when-unlocked`. A configuration that cannot be read leaves
    /// the built-in default: with it, no mount could start to disagree.
    static func configuredDefaultClass() -> AccessibilityClass {
        (try? KeychainConfig.load())?.defaultAccessible ?? .default
    }

    /// Whether a new item is synchronizable when not told, without a daemon: the
    /// configuration's `default-synchronizable`, as `mount` takes it, else no.
    static func configuredDefaultSynchronizable() -> Bool {
        (try? KeychainConfig.load())?.defaultSynchronizable ?? false
    }
}
