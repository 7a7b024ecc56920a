import Foundation
import KeychainCrypto
import KeychainModel

/// Generic passwords of one service, in the shape of iOS keychain wrappers:
///
///     let github = GenericPasswordQuery(keychain, service: "github")
///     try github.set(SecureBytes(copying: Array("s3cret".utf8)), for: "alice")
///     let secret = try github.get(for: "alice")
public struct GenericPasswordQuery: Sendable {
    public let keychain: Keychain
    public let service: String
    public let accessGroup: String

    public init(_ keychain: Keychain, service: String, accessGroup: String = "") {
        self.keychain = keychain; self.service = service; self.accessGroup = accessGroup
    }

    public func key(_ account: String) throws -> ItemKey {
        do { return .generic(try GenericPasswordKey(service: service, account: account, accessGroup: accessGroup)) }
        catch { throw KeychainError(error) }
    }

    public var query: ItemQuery { ItemQuery(kind: .generic, accessGroup: accessGroup, service: service) }
}

/// Internet passwords of one server, port, path, protocol, authentication type and domain.
public struct InternetPasswordQuery: Sendable {
    public let keychain: Keychain
    public let server: String
    public let port: UInt16
    public let path: String
    public let `protocol`: InternetProtocol
    public let authenticationType: AuthenticationType
    public let securityDomain: String
    public let accessGroup: String

    public init(_ keychain: Keychain, server: String, port: UInt16 = 0, path: String = "",
                protocol proto: InternetProtocol = .https, authenticationType: AuthenticationType = .default,
                securityDomain: String = "", accessGroup: String = "") {
        self.keychain = keychain; self.server = server; self.port = port; self.path = path; self.protocol = proto
        self.authenticationType = authenticationType; self.securityDomain = securityDomain; self.accessGroup = accessGroup
    }

    public func key(_ account: String) throws -> ItemKey {
        do {
            return .internet(try InternetPasswordKey(server: server, port: port, path: path, protocol: self.protocol,
                                                     authenticationType: authenticationType,
                                                     securityDomain: securityDomain, account: account,
                                                     accessGroup: accessGroup))
        } catch { throw KeychainError(error) }
    }

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
