import Foundation
import KeychainCrypto
import KeychainStore

/// Reads a passphrase when one turns out to be needed (from the terminal, a file descriptor
/// or a file); it is not called for a store without one, or one a daemon serves.
public typealias PassphraseSource = () throws -> SecureBytes

/// Chooses the route for the commands of one store.
public enum KeychainEndpoint {
    /// The daemon serving the store when there is one, so the mount and the command see each
    /// other's changes at once; it needs no passphrase (a locked class answers `unavailable`).
    /// Otherwise the store opened and unlocked in this process.
    public static func connect(storePath: String, passphraseSource: PassphraseSource) throws -> KeychainService {
        if let daemon = MountRegistry.servingDaemon(forStore: storePath) { return daemon }
        return try openDirectly(storePath: storePath, passphraseSource: passphraseSource)
    }

    /// The store opened in this process and unlocked, whether or not a daemon serves it.
    public static func openDirectly(storePath: String, passphraseSource: PassphraseSource) throws -> LocalKeychainService {
        let keychain = try Keychain(openingAt: storePath)
        try keychain.unlock(passphrase: keychain.hasPassphrase ? try passphraseSource() : nil)
        return LocalKeychainService(keychain: keychain)
    }
}
