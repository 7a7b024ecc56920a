import KeychainCrypto

// Test data only: a secret written as a literal, and compared as a value. Production code
// never has either (a literal secret would sit in the binary; `==` would invite early exits).
extension SecureBytes: ExpressibleByStringLiteral, Equatable {
    public convenience init(stringLiteral text: String) { self.init(copying: Array(text.utf8)) }

    public static func == (a: SecureBytes, b: SecureBytes) -> Bool { a.isEqual(to: b) }
}

extension SecureBytes {
    var text: String { withUnsafeBytes { String(decoding: $0, as: UTF8.self) } }
}
