/// File names of internet passwords that share server, port, path and account.
///
/// The canonical variant (the port's protocol, default authentication type, no security domain)
/// is listed as its escaped account. Every other variant is listed as
/// `<account>%~<protocol>[,<authtype>[,<domain>]]`, e.g. `alice%~ssh` or
/// `alice%~https,html-form,example.org`. `%~` never comes from escaping, so the two forms
/// cannot collide, and the name depends only on the item itself, so it is stable.
package enum InternetVariantName {
    package static let marker = "%~"

    package static func fileName(for key: InternetPasswordKey) -> String {
        let account = TreeName.escape(key.account)
        return key.isCanonicalVariant ? account : account + marker + suffix(for: key)
    }

    /// The always-tagged form, which also names the canonical variant.
    package static func taggedFileName(for key: InternetPasswordKey) -> String {
        TreeName.escape(key.account) + marker + suffix(for: key)
    }

    static func suffix(for key: InternetPasswordKey) -> String {
        suffix(key.protocol, key.authenticationType, key.securityDomain)
    }

    private static func suffix(_ proto: InternetProtocol, _ auth: AuthenticationType, _ domain: String) -> String {
        var s = proto.name
        if auth != .default || !domain.isEmpty { s += "," + auth.name }
        if !domain.isEmpty { s += "," + TreeName.escape(domain) }
        return s
    }

    /// Whether `fileName` is spelled as the tree lists the item it names (its plain or its
    /// tagged name), not as one of the other spellings a lookup accepts (`%~SSH`, `%41lice`).
    package static func isListedSpelling(_ fileName: String, port: UInt16) -> Bool {
        guard let p = parse(fileName, port: port) else { return false }
        let account = TreeName.escape(p.account)
        let plain = markerRange(in: fileName) == nil
        return fileName.isSame(as: plain ? account : account + marker + suffix(p.protocol, p.authenticationType, p.securityDomain))
    }

    package struct Parsed: Equatable, Sendable {
        package var account: String
        package var `protocol`: InternetProtocol
        package var authenticationType: AuthenticationType
        package var securityDomain: String
    }

    /// Where the marker is, found on bytes: a character that prepends (U+0600 and others) is
    /// one Swift character with the `%` after it, where a search by characters misses it.
    package static func markerRange(in fileName: String) -> Range<String.Index>? {
        let bytes = fileName.utf8
        var i = bytes.startIndex
        while i < bytes.endIndex {
            let next = bytes.index(after: i)
            if bytes[i] == UInt8(ascii: "%"), next < bytes.endIndex, bytes[next] == UInt8(ascii: "~") {
                return i..<bytes.index(after: next)
            }
            i = next
        }
        return nil
    }

    /// Splits a file name in a port or path directory; nil if it names nothing.
    package static func parse(_ fileName: String, port: UInt16) -> Parsed? {
        guard let r = markerRange(in: fileName) else {
            guard let account = TreeName.unescape(fileName) else { return nil }
            return Parsed(account: account, protocol: .forPort(port), authenticationType: .default, securityDomain: "")
        }
        guard let account = TreeName.unescape(String(fileName[..<r.lowerBound])) else { return nil }
        // On bytes: a `,` followed by a combining mark is one character with it (`PathText`).
        let parts = PathText.split(String(fileName[r.upperBound...]), on: UInt8(ascii: ","), maxSplits: 2, omittingEmpty: false)
        guard let p = parts.first, let proto = try? InternetProtocol(parsing: String(p)) else { return nil }
        var auth = AuthenticationType.default
        if parts.count > 1 {
            guard let a = try? AuthenticationType(parsing: String(parts[1])) else { return nil }
            auth = a
        }
        var domain = ""
        if parts.count > 2 {
            guard let d = TreeName.unescape(String(parts[2])) else { return nil }
            domain = d
        }
        return Parsed(account: account, protocol: proto, authenticationType: auth, securityDomain: domain)
    }
}
