// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif

/// Which items a find or delete acts on. Attributes left nil match anything, as with
/// `SecItemCopyMatching`; an attribute filter matches only items that have that attribute,
/// with exactly that value.
@dynamicMemberLookup
public struct ItemQuery: Codable, Sendable, Equatable {
    /// Which kind of item to match; a query never spans both.
    public var kind: ItemKind
    /// nil matches every access group.
    public var accessGroup: String?
    /// nil matches every account.
    public var account: String?
    /// Generic passwords.
    public var service: String?
    /// Internet passwords.
    public var server: String?
    /// Internet passwords; nil matches any port.
    public var port: UInt16?
    /// Internet passwords, normalised like the key's path; nil matches any path.
    public var path: String?
    /// Internet passwords; nil matches any protocol.
    public var `protocol`: InternetProtocol?
    /// Internet passwords; nil matches any authentication type.
    public var authenticationType: AuthenticationType?
    /// Internet passwords; nil matches any security domain.
    public var securityDomain: String?
    /// Attribute filters (macOS `security`'s -l -j -D -G -c -C), read and set as `query.label`
    /// and so on; they are sealed, so they are checked on each candidate after it is decrypted.
    public var attributes: AttributeValues

    /// Every filter left nil matches anything; `path` is normalised as a key's is.
    public init(kind: ItemKind, accessGroup: String? = nil, account: String? = nil, service: String? = nil,
                server: String? = nil, port: UInt16? = nil, path: String? = nil, protocol proto: InternetProtocol? = nil,
                authenticationType: AuthenticationType? = nil, securityDomain: String? = nil,
                attributes: AttributeValues = AttributeValues()) {
        self.kind = kind; self.accessGroup = accessGroup; self.account = account; self.service = service
        self.server = server; self.port = port; self.path = path.map(InternetPath.normalize); self.protocol = proto
        self.authenticationType = authenticationType; self.securityDomain = securityDomain
        self.attributes = attributes
    }

    /// Each of the `AttributeValues`, by its name (`.label`), read and set in place.
    public subscript<T>(dynamicMember path: WritableKeyPath<AttributeValues, T>) -> T {
        get { attributes[keyPath: path] }
        set { attributes[keyPath: path] = newValue }
    }

    /// True when the query names nothing but the kind: it matches every item of that kind.
    public var isUnfiltered: Bool { self == ItemQuery(kind: kind) }

    /// The query that matches `key`'s item and no other.
    public static func exactly(_ key: ItemKey) -> ItemQuery {
        switch key {
        case .generic(let g):
            ItemQuery(kind: .generic, accessGroup: g.accessGroup, account: g.account, service: g.service)
        case .internet(let i):
            ItemQuery(kind: .internet, accessGroup: i.accessGroup, account: i.account, server: i.server, port: i.port,
                      path: i.path, protocol: i.protocol, authenticationType: i.authenticationType,
                      securityDomain: i.securityDomain)
        }
    }

    /// The full primary key, when the query names every part of it: then one blind-index probe finds it.
    package var exactKey: ItemKey? {
        guard let account else { return nil }
        switch kind {
        case .generic:
            guard let service else { return nil }
            return try? .generic(GenericPasswordKey(service: service, account: account, accessGroup: accessGroup ?? ""))
        case .internet:
            guard let server, let port, let path, let proto = self.protocol, let authenticationType, let securityDomain
            else { return nil }
            return try? .internet(InternetPasswordKey(server: server, port: port, path: path, protocol: proto,
                                                      authenticationType: authenticationType,
                                                      securityDomain: securityDomain, account: account,
                                                      accessGroup: accessGroup ?? ""))
        }
    }

    /// The service or server, which narrows a query through the group index.
    package var groupName: String? { kind == .generic ? service : server }

    /// Whether `key` passes the key filters (port 0 as the well-known port); attribute filters
    /// need `matches(_: ItemRecord)`. Names match as bytes, as the store holds them (`ExactName`):
    /// a delete of one form of a name must not take the other.
    public func matches(_ key: ItemKey) -> Bool {
        func eq<T: Equatable>(_ want: T?, _ have: T) -> Bool { want.map { $0 == have } ?? true }
        func eq(_ want: String?, _ have: String) -> Bool { have.matches(want) }
        switch key {
        case .generic(let g):
            return kind == .generic && eq(accessGroup, g.accessGroup) && eq(service, g.service) && eq(account, g.account)
        case .internet(let i):
            let wantPort = port.flatMap { $0 == 0 ? (self.protocol?.wellKnownPort ?? 0) : $0 }
            return kind == .internet && eq(accessGroup, i.accessGroup) && eq(server, i.server)
                && (wantPort == nil || wantPort == 0 || wantPort == i.port)
                && eq(path, i.path) && eq(self.protocol, i.protocol) && eq(authenticationType, i.authenticationType)
                && eq(securityDomain, i.securityDomain) && eq(account, i.account)
        }
    }

    /// The key matches, and so does every attribute filter.
    public func matches(_ record: ItemRecord) -> Bool {
        matches(record.key) && attributes.isContained(in: record.attributes.values)
    }
}

/// Attribute values to set on add or update (read and set as `changes.label` and so on);
/// nil leaves an attribute as it is.
@dynamicMemberLookup
public struct AttributeChanges: Codable, Sendable, Equatable {
    /// The attributes to set; those left nil stay as they are.
    public var values: AttributeValues
    /// The class to set; nil keeps the item's own.
    public var accessible: AccessibilityClass?

    /// `accessible` nil keeps the item's class (or gives a new item the default one).
    public init(_ values: AttributeValues = AttributeValues(), accessible: AccessibilityClass? = nil) {
        self.values = values
        self.accessible = accessible
    }

    /// Values set by `build`: `AttributeChanges { $0.label = "work" }`.
    public init(accessible: AccessibilityClass? = nil, _ build: (inout AttributeValues) throws -> Void) rethrows {
        self.init(try AttributeValues(build), accessible: accessible)
    }

    /// Each of the `AttributeValues`, by its name (`.label`), read and set in place.
    public subscript<T>(dynamicMember path: WritableKeyPath<AttributeValues, T>) -> T {
        get { values[keyPath: path] }
        set { values[keyPath: path] = newValue }
    }

    /// `a` with these changes made: the values set here and, if given, the class.
    public func applied(to a: ItemAttributes) -> ItemAttributes {
        var a = a
        a.values.apply(values)
        if let accessible { a.accessible = accessible }
        return a
    }
}

/// One item that failed its integrity check; item id 0 is the store as a whole (its keybag,
/// key-derivation data or ledger).
public struct IntegrityProblem: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The item's row id; 0 for the store as a whole.
    public var itemID: Int64
    /// What failed, for the user.
    public var reason: String
    /// One line for `keychainfs verify`'s report.
    public var description: String { itemID == 0 ? "store: \(reason)" : "item #\(itemID): \(reason)" }

    /// A problem with item `itemID` (0 for the store).
    public init(itemID: Int64, reason: String) { self.itemID = itemID; self.reason = reason }
}
