/// The answer to `get`, as git reads it from a helper's stdout.
package enum CredentialResponse {
    /// `username=` and `password=` are always written, even empty, since git treats an absent
    /// password as "not found". Throws rather than write a value holding a newline or NUL,
    /// which would let an item's content inject attributes (e.g. a different `host`).
    package static func format(account: String, secret: some Collection<UInt8>,
                              extras: CredentialExtras = CredentialExtras()) throws(CredentialError) -> [UInt8] {
        var out: [UInt8] = []
        try line("username", Array(account.utf8), into: &out)
        try line("password", Array(secret), into: &out)
        if let v = extras.passwordExpiryUTC { try line("password_expiry_utc", Array(v.utf8), into: &out) }
        if let v = extras.oauthRefreshToken { try line("oauth_refresh_token", Array(v.utf8), into: &out) }
        return out
    }

    private static func line(_ key: String, _ value: [UInt8], into out: inout [UInt8]) throws(CredentialError) {
        guard !value.contains(UInt8(ascii: "\n")), !value.contains(0) else { throw .unprintable(key) }
        out += Array(key.utf8) + [UInt8(ascii: "=")] + value + [UInt8(ascii: "\n")]
    }
}
