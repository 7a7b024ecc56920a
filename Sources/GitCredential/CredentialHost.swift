import KeychainModel

/// git's `host` attribute split into the server name and an explicit port.
package struct CredentialHost: Equatable, Sendable {
    /// The name or address; an IPv6 address is given without its brackets.
    package var server: String
    /// Nil when the host names no port, so the protocol's well-known port applies.
    package var port: UInt16?

    package init(server: String, port: UInt16? = nil) {
        self.server = server
        self.port = port
    }

    /// Accepts `name`, `name:port`, `[ipv6]` and `[ipv6]:port`. Port 0 is refused: in a URL it
    /// is no port at all, and accepting it would make it an alias of the well-known port.
    /// Read on bytes: a `[`, `]` or `:` followed by a combining mark is one character with it,
    /// and would not be found as a character (`PathText`).
    package init(parsing text: String) throws(CredentialError) {
        let bytes = text.utf8
        if bytes.first == UInt8(ascii: "[") {
            guard let close = bytes.firstIndex(of: UInt8(ascii: "]")) else { throw .invalidHost(text) }
            let address = String(text[bytes.index(after: bytes.startIndex)..<close])
            let rest = String(text[bytes.index(after: close)...])
            guard !address.isEmpty else { throw .invalidHost(text) }
            if rest.isEmpty {
                self.init(server: address)
            } else if rest.utf8.first == UInt8(ascii: ":") {
                self.init(server: address, port: try Self.port(String(rest.utf8.dropFirst())!))
            } else {
                throw .invalidHost(text)
            }
            return
        }
        let colons = bytes.filter { $0 == UInt8(ascii: ":") }.count
        // More than one colon without brackets is not `name:port`; git never sends a bare
        // IPv6 address, so the whole text is taken as the server name.
        guard colons == 1, let colon = bytes.firstIndex(of: UInt8(ascii: ":")) else {
            guard !text.isEmpty else { throw .invalidHost(text) }
            self.init(server: text)
            return
        }
        let name = String(text[..<colon])
        guard !name.isEmpty else { throw .invalidHost(text) }
        self.init(server: name, port: try Self.port(String(text[bytes.index(after: colon)...])))
    }

    private static func port(_ text: String) throws(CredentialError) -> UInt16 {
        do { return try InternetPort.parse(text) } catch { throw .invalidPort(text) }
    }
}
