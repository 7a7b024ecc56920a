import Foundation
import KeychainCrypto
import KeychainModel

/// Generic passwords of one service, in the shape of iOS keychain wrappers:
///
///     let github = GenericPasswordQuery(keychain, service: "github")
///     try github.set(SecureBytes(copying: Array("s3cret".utf8)), for: "alice")
///     let secret = try github.get(for: "alice")
public struct GenericPasswordQuery: Sendable {
    /// The store the items are in.
    public let keychain: Keychain
    /// The service every item of this query has.
    public let service: String
    /// The access group; empty for the default group.
    public let accessGroup: String

    /// The passwords of `service` in `keychain`; nothing is read until asked.
    public init(_ keychain: Keychain, service: String, accessGroup: String = "") {
        self.keychain = keychain; self.service = service; self.accessGroup = accessGroup
    }

    /// The key of `account`'s item; throws when the account is too long for a tree name.
    public func key(_ account: String) throws -> ItemKey {
        do { return .generic(try GenericPasswordKey(service: service, account: account, accessGroup: accessGroup)) }
        catch { throw KeychainError(error) }
    }

    /// Every item of this service and access group.
    public var query: ItemQuery { ItemQuery(kind: .generic, accessGroup: accessGroup, service: service) }
}

/// Internet passwords of one server, port, path, protocol, authentication type and domain.
public struct InternetPasswordQuery: Sendable {
    /// The store the items are in.
    public let keychain: Keychain
    /// Host name or address.
    public let server: String
    /// The port; 0 is the protocol's well-known port.
    public let port: UInt16
    /// URL path; empty for none.
    public let path: String
    /// The protocol of every item of this query.
    public let `protocol`: InternetProtocol
    /// The authentication type of every item of this query.
    public let authenticationType: AuthenticationType
    /// Realm or domain; empty for none.
    public let securityDomain: String
    /// The access group; empty for the default group.
    public let accessGroup: String

    /// The passwords of one server and so on in `keychain`; nothing is read until asked.
    public init(_ keychain: Keychain, server: String, port: UInt16 = 0, path: String = "",
                protocol proto: InternetProtocol = .https, authenticationType: AuthenticationType = .default,
                securityDomain: String = "", accessGroup: String = "") {
        self.keychain = keychain; self.server = server; self.port = port; self.path = path; self.protocol = proto
        self.authenticationType = authenticationType; self.securityDomain = securityDomain; self.accessGroup = accessGroup
    }

    /// The key of `account`'s item; throws when a part is too long for a tree name.
    public func key(_ account: String) throws -> ItemKey {
        do {
            return .internet(try InternetPasswordKey(server: server, port: port, path: path, protocol: self.protocol,
                                                     authenticationType: authenticationType,
                                                     securityDomain: securityDomain, account: account,
                                                     accessGroup: accessGroup))
        } catch { throw KeychainError(error) }
    }

    /// Every item of this server, port, path, protocol, authentication type, domain and group.
    public var query: ItemQuery {
        ItemQuery(kind: .internet, accessGroup: accessGroup, server: server, port: port, path: path,
                  protocol: self.protocol, authenticationType: authenticationType, securityDomain: securityDomain)
    }
}

/// What both query shapes offer: add-or-update, get, remove, remove all, attributes.
public protocol PasswordQuery {
    var keychain: Keychain { get }
    var query: ItemQuery { get }
    func key(_ account: String) throws -> ItemKey
}

extension GenericPasswordQuery: PasswordQuery {}
extension InternetPasswordQuery: PasswordQuery {}

extension PasswordQuery {
    /// Adds the item or updates its secret (and the given attributes).
    public func set(_ secret: SecureBytes, for account: String, attributes: AttributeChanges = AttributeChanges()) throws {
        try keychain.save(key(account), secret: secret, changes: attributes, updateExisting: true)
    }

    /// `set` for a secret in a `String`, for callers that have it so already; prefer `SecureBytes`.
    public func set(_ secret: String, for account: String, attributes: AttributeChanges = AttributeChanges()) throws {
        try set(SecureBytes(copying: Array(secret.utf8)), for: account, attributes: attributes)
    }

    /// The secret, or nil when there is no such item.
    public func get(for account: String) throws -> SecureBytes? {
        guard let item = try keychain.item(for: key(account)) else { return nil }
        return try keychain.secret(of: item)
    }

    /// The item's attributes, or nil when there is no such item.
    public func attributes(for account: String) throws -> ItemAttributes? {
        try keychain.item(for: key(account))?.record.attributes
    }

    /// Removes the item; `itemNotFound` if there is none.
    public func remove(for account: String) throws {
        guard let item = try keychain.item(for: key(account)) else { throw KeychainError.itemNotFound }
        try keychain.delete([item])
    }

    /// Removes every item this query covers; returns how many.
    @discardableResult
    public func removeAll() throws -> Int {
        let items = try keychain.items(matching: query)
        try keychain.delete(items)
        return items.count
    }

    /// Accounts this query covers, in order.
    public func accounts() throws -> [String] { try keychain.items(matching: query).map(\.key.account) }
}
