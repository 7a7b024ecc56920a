import COpenSSL

/// A keyed digest of a set of (id, version) pairs that a commit updates in O(1): the XOR of a
/// 256-bit pseudo-random value per pair (AES-256 under a secret key, so nobody without the
/// key can compute the value of a pair, nor the digest of a set). Adding and removing a pair
/// are the same operation.
public struct RowSetDigest: Equatable, Sendable {
    public static let byteCount = 32
    public private(set) var bytes: [UInt8]

    public init() { bytes = [UInt8](repeating: 0, count: Self.byteCount) }
    public init?(bytes: [UInt8]) {
        guard bytes.count == Self.byteCount else { return nil }
        self.bytes = bytes
    }

    /// Toggles each pair in or out of the set.
    public mutating func toggle(_ pairs: [(id: Int64, version: Int64)], key: SecureBytes) throws {
        guard !pairs.isEmpty else { return }
        // Two blocks per pair; the top bit of the version word tells them apart (versions stay far below 2^63).
        var input = [UInt8](repeating: 0, count: pairs.count * 32)
        for (n, pair) in pairs.enumerated() {
            for half in 0..<2 {
                let base = n * 32 + half * 16
                let version = UInt64(bitPattern: pair.version) & ~(UInt64(1) << 63) | (UInt64(half) << 63)
                for i in 0..<8 {
                    input[base + i] = UInt8(truncatingIfNeeded: UInt64(bitPattern: pair.id) >> UInt64(56 - 8 * i))
                    input[base + 8 + i] = UInt8(truncatingIfNeeded: version >> UInt64(56 - 8 * i))
                }
            }
        }
        let output = try Self.encryptBlocks(input, key: key)
        for n in 0..<pairs.count {
            for i in 0..<Self.byteCount { bytes[i] ^= output[n * 32 + i] }
        }
    }

    /// AES-256 on each 16-byte block (ECB: each block is a distinct pair, so nothing repeats).
    private static func encryptBlocks(_ input: [UInt8], key: SecureBytes) throws -> [UInt8] {
        precondition(key.count == AESGCM.keyBytes && input.count % 16 == 0)
        guard let ctx = EVP_CIPHER_CTX_new() else { throw CryptoError.openSSL("EVP_CIPHER_CTX_new") }
        defer { EVP_CIPHER_CTX_free(ctx) }
        var out = [UInt8](repeating: 0, count: input.count + 16)
        var n: Int32 = 0
        let ok = key.withUnsafeBytes { k in
            EVP_EncryptInit_ex(ctx, EVP_aes_256_ecb(), nil, k.bindMemory(to: UInt8.self).baseAddress, nil) == 1
                && EVP_CIPHER_CTX_set_padding(ctx, 0) == 1
                && EVP_EncryptUpdate(ctx, &out, &n, input, Int32(input.count)) == 1
        }
        guard ok, Int(n) == input.count else { throw CryptoError.openSSL("AES block") }
        out.removeLast(16)
        return out
    }
}
