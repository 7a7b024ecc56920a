/// Apple's four-byte type codes (`'htps'`, `'ssh '`), kept as their four ASCII bytes.
public struct FourCharCode: Hashable, Codable, Sendable, CustomStringConvertible, Comparable {
    /// The four ASCII characters, as Apple writes them (`htps`).
    public let text: String

    /// Checks that `text` is four printable ASCII characters a file name can hold.
    public init(_ text: String) throws(ModelError) {
        let bytes = Array(text.utf8)
        // `/`, `%` and `,` would make a variant file name ambiguous.
        guard bytes.count == 4, bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7f && !"/%,".utf8.contains($0) }) else {
            throw .invalid("'\(text)' is not a four-character code")
        }
        self.text = text
    }

    init(known: String) { self.text = known }

    /// The four characters themselves.
    public var description: String { text }
    /// Orders by text, so listings are stable.
    public static func < (a: Self, b: Self) -> Bool { a.text < b.text }

    /// Decodes a JSON string and checks it as `init(_:)` does.
    public init(from decoder: Decoder) throws {
        let s = try decoder.singleValueContainer().decode(String.self)
        self = try FourCharCode(s)
    }
    /// Encodes as a plain string.
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
    /// Accepts a friendly name (`https`, case-insensitive) or any valid four-char code.
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

    /// The friendly names, for help texts and error messages.
    public static var knownNames: [String] { vocabulary.map(\.name) }
    /// The friendly name, or the raw code when the vocabulary has none.
    public var name: String { Self.vocabulary.first(where: { $0.code == code.text })?.name ?? code.text }
    /// The friendly name, so output reads `https` rather than `htps`.
    public var description: String { name }
    /// Orders by code, so listings are stable.
    public static func < (a: Self, b: Self) -> Bool { a.code < b.code }
    /// Decodes the code as a plain string.
    public init(from decoder: Decoder) throws { self.init(code: try FourCharCode(from: decoder)) }
    /// Encodes the code, not the friendly name, so that stored values never change with the vocabulary.
    public func encode(to encoder: Encoder) throws { try code.encode(to: encoder) }

    static func known(_ code: String) -> Self { Self(code: FourCharCode(known: code)) }
}

/// `kSecAttrProtocol`.
public struct InternetProtocol: FourCharVocabulary {
    /// Apple's code, as stored.
    public let code: FourCharCode
    /// Any code, known to the vocabulary or not.
    public init(code: FourCharCode) { self.code = code }
    /// For error messages.
    public static let noun = "protocol"
    /// The friendly names and codes of Apple's protocols.
    public static var vocabulary: [(name: String, code: String)] { table.map { ($0.name, $0.code) } }

    /// The port this protocol uses when an item leaves its port unspecified.
    public var wellKnownPort: UInt16? { Self.table.first(where: { $0.code == code.text })?.port }

    /// The protocol an item made through the tree takes on `port`; `https` where the port has none.
    package static func forPort(_ port: UInt16) -> InternetProtocol {
        table.first(where: { $0.port == port && $0.portDefault }).map { known($0.code) } ?? .https
    }

    /// `htps`, the protocol of an item that names none.
    public static let https = known("htps")
    /// `http`.
    public static let http = known("http")
    /// `ssh `, with Apple's trailing space.
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
    /// Apple's code, as stored.
    public let code: FourCharCode
    /// Any code, known to the vocabulary or not.
    public init(code: FourCharCode) { self.code = code }
    /// For error messages.
    public static let noun = "authentication type"

    /// `dflt`, the authentication type of an item that names none.
    public static let `default` = known("dflt")

    /// The friendly names and codes of Apple's authentication types.
    public static let vocabulary: [(name: String, code: String)] = [
        ("default", "dflt"), ("html-form", "form"), ("http-basic", "http"), ("http-digest", "httd"),
        ("ntlm", "ntlm"), ("msn", "msna"), ("dpa", "dpaa"), ("rpa", "rpaa"),
    ]
}
