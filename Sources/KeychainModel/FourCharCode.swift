/// Apple's four-byte type codes (`'htps'`, `'ssh '`), kept as their four ASCII bytes.
public struct FourCharCode: Hashable, Codable, Sendable, CustomStringConvertible, Comparable {
    public let text: String

    public init(_ text: String) throws(ModelError) {
        let bytes = Array(text.utf8)
        // `/`, `%` and `,` would make a variant file name ambiguous.
        guard bytes.count == 4, bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7f && !"/%,".utf8.contains($0) }) else {
            throw .invalid("'\(text)' is not a four-character code")
        }
        self.text = text
    }

    init(known: String) { self.text = known }

    public var description: String { text }
    public static func < (a: Self, b: Self) -> Bool { a.text < b.text }

    public init(from decoder: Decoder) throws {
        let s = try decoder.singleValueContainer().decode(String.self)
        self = try FourCharCode(s)
    }
    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(text)
    }
}

/// A vocabulary of four-char codes with friendly names (`htps` is `https`): the protocols
/// and authentication types. Parsing accepts a friendly name or any four-char code.
public protocol FourCharVocabulary: Hashable, Codable, Sendable, CustomStringConvertible, Comparable {
    var code: FourCharCode { get }
    init(code: FourCharCode)
    /// Friendly name and code of every known value.
    static var vocabulary: [(name: String, code: String)] { get }
    /// What the values are, for error messages ("protocol").
    static var noun: String { get }
}

extension FourCharVocabulary {
    public init(parsing text: String) throws(ModelError) {
        if let known = Self.vocabulary.first(where: { $0.name == text.lowercased() }) {
            self.init(code: FourCharCode(known: known.code))
        } else if let c = try? FourCharCode(text) {
            self.init(code: c)
        } else {
            throw .invalid("unknown \(Self.noun) '\(text)'; expected one of: "
                + Self.knownNames.joined(separator: ", ") + ", or a four-character code")
        }
    }

    public static var knownNames: [String] { vocabulary.map(\.name) }
    public var name: String { Self.vocabulary.first(where: { $0.code == code.text })?.name ?? code.text }
    public var description: String { name }
    public static func < (a: Self, b: Self) -> Bool { a.code < b.code }
    public init(from decoder: Decoder) throws { self.init(code: try FourCharCode(from: decoder)) }
    public func encode(to encoder: Encoder) throws { try code.encode(to: encoder) }

    static func known(_ code: String) -> Self { Self(code: FourCharCode(known: code)) }
}

/// `kSecAttrProtocol`.
public struct InternetProtocol: FourCharVocabulary {
    public let code: FourCharCode
    public init(code: FourCharCode) { self.code = code }
    public static let noun = "protocol"
    public static var vocabulary: [(name: String, code: String)] { table.map { ($0.name, $0.code) } }

    /// The port this protocol uses when an item leaves its port unspecified.
    public var wellKnownPort: UInt16? { Self.table.first(where: { $0.code == code.text })?.port }

    /// The protocol an item made through the tree takes on `port`; `https` where the port has none.
    public static func forPort(_ port: UInt16) -> InternetProtocol {
        table.first(where: { $0.port == port && $0.portDefault }).map { known($0.code) } ?? .https
    }

    public static let https = known("htps")
    public static let http = known("http")
    public static let ssh = known("ssh ")

    /// Apple's kSecAttrProtocol codes. `portDefault` marks the protocol a port maps to in the tree.
    static let table: [(name: String, code: String, port: UInt16?, portDefault: Bool)] = [
        ("https", "htps", 443, true), ("http", "http", 80, true), ("ssh", "ssh ", 22, true),
        ("ftp", "ftp ", 21, true), ("ftps", "ftps", 990, true), ("ftp-account", "ftpa", 21, false),
        ("smtp", "smtp", 25, true), ("imap", "imap", 143, true), ("imaps", "imps", 993, true),
        ("pop3", "pop3", 110, true), ("pop3s", "pops", 995, true), ("ldap", "ldap", 389, true),
        ("ldaps", "ldps", 636, true), ("smb", "smb ", 445, true), ("cifs", "cifs", 445, false),
        ("telnet", "teln", 23, true), ("telnets", "tels", 992, true), ("nntp", "nntp", 119, true),
        ("nntps", "ntps", 563, true), ("irc", "irc ", 194, true), ("ircs", "ircs", 994, true),
        ("socks", "sox ", 1080, true), ("afp", "afp ", 548, true), ("appletalk", "atlk", nil, false),
        ("rtsp", "rtsp", 554, true), ("rtsp-proxy", "rtsx", nil, false), ("ipp", "ipp ", 631, true),
        ("daap", "daap", 3689, true), ("eppc", "eppc", 3031, true), ("http-proxy", "htpx", nil, false),
        ("https-proxy", "htsx", nil, false), ("ftp-proxy", "ftpx", nil, false),
    ]
}

/// `kSecAttrAuthenticationType`.
public struct AuthenticationType: FourCharVocabulary {
    public let code: FourCharCode
    public init(code: FourCharCode) { self.code = code }
    public static let noun = "authentication type"

    public static let `default` = known("dflt")

    public static let vocabulary: [(name: String, code: String)] = [
        ("default", "dflt"), ("html-form", "form"), ("http-basic", "http"), ("http-digest", "httd"),
        ("ntlm", "ntlm"), ("msn", "msna"), ("dpa", "dpaa"), ("rpa", "rpaa"),
    ]
}
