// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import KeychainCrypto

/// Attributes git sends with a password that must come back with it on `get`. They are sealed
/// with the password (the item's extras), as `key=value` lines, the form git uses for them;
/// earlier versions kept them in the readable `generic` attribute, which is still read.
package struct CredentialExtras: Equatable, Sendable {
    /// Unix time after which git discards the password; kept as git sent it.
    package var passwordExpiryUTC: String?
    /// A secret, kept as the password is.
    package var oauthRefreshToken: SecureBytes?

    package init(passwordExpiryUTC: String? = nil, oauthRefreshToken: SecureBytes? = nil) {
        self.passwordExpiryUTC = passwordExpiryUTC
        self.oauthRefreshToken = oauthRefreshToken
    }

    /// Empty values count as absent: git sends `key=` to clear an attribute.
    package init(request: CredentialRequest) {
        self.init(passwordExpiryUTC: request.passwordExpiryUTC.flatMap { $0.isEmpty ? nil : $0 },
                  oauthRefreshToken: request.oauthRefreshToken.flatMap { $0.count == 0 ? nil : $0 })
    }

    /// The item's sealed extras. Tolerates anything, as `init(legacy:)`.
    package init(decoding sealed: SecureBytes) {
        self.init()
        sealed.withUnsafeBytes { decode($0) }
    }

    /// Extras an earlier version kept in the clear in `generic`, which another program may
    /// have written: anything that is not a known line is skipped.
    package init(legacy generic: Data?) {
        self.init()
        generic?.withUnsafeBytes { decode($0) }
    }

    /// On bytes, as the request is read: a `=` followed by a combining mark is one character
    /// with it, and a value may begin with one.
    private mutating func decode(_ bytes: UnsafeRawBufferPointer) {
        for line in bytes.split(separator: UInt8(ascii: "\n")) {
            guard let eq = line.firstIndex(of: UInt8(ascii: "=")) else { continue }
            let value = UnsafeRawBufferPointer(rebasing: line[(eq + 1)...])
            switch String(decoding: line[..<eq], as: UTF8.self) {
            case "password_expiry_utc":
                passwordExpiryUTC = value.isEmpty ? nil : String(validating: value, as: UTF8.self)
            case "oauth_refresh_token":
                oauthRefreshToken = value.isEmpty ? nil : SecureBytes(copying: value)
            default: break
            }
        }
    }

    package var isEmpty: Bool { passwordExpiryUTC == nil && oauthRefreshToken == nil }

    /// The lines to seal; empty when there is nothing to keep (a store then drops earlier ones).
    package func encode() -> SecureBytes {
        let lines = LineWriter()
        if let passwordExpiryUTC { lines.add("password_expiry_utc", passwordExpiryUTC) }
        if let oauthRefreshToken { lines.add("oauth_refresh_token", oauthRefreshToken) }
        return lines.bytes
    }

    package static func == (a: Self, b: Self) -> Bool {
        a.passwordExpiryUTC == b.passwordExpiryUTC && sameSecret(a.oauthRefreshToken, b.oauthRefreshToken)
    }
}

/// `key=value` lines built in locked memory, as both a response and the sealed extras are.
struct LineWriter {
    let bytes = SecureBytes()

    func add(_ key: String, _ value: String) {
        Array(value.utf8).withUnsafeBytes { add(key, $0) }
    }

    func add(_ key: String, _ value: SecureBytes) {
        value.withUnsafeBytes { add(key, $0) }
    }

    func add(_ key: String, _ value: UnsafeRawBufferPointer) {
        (Array(key.utf8) + [UInt8(ascii: "=")]).withUnsafeBytes { bytes.append($0) }
        bytes.append(value)
        [UInt8(ascii: "\n")].withUnsafeBytes { bytes.append($0) }
    }

    /// `add`, refusing a value that holds a newline or NUL: git would read an item's content
    /// past it as attributes of its own (e.g. another `host`).
    func addPrintable(_ key: String, _ value: String) throws(CredentialError) {
        guard Self.isPrintable(value.utf8) else { throw .unprintable(key) }
        add(key, value)
    }

    func addPrintable(_ key: String, _ value: SecureBytes) throws(CredentialError) {
        guard value.withUnsafeBytes({ Self.isPrintable($0) }) else { throw .unprintable(key) }
        add(key, value)
    }

    private static func isPrintable(_ value: some Sequence<UInt8>) -> Bool {
        !value.contains(UInt8(ascii: "\n")) && !value.contains(0)
    }
}
