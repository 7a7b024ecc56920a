#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import KeychainCrypto
import KeychainModel

/// What `store` writes: the item's key, its secret and the extras kept in its `generic` attribute.
package struct CredentialStoreRequest: Sendable {
    package var key: InternetPasswordKey
    package var password: SecureBytes
    package var extras: CredentialExtras

    /// Needs protocol, host, username and password, each present (username and password may be
    /// empty, as git sends them); otherwise throws and the helper stores nothing.
    package init(request: CredentialRequest) throws(CredentialError) {
        let (proto, host) = try request.endpoint()
        guard let username = request.username else { throw .missingField("username") }
        guard let password = request.password else { throw .missingField("password") }
        do {
            key = try InternetPasswordKey(server: host.server, port: host.port ?? 0, path: request.path ?? "",
                                          protocol: proto, account: username)
        } catch {
            throw .invalidItem(error)
        }
        self.password = password
        extras = CredentialExtras(request: request)
    }

    /// What a store changes besides the secret and its extras: a new item is labelled
    /// "<host> (git)"; an existing one keeps every attribute (a label the user set stays),
    /// except that extras an earlier version kept in the clear in `generic` are dropped.
    package func attributeChanges(updating existing: ItemAttributes?) -> AttributeChanges {
        guard let existing else { return AttributeChanges { $0.label = "\(key.server) (git)" } }
        return AttributeChanges { $0.generic = CredentialExtras(legacy: existing.generic).isEmpty ? nil : Data() }
    }
}
