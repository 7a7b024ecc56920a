import KeychainCrypto

/// The answer to `get`, as git reads it from a helper's stdout.
package enum CredentialResponse {
    /// `username=` and `password=` are always written, even empty, since git treats an absent
    /// password as "not found". Throws rather than write a value holding a newline or NUL,
    /// which would let an item's content inject attributes (e.g. a different `host`). The
    /// answer holds the secret, so it is built in locked memory.
    package static func format(account: String, secret: SecureBytes,
                              extras: CredentialExtras = CredentialExtras()) throws(CredentialError) -> SecureBytes {
        try printable("username", Array(account.utf8))
        try printable("password", secret)
        if let v = extras.passwordExpiryUTC { try printable("password_expiry_utc", Array(v.utf8)) }
        if let v = extras.oauthRefreshToken { try printable("oauth_refresh_token", v) }
        let out = LineWriter()
        out.add("username", account)
        out.add("password", secret)
        if let v = extras.passwordExpiryUTC { out.add("password_expiry_utc", v) }
        if let v = extras.oauthRefreshToken { out.add("oauth_refresh_token", v) }
        return out.bytes
    }

    private static func printable(_ key: String, _ value: some Sequence<UInt8>) throws(CredentialError) {
        guard !value.contains(UInt8(ascii: "\n")), !value.contains(0) else { throw .unprintable(key) }
    }

    private static func printable(_ key: String, _ value: SecureBytes) throws(CredentialError) {
        guard value.withUnsafeBytes({ !$0.contains(UInt8(ascii: "\n")) && !$0.contains(0) }) else { throw .unprintable(key) }
    }
}
