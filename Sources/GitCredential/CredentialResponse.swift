import KeychainCrypto

/// The answer to `get`, as git reads it from a helper's stdout.
package enum CredentialResponse {
    /// `username=` and `password=` are always written, even empty, since git treats an absent
    /// password as "not found". Throws rather than write a value holding a newline or NUL,
    /// which would let an item's content inject attributes (e.g. a different `host`). The
    /// answer holds the secret, so it is built in locked memory.
    package static func format(account: String, secret: SecureBytes,
                              extras: CredentialExtras = CredentialExtras()) throws(CredentialError) -> SecureBytes {
        let out = LineWriter()
        try out.addPrintable("username", account)
        try out.addPrintable("password", secret)
        if let v = extras.passwordExpiryUTC { try out.addPrintable("password_expiry_utc", v) }
        if let v = extras.oauthRefreshToken { try out.addPrintable("oauth_refresh_token", v) }
        return out.bytes
    }
}
