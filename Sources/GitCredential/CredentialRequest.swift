/// The attributes git writes to a helper's stdin (git-credential(1), "INPUT/OUTPUT FORMAT").
package struct CredentialRequest: Equatable, Sendable {
    package var `protocol`: String?
    package var host: String?
    package var path: String?
    /// Nil when git sent no `username` line; `""` when it sent `username=`.
    package var username: String?
    /// Nil when git sent no `password` line; `""` when it sent `password=`.
    package var password: String?
    package var passwordExpiryUTC: String?
    package var oauthRefreshToken: String?
    /// Multi-valued attributes (`wwwauth[]`, `capability[]`, …), keyed without the `[]`.
    package var arrays: [String: [String]]

    package init(protocol: String? = nil, host: String? = nil, path: String? = nil,
                username: String? = nil, password: String? = nil,
                passwordExpiryUTC: String? = nil, oauthRefreshToken: String? = nil,
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
    package init(parsing input: some Sequence<UInt8>) throws(CredentialError) {
        self.init()
        var lineNumber = 0
        for rawLine in Array(input).split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            lineNumber += 1
            var line = rawLine[...]
            // git reads lines with strbuf_getline, which also accepts CRLF.
            if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
            if line.isEmpty { break }
            guard !line.contains(0),
                  let eq = line.firstIndex(of: UInt8(ascii: "=")),
                  let key = String(validating: line[..<eq], as: UTF8.self),
                  let value = String(validating: line[(eq + 1)...], as: UTF8.self) else {
                throw .malformedLine(lineNumber)
            }
            set(key: key, value: value)
        }
    }

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
        case "password": password = value
        case "password_expiry_utc": passwordExpiryUTC = value
        case "oauth_refresh_token": oauthRefreshToken = value
        default: break  // Newer gits send attributes we don't know; they must not fail a request.
        }
    }
}
