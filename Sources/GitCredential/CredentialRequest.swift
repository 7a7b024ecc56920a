import KeychainCrypto

/// The attributes git writes to a helper's stdin (git-credential(1), "INPUT/OUTPUT FORMAT").
///
/// The two secrets, `password` and `oauth_refresh_token`, go from the request's locked buffer
/// straight into locked buffers of their own: never into a `String` or an array that nothing
/// wipes. As bytes, they need not be UTF-8 (git's are C strings: anything but NUL and newline).
package struct CredentialRequest: Equatable, Sendable {
    package var `protocol`: String?
    package var host: String?
    package var path: String?
    /// Nil when git sent no `username` line; `""` when it sent `username=`.
    package var username: String?
    /// Nil when git sent no `password` line; empty when it sent `password=`.
    package var password: SecureBytes?
    package var passwordExpiryUTC: String?
    package var oauthRefreshToken: SecureBytes?
    /// Multi-valued attributes (`wwwauth[]`, `capability[]`, …), keyed without the `[]`.
    package var arrays: [String: [String]]

    package init(protocol: String? = nil, host: String? = nil, path: String? = nil,
                username: String? = nil, password: SecureBytes? = nil,
                passwordExpiryUTC: String? = nil, oauthRefreshToken: SecureBytes? = nil,
                arrays: [String: [String]] = [:]) {
        self.protocol = `protocol`
        self.host = host
        self.path = path
        self.username = username
        self.password = password
        self.passwordExpiryUTC = passwordExpiryUTC
        self.oauthRefreshToken = oauthRefreshToken
        self.arrays = arrays
    }

    /// Parses `key=value` lines up to EOF or the first empty line.
    ///
    /// Only the text before a line's first `=` is its key, so no value, however long, can set
    /// another attribute. A later line wins over an earlier one with the same key, as in git.
    package init(parsing input: SecureBytes) throws(CredentialError) {
        self.init()
        // `withUnsafeBytes` rethrows untyped errors, so the parse's comes out as a value.
        var request = self
        let failure = input.withUnsafeBytes { bytes -> CredentialError? in
            do throws(CredentialError) { try request.parse(bytes) } catch { return error }
            return nil
        }
        if let failure { throw failure }
        self = request
    }

    private mutating func parse(_ bytes: UnsafeRawBufferPointer) throws(CredentialError) {
        var lineNumber = 0
        var start = 0
        while start <= bytes.count {
            lineNumber += 1
            let newline = bytes[start...].firstIndex(of: UInt8(ascii: "\n")) ?? bytes.count
            var line = bytes[start..<newline]
            start = newline + 1
            // git reads lines with strbuf_getline, which also accepts CRLF.
            if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
            if line.isEmpty { break }
            guard !line.contains(0), let eq = line.firstIndex(of: UInt8(ascii: "=")),
                  let key = String(validating: line[..<eq], as: UTF8.self) else {
                throw .malformedLine(lineNumber)
            }
            let value = UnsafeRawBufferPointer(rebasing: line[(eq + 1)...])
            switch key {
            case "password": password = SecureBytes(copying: value)
            case "oauth_refresh_token": oauthRefreshToken = SecureBytes(copying: value)
            // Only the attributes kept become text: an unknown one may be a secret of a newer git
            // (`credential=`, sent to helpers that declare `authtype`, which this one does not).
            case _ where Self.textKeys.contains(key) || key.hasSuffix("[]"):
                guard let text = String(validating: value, as: UTF8.self) else { throw .malformedLine(lineNumber) }
                set(key: key, value: text)
            default: break  // Newer gits send attributes we don't know; they must not fail a request.
            }
        }
    }

    private static let textKeys: Set<String> = ["protocol", "host", "path", "username", "password_expiry_utc"]

    private mutating func set(key: String, value: String) {
        if key.hasSuffix("[]") {
            // An empty value resets the list (git-credential(1)).
            let name = String(key.dropLast(2))
            if value.isEmpty { arrays[name] = nil } else { arrays[name, default: []].append(value) }
            return
        }
        switch key {
        case "protocol": self.protocol = value
        case "host": host = value
        case "path": path = value
        case "username": username = value
        case "password_expiry_utc": passwordExpiryUTC = value
        default: break
        }
    }

    /// Secrets compare in constant time.
    package static func == (a: Self, b: Self) -> Bool {
        a.protocol == b.protocol && a.host == b.host && a.path == b.path && a.username == b.username
            && sameSecret(a.password, b.password) && a.passwordExpiryUTC == b.passwordExpiryUTC
            && sameSecret(a.oauthRefreshToken, b.oauthRefreshToken) && a.arrays == b.arrays
    }
}

/// Whether two optional secrets are both absent, or both present and equal (constant time).
func sameSecret(_ a: SecureBytes?, _ b: SecureBytes?) -> Bool {
    switch (a, b) {
    case (nil, nil): true
    case (let a?, let b?): a.isEqual(to: b)
    default: false
    }
}
