// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif

/// Primary key of a generic password: (access group, service, account).
public struct GenericPasswordKey: Hashable, Codable, Sendable {
    /// Separates programs' items that share a service and account; empty for the default group.
    public var accessGroup: String
    /// What the password is for (`kSecAttrService`), never empty.
    public var service: String
    /// Whose password it is (`kSecAttrAccount`); may be empty.
    public var account: String

    /// Checks that service and account fit a tree name once escaped; the service must not be empty.
    public init(service: String, account: String, accessGroup: String = "") throws(ModelError) {
        guard !service.isEmpty else { throw .invalid("the service must not be empty") }
        try TreeName.validate(service, as: "service")
        try TreeName.validate(account, as: "account")
        self.service = service
        self.account = account
        self.accessGroup = accessGroup
    }

    /// Byte-exact, as the store tells items apart (`ExactName`).
    public static func == (a: Self, b: Self) -> Bool {
        a.service.isSame(as: b.service) && a.account.isSame(as: b.account) && a.accessGroup.isSame(as: b.accessGroup)
    }

    public func hash(into hasher: inout Hasher) {
        ExactName.hash(service, into: &hasher); ExactName.hash(account, into: &hasher); ExactName.hash(accessGroup, into: &hasher)
    }
}

/// Primary key of an internet password:
/// (access group, server, port, path, protocol, authentication type, security domain, account).
public struct InternetPasswordKey: Hashable, Codable, Sendable {
    /// Separates programs' items that share the rest of the key; empty for the default group.
    public var accessGroup: String
    /// Host name or address (`kSecAttrServer`).
    public var server: String
    /// The port; 0 at init becomes the protocol's well-known port.
    public var port: UInt16
    /// URL path, normalised (`InternetPath`); empty for none.
    public var path: String
    /// `kSecAttrProtocol`.
    public var `protocol`: InternetProtocol
    /// `kSecAttrAuthenticationType`.
    public var authenticationType: AuthenticationType
    /// Realm or domain (`kSecAttrSecurityDomain`); empty for none.
    public var securityDomain: String
    /// Whose password it is (`kSecAttrAccount`); may be empty.
    public var account: String

    /// Port 0 becomes the protocol's well-known port; the path is normalised (`InternetPath`).
    public init(server: String, port: UInt16 = 0, path: String = "",
                protocol proto: InternetProtocol = .https,
                authenticationType: AuthenticationType = .default,
                securityDomain: String = "", account: String, accessGroup: String = "") throws(ModelError) {
        guard !server.isEmpty else { throw .invalid("the server must not be empty") }
        try TreeName.validate(server, as: "server")
        try TreeName.validate(account, as: "account")
        self.server = server
        guard port != 0 || proto.wellKnownPort != nil else {
            throw .invalid("protocol '\(proto.name)' has no well-known port; give a port from 1 to 65535")
        }
        self.port = port == 0 ? proto.wellKnownPort! : port
        self.path = InternetPath.normalize(path)
        for segment in InternetPath.segments(self.path) { try TreeName.validate(segment, as: "path segment") }
        self.protocol = proto
        self.authenticationType = authenticationType
        self.securityDomain = securityDomain
        self.account = account
        self.accessGroup = accessGroup
        try TreeName.validate(InternetVariantName.fileName(for: self), as: "account with its variant suffix")
        try InternetTreePath.validate(self)
    }

    /// Byte-exact, as the store tells items apart (`ExactName`).
    public static func == (a: Self, b: Self) -> Bool {
        a.port == b.port && a.protocol == b.protocol && a.authenticationType == b.authenticationType
            && a.server.isSame(as: b.server) && a.account.isSame(as: b.account) && a.path.isSame(as: b.path)
            && a.securityDomain.isSame(as: b.securityDomain) && a.accessGroup.isSame(as: b.accessGroup)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(port); hasher.combine(`protocol`); hasher.combine(authenticationType)
        for s in [server, account, path, securityDomain, accessGroup] { ExactName.hash(s, into: &hasher) }
    }

    /// The item an internet file made through the tree stands for: the port's protocol,
    /// the default authentication type and no security domain.
    package var isCanonicalVariant: Bool {
        `protocol` == InternetProtocol.forPort(port) && authenticationType == .default && securityDomain.isEmpty
    }
}

/// Port text as given on the CLI, in git's `host:port`, or as a tree directory.
package enum InternetPort {
    /// Decimal 1–65535 (0 too when `allowUnspecified`); anything else is refused.
    package static func parse(_ text: String, allowUnspecified: Bool = false) throws(ModelError) -> UInt16 {
        guard !text.isEmpty, text.utf8.count <= 5, text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }),
              let n = Int(text), n <= 65535, n > 0 || allowUnspecified else {
            throw .invalid("port '\(text)' is not a number from 1 to 65535")
        }
        return UInt16(n)
    }

    /// A port directory's name: as `parse`, written as the tree lists it, without leading
    /// zeros. `0443` would otherwise be a second name of `443`, whose files one could open but
    /// never list.
    package static func parseDirectoryName(_ name: String) throws(ModelError) -> UInt16 {
        let port = try parse(name)
        guard name.utf8.first != UInt8(ascii: "0") else {
            throw .invalid("port directory '\(name)' has leading zeros (it is '\(port)')")
        }
        return port
    }
}

/// Internet password paths are kept as segments joined by `/`, without a leading or trailing
/// `/` and without empty segments: `/a//b/` and `a/b` are the same path.
package enum InternetPath {
    package static func normalize(_ path: String) -> String {
        segments(path).joined(separator: "/")
    }

    package static func segments(_ path: String) -> [String] {
        PathText.split(path)
    }
}

/// The primary key of an item of either kind: no two items in a store share one.
public enum ItemKey: Hashable, Codable, Sendable {
    case generic(GenericPasswordKey)
    case internet(InternetPasswordKey)

    /// Generic or internet.
    public var kind: ItemKind {
        switch self {
        case .generic: .generic
        case .internet: .internet
        }
    }

    /// The account, which both kinds have.
    public var account: String {
        switch self {
        case .generic(let g): g.account
        case .internet(let i): i.account
        }
    }

    /// The access group, which both kinds have.
    public var accessGroup: String {
        switch self {
        case .generic(let g): g.accessGroup
        case .internet(let i): i.accessGroup
        }
    }

    /// Unambiguous bytes for the blind index: a kind tag, then each field length-prefixed.
    package var canonicalBytes: [UInt8] {
        var out: [UInt8] = []
        func field(_ s: String) {
            let b = Array(s.utf8)
            let n = UInt32(b.count)
            out += [UInt8(n >> 24), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)]
            out += b
        }
        switch self {
        case .generic(let g):
            out.append(1)
            field(g.accessGroup); field(g.service); field(g.account)
        case .internet(let i):
            out.append(2)
            field(i.accessGroup); field(i.server); field(String(i.port)); field(i.path)
            field(i.protocol.code.text); field(i.authenticationType.code.text)
            field(i.securityDomain); field(i.account)
        }
        return out
    }

    /// Bytes for the group index: the service, or the server, which most queries name.
    package var groupBytes: [UInt8] {
        switch self {
        case .generic(let g): ItemKey.groupBytes(kind: .generic, name: g.service)
        case .internet(let i): ItemKey.groupBytes(kind: .internet, name: i.server)
        }
    }

    /// Leaves out the access group so that a query naming only the service finds every group.
    package static func groupBytes(kind: ItemKind, name: String) -> [UInt8] {
        [kind == .generic ? 3 : 4] + Array(name.utf8)
    }
}

/// The two kinds of password, after Apple's `kSecClassGenericPassword` and `kSecClassInternetPassword`; the raw value is stored.
public enum ItemKind: Int, Codable, Sendable {
    case generic = 1
    case internet = 2
}

/// The attributes every item carries besides its primary key: those the user sets (one row
/// each in `ItemAttribute.all`, read as `attributes.label` and so on), and the class and dates.
@dynamicMemberLookup
public struct ItemAttributes: Hashable, Codable, Sendable {
    /// The attributes the user sets.
    public var values: AttributeValues
    /// When the secret may be decrypted; chosen at creation, changeable later.
    public var accessible: AccessibilityClass
    /// When the item was added.
    public var created: Date
    /// When the secret or an attribute last changed.
    public var modified: Date

    /// `modified` nil is `created`.
    public init(_ values: AttributeValues = AttributeValues(), accessible: AccessibilityClass = .default,
                created: Date = Date(), modified: Date? = nil) {
        self.values = values
        self.accessible = accessible
        self.created = created
        self.modified = modified ?? created
    }

    /// Each of the `AttributeValues`, by its name (`.label`), read and set in place.
    public subscript<T>(dynamicMember path: WritableKeyPath<AttributeValues, T>) -> T {
        get { values[keyPath: path] }
        set { values[keyPath: path] = newValue }
    }

    /// An item of a this-device-only class never leaves the device, so it is never
    /// synchronizable; `notSynchronizable` (exit 78) otherwise.
    package func checkSynchronizable() throws(KeychainError) {
        if values.synchronizable == true && accessible.isThisDeviceOnly {
            throw .notSynchronizable("an item of class '\(accessible.rawValue)' cannot be synchronizable: this-device-only items never leave the device; nothing was changed")
        }
    }

    /// The default for a new item that does not say (config.toml's `default-synchronizable`):
    /// applied only where allowed, so the default never makes a this-device-only add fail.
    package mutating func applyDefaultSynchronizable(_ synchronizable: Bool) {
        if values.synchronizable == nil && synchronizable && !accessible.isThisDeviceOnly { values.synchronizable = true }
    }

    // Flat JSON, one key per attribute, as the rows of stores before format 1 were written.
    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(_ s: String) { stringValue = s }
        init?(stringValue s: String) { stringValue = s }
        init?(intValue: Int) { nil }
    }

    /// Reads each attribute by name; one absent from the record is unset.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: Key.self)
        values = AttributeValues()
        for a in ItemAttribute.all {
            let key = Key(a.name)
            let v: AttributeValue? = switch a.kind {
            case .text: try c.decodeIfPresent(String.self, forKey: key).map(AttributeValue.text)
            case .bytes: try c.decodeIfPresent(Data.self, forKey: key).map(AttributeValue.bytes)
            case .code: try c.decodeIfPresent(FourCharCode.self, forKey: key).map(AttributeValue.code)
            case .programs: try c.decodeIfPresent(AccessList.self, forKey: key).map(AttributeValue.programs)
            case .flag: try c.decodeIfPresent(Bool.self, forKey: key).map(AttributeValue.flag)
            }
            values[a] = v
        }
        accessible = try c.decode(AccessibilityClass.self, forKey: Key("accessible"))
        created = try c.decode(Date.self, forKey: Key("created"))
        modified = try c.decode(Date.self, forKey: Key("modified"))
    }

    /// Writes each attribute by name, leaving out those not set.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: Key.self)
        for a in ItemAttribute.all {
            switch values[a] {
            case .text(let s)?: try c.encode(s, forKey: Key(a.name))
            case .bytes(let d)?: try c.encode(d, forKey: Key(a.name))
            case .code(let code)?: try c.encode(code, forKey: Key(a.name))
            case .programs(let list)?: try c.encode(list, forKey: Key(a.name))
            case .flag(let b)?: try c.encode(b, forKey: Key(a.name))
            case nil: break
            }
        }
        try c.encode(accessible, forKey: Key("accessible"))
        try c.encode(created, forKey: Key("created"))
        try c.encode(modified, forKey: Key("modified"))
    }
}

/// An item's key and attributes: everything but the secret.
public struct ItemRecord: Hashable, Codable, Sendable {
    /// Which item this is.
    public var key: ItemKey
    /// Its class, dates and the attributes the user sets.
    public var attributes: ItemAttributes

    /// A record as given; nothing is checked beyond what the key's own init checked.
    public init(key: ItemKey, attributes: ItemAttributes) {
        self.key = key
        self.attributes = attributes
    }
}

/// The largest secret an item may hold.
public let maxSecretBytes = 16 * 1024 * 1024
