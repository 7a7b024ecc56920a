import Foundation
import KeychainAccess
import KeychainClient
import KeychainControlProtocol
import KeychainCrypto
import KeychainFileSystem
import KeychainModel
import KeychainStore

/// Reads a passphrase when one turns out to be needed (from the terminal, a file descriptor
/// or a file); it is not called for a store without one, or one a daemon serves.
package typealias PassphraseSource = () throws -> SecureBytes

/// Chooses the route for the commands of one store.
package enum KeychainEndpoint {
    /// The daemon serving the store when there is one, so the mount and the command see each
    /// other's changes at once; it needs no passphrase (a locked class answers `unavailable`).
    /// Otherwise the store opened and unlocked in this process, under a shared lock that keeps
    /// a daemon from starting meanwhile. A daemon that holds the store but cannot be reached is
    /// a refusal (`storeBusy`): the store is then neither read nor written here.
    ///
    /// Both routes run the same service over the keychain's owner (`ServedKeychainService`):
    /// here, an owner of this command's own that holds the lease, whose default class for a
    /// new item is `defaultClass()` (asked only on this route), as a mount's would be.
    package static func connect(storePath: String, defaultClass: () -> AccessibilityClass,
                               defaultSynchronizable: () -> Bool = { false },
                               passphraseSource: PassphraseSource) throws -> KeychainService {
        switch try DaemonLocator.route(forStore: storePath) {
        case .daemon(let service, _):
            return service
        case .direct(let lease):
            let keychain = try Keychain(openingAt: storePath)
            try keychain.unlock(passphrase: keychain.hasPassphrase ? try passphraseSource() : nil)
            // No daemon to ask for a prompt: a program not on an item's list is refused, and logged.
            let access = AccessControl(settings: .none, log: AccessLog(path: AccessLog.defaultPath))
            return ServedKeychainService(owner: try ServedKeychain(keychain: keychain, defaultClass: defaultClass(), lease: lease,
                                                                   access: access, defaultSynchronizable: defaultSynchronizable()))
        }
    }

    /// The store's owner in this process, for a command that needs the owner itself (sync's
    /// merge), when no daemon serves the store; nil when one does (the daemon then does that
    /// work). Opened and unlocked as `connect` does.
    package static func ownOwner(storePath: String, defaultClass: () -> AccessibilityClass,
                                 defaultSynchronizable: () -> Bool = { false },
                                 passphraseSource: PassphraseSource) throws -> ServedKeychain? {
        switch try DaemonLocator.route(forStore: storePath) {
        case .daemon:
            return nil
        case .direct(let lease):
            let keychain = try Keychain(openingAt: storePath)
            try keychain.unlock(passphrase: keychain.hasPassphrase ? try passphraseSource() : nil)
            let access = AccessControl(settings: .none, log: AccessLog(path: AccessLog.defaultPath))
            return try ServedKeychain(keychain: keychain, defaultClass: defaultClass(), lease: lease,
                                      access: access, defaultSynchronizable: defaultSynchronizable())
        }
    }
}
