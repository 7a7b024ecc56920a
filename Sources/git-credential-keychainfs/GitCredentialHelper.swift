import Foundation
import GitCredential
import KeychainClient
import KeychainControlProtocol
import KeychainCrypto
import KeychainModel

/// `git-credential-keychainfs get|store|erase`: git's credential helper protocol over the
/// internet passwords of the mounted keychain (the default store, or `KEYCHAINFS_STORE`).
///
/// It acts through the daemon, found from the store path whatever the environment, so the
/// mount stays the one source of truth; it never opens the store itself (and links neither
/// GRDB nor SQLite). Without a mount, with a daemon it cannot reach, with the keychain locked,
/// or on any input it cannot serve, `get` prints nothing and `store`/`erase` change nothing.
/// It never writes to stderr: git shows that to users.
@main
enum GitCredentialHelper {
    static func main() {
        guard let argument = CommandLine.arguments.dropFirst().first,
              let action = CredentialAction(argument: argument) else { return }
        let input = FileHandle.standardInput.readDataToEndOfFile()
        guard let request = try? CredentialRequest(parsing: input),
              let (keychain, _) = (try? DaemonLocator.daemon(forStore: KeychainLocations.store())) ?? nil,
              // Locked (or before first unlock) means no answer and no change, even for items
              // whose class would allow it: the store would still delete while locked.
              (try? keychain.status())?.state == .unlocked else { return }
        switch action {
        case .get: get(request, keychain)
        case .store: store(request, keychain)
        case .erase: erase(request, keychain)
        }
    }

    /// The items of git's kind that may match: the canonical variants on that server and port.
    static func candidates(_ query: CredentialQuery, _ keychain: KeychainService, withSecrets: Bool) -> [FoundItem] {
        let itemQuery = ItemQuery(kind: .internet, account: query.account, server: query.server, port: query.port,
                                  path: query.path, protocol: query.protocol, authenticationType: .default,
                                  securityDomain: "")
        let found = (try? keychain.find(query: itemQuery, withSecrets: withSecrets)) ?? []
        return found.filter { item in
            guard case .internet(let key) = item.record.key else { return false }
            return query.matches(key: key)
        }
    }

    static func get(_ request: CredentialRequest, _ keychain: KeychainService) {
        guard let query = try? CredentialQuery(request: request),
              let item = candidates(query, keychain, withSecrets: true).first,
              let secret = try? item.secretBytes(),
              let out = try? CredentialResponse.format(account: item.record.key.account, secret: secret.unprotectedArray,
                                                       extras: extras(of: item))
        else { return }
        FileHandle.standardOutput.write(Data(out))
    }

    /// The sealed extras; an item stored by an earlier version kept them in `generic`.
    static func extras(of item: FoundItem) -> CredentialExtras {
        if let sealed = item.extras { return CredentialExtras(decoding: Data(sealed.unprotectedArray)) }
        return CredentialExtras(decoding: item.record.attributes.generic)
    }

    static func store(_ request: CredentialRequest, _ keychain: KeychainService) {
        guard let stored = try? CredentialStoreRequest(request: request) else { return }
        let secret = SecureBytes(copying: Array(stored.password.utf8))
        // Extras are sealed like the password (empty drops earlier ones); `generic` is emptied of
        // any an earlier version kept there in the clear.
        let extras = SecureBytes(copying: Array(stored.extras.encode() ?? Data()))
        let changes = AttributeChanges(label: "\(stored.key.server) (git)", generic: Data())
        _ = try? keychain.save(key: .internet(stored.key), secret: secret, extras: extras, changes: changes, updateExisting: true)
    }

    static func erase(_ request: CredentialRequest, _ keychain: KeychainService) {
        guard let query = try? CredentialQuery(request: request) else { return }
        for item in candidates(query, keychain, withSecrets: request.password != nil) {
            guard case .internet(let key) = item.record.key else { continue }
            let secret = (try? item.secretBytes())?.unprotectedArray ?? []
            if request.password != nil && item.secret == nil { continue }
            if request.erases(key: key, secret: secret) { _ = try? keychain.delete(query: .exactly(item.record.key)) }
        }
    }
}
