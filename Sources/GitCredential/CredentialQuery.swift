import KeychainCrypto
import KeychainModel

/// The internet passwords a request can refer to, compared the way git's `credential_match`
/// compares credentials: exactly, with an absent path or username matching any.
package struct CredentialQuery: Equatable, Sendable {
    package var `protocol`: InternetProtocol
    package var server: String
    /// Resolved like `InternetPasswordKey.port`: never 0 when the protocol has a well-known port,
    /// so `host:8443` and a host without a port never match each other.
    package var port: UInt16
    /// Normalised (`InternetPath`); nil matches any path.
    package var path: String?
    /// Nil matches any account; `""` only the empty one.
    package var account: String?

    package init(protocol proto: InternetProtocol, server: String, port: UInt16 = 0,
                path: String? = nil, account: String? = nil) {
        self.protocol = proto
        self.server = server
        self.port = port == 0 ? (proto.wellKnownPort ?? 0) : port
        self.path = path.map(InternetPath.normalize)
        self.account = account
    }

    /// Throws when the request lacks a protocol or host (e.g. git's `cert` requests, which name
    /// only a path) or names a protocol or host the keychain cannot hold.
    package init(request: CredentialRequest) throws(CredentialError) {
        let (proto, host) = try request.endpoint()
        self.init(protocol: proto, server: host.server, port: host.port ?? 0,
                  path: request.path, account: request.username)
    }

    /// Only the canonical kind of item is git's: one with the default authentication type and
    /// no security domain, which is what `store` creates. Others belong to other programs.
    /// Names match as bytes, as the store holds them (`ExactName`).
    package func matches(key: InternetPasswordKey) -> Bool {
        key.protocol == self.protocol
            && key.server.isSame(as: server)
            && key.port == port
            && key.path.matches(path)
            && key.account.matches(account)
            && key.authenticationType == .default
            && key.securityDomain.isEmpty
    }
}

extension CredentialRequest {
    /// The protocol and host every action needs; throws if either is absent or unusable.
    func endpoint() throws(CredentialError) -> (InternetProtocol, CredentialHost) {
        guard let protocolName = self.protocol else { throw .missingField("protocol") }
        guard let hostText = host else { throw .missingField("host") }
        let proto: InternetProtocol
        do { proto = try InternetProtocol(parsing: protocolName) } catch { throw .unsupportedProtocol(protocolName) }
        return (proto, try CredentialHost(parsing: hostText))
    }

    /// Whether `erase` removes the item: it matches the query and, when git names the password
    /// it is rejecting, still holds that password, so a credential stored again in the meantime
    /// survives. A request the keychain cannot serve erases nothing.
    package func erases(key: InternetPasswordKey, secret: SecureBytes?) -> Bool {
        guard let query = try? CredentialQuery(request: self), query.matches(key: key) else { return false }
        guard let password else { return true }
        return secret.map(password.isEqual(to:)) ?? false
    }
}
