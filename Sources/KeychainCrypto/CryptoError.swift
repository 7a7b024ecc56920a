/// A failure in the crypto layer. `authenticationFailed` is the one callers act on:
/// wrong key, or ciphertext/associated data that was altered.
public enum CryptoError: Error, Equatable, Sendable {
    case authenticationFailed
    case malformed
    case openSSL(String)
    /// The key derivation could not run: parameters out of range, or no memory for its work area.
    case keyDerivation(String)
}
