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
    package init(parsing text: String) throws(CredentialError) {
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { throw .invalidHost(text) }
            let address = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            guard !address.isEmpty else { throw .invalidHost(text) }
            if rest.isEmpty {
                self.init(server: String(address))
            } else if rest.hasPrefix(":") {
                self.init(server: String(address), port: try Self.port(String(rest.dropFirst())))
            } else {
                throw .invalidHost(text)
            }
            return
        }
        let colons = text.filter { $0 == ":" }.count
        // More than one colon without brackets is not `name:port`; git never sends a bare
        // IPv6 address, so the whole text is taken as the server name.
        guard colons == 1, let colon = text.firstIndex(of: ":") else {
            guard !text.isEmpty else { throw .invalidHost(text) }
            self.init(server: text)
            return
        }
        let name = String(text[..<colon])
        guard !name.isEmpty else { throw .invalidHost(text) }
        self.init(server: name, port: try Self.port(String(text[text.index(after: colon)...])))
    }

    private static func port(_ text: String) throws(CredentialError) -> UInt16 {
        do { return try InternetPort.parse(text) } catch { throw .invalidPort(text) }
    }
}
