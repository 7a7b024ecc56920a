// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif
import KeychainModel

/// Attributes git sends with a password that must come back with it on `get`. They are sealed
/// with the password (the item's extras), as `key=value` lines, the form git uses for them;
/// earlier versions kept them in the readable `generic` attribute, which is still read.
package struct CredentialExtras: Equatable, Sendable {
    /// Unix time after which git discards the password; kept as git sent it.
    package var passwordExpiryUTC: String?
    package var oauthRefreshToken: String?

    package init(passwordExpiryUTC: String? = nil, oauthRefreshToken: String? = nil) {
        self.passwordExpiryUTC = passwordExpiryUTC
        self.oauthRefreshToken = oauthRefreshToken
    }

    /// Empty values count as absent: git sends `key=` to clear an attribute.
    package init(request: CredentialRequest) {
        self.init(passwordExpiryUTC: request.passwordExpiryUTC.flatMap(Self.nonEmpty),
                  oauthRefreshToken: request.oauthRefreshToken.flatMap(Self.nonEmpty))
    }

    /// Tolerates anything: `generic` may have been written by another program.
    package init(decoding data: Data?) {
        self.init()
        guard let data, let text = String(data: data, encoding: .utf8) else { return }
        // On bytes, as the request is read: a `=` followed by a combining mark is one
        // character with it, and a value may begin with one (`PathText`).
        for line in PathText.split(text, on: UInt8(ascii: "\n")) {
            guard let eq = line.utf8.firstIndex(of: UInt8(ascii: "=")) else { continue }
            let value = Self.nonEmpty(String(line[line.utf8.index(after: eq)...]))
            switch String(line[..<eq]) {
            case "password_expiry_utc": passwordExpiryUTC = value
            case "oauth_refresh_token": oauthRefreshToken = value
            default: break
            }
        }
    }

    package var isEmpty: Bool { passwordExpiryUTC == nil && oauthRefreshToken == nil }

    /// Nil when there is nothing to keep, so items without extras leave `generic` unset.
    package func encode() -> Data? {
        guard !isEmpty else { return nil }
        var text = ""
        if let passwordExpiryUTC { text += "password_expiry_utc=\(passwordExpiryUTC)\n" }
        if let oauthRefreshToken { text += "oauth_refresh_token=\(oauthRefreshToken)\n" }
        return Data(text.utf8)
    }

    private static func nonEmpty(_ s: String) -> String? { s.isEmpty ? nil : s }
}
