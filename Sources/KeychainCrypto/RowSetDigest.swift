import COpenSSL

/// A keyed digest of a set of (id, version) pairs that a commit updates in O(1): the XOR of a
/// 256-bit pseudo-random value per pair (AES-256 under a secret key, so nobody without the
/// key can compute the value of a pair, nor the digest of a set). Adding and removing a pair
/// are the same operation.
package struct RowSetDigest: Equatable, Sendable {
    package static let byteCount = 32
    package private(set) var bytes: [UInt8]

    package init() { bytes = [UInt8](repeating: 0, count: Self.byteCount) }
    package init?(bytes: [UInt8]) {
        guard bytes.count == Self.byteCount else { return nil }
        self.bytes = bytes
    }

    /// Toggles each pair in or out of the set.
    package mutating func toggle(_ pairs: [(id: Int64, version: Int64)], key: SecureBytes) throws {
        guard !pairs.isEmpty else { return }
        // Two blocks per pair; the top bit of the version word tells them apart (versions stay far below 2^63).
        var input = [UInt64](repeating: 0, count: pairs.count * 4)
        input.withUnsafeMutableBufferPointer { words in
            for (n, pair) in pairs.enumerated() {
                let version = UInt64(bitPattern: pair.version) & ~(UInt64(1) << 63)
                words[4 * n] = UInt64(bitPattern: pair.id).bigEndian
                words[4 * n + 1] = version.bigEndian
                words[4 * n + 2] = UInt64(bitPattern: pair.id).bigEndian
                words[4 * n + 3] = (version | UInt64(1) << 63).bigEndian
            }
        }
        let output = try Self.encryptBlocks(input, key: key)
        var acc = [UInt64](repeating: 0, count: 4)
        output.withUnsafeBufferPointer { words in
            for n in 0..<pairs.count {
                acc[0] ^= words[4 * n]; acc[1] ^= words[4 * n + 1]; acc[2] ^= words[4 * n + 2]; acc[3] ^= words[4 * n + 3]
            }
        }
        acc.withUnsafeBytes { a in
            bytes.withUnsafeMutableBytes { b in for i in 0..<Self.byteCount { b[i] ^= a[i] } }
        }
    }

    /// AES-256 on each 16-byte block (ECB: each block is a distinct pair, so nothing repeats).
    private static func encryptBlocks(_ input: [UInt64], key: SecureBytes) throws -> [UInt64] {
        precondition(key.count == AESGCM.keyBytes)
        guard let ctx = EVP_CIPHER_CTX_new() else { throw CryptoError.openSSL("EVP_CIPHER_CTX_new") }
        defer { EVP_CIPHER_CTX_free(ctx) }
        var out = [UInt64](repeating: 0, count: input.count + 2)
        var n: Int32 = 0
        let byteCount = input.count * 8
        let ok = key.withUnsafeBytes { k in
            input.withUnsafeBytes { i in
                out.withUnsafeMutableBytes { o in
                    EVP_EncryptInit_ex(ctx, EVP_aes_256_ecb(), nil, k.bindMemory(to: UInt8.self).baseAddress, nil) == 1
                        && EVP_CIPHER_CTX_set_padding(ctx, 0) == 1
                        && EVP_EncryptUpdate(ctx, o.bindMemory(to: UInt8.self).baseAddress, &n,
                                             i.bindMemory(to: UInt8.self).baseAddress, Int32(byteCount)) == 1
                }
            }
        }
        guard ok, Int(n) == byteCount else { throw CryptoError.openSSL("AES block") }
        out.removeLast(2)
        return out
    }
}
