import Glibc
import COpenSSL
import CScrypt

package enum SecureRandom {
    package static func bytes(_ count: Int) -> SecureBytes {
        let out = SecureBytes(count: count)
        fill(out)
        return out
    }

    /// Overwrites every byte of `buffer`, so a loop that needs one key after another can reuse one
    /// locked mapping instead of making one per key.
    package static func fill(_ buffer: SecureBytes) {
        buffer.withUnsafeMutableBytes { fill($0) }
    }

    /// For values that are not secret (nonces, salts): no locked mapping is made for them.
    package static func array(_ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBytes { fill($0) }
        return out
    }

    private static func fill(_ buf: UnsafeMutableRawBufferPointer) {
        guard buf.count > 0 else { return }
        precondition(RAND_bytes(buf.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(buf.count)) == 1,
                     "RAND_bytes failed")
    }
}

/// AES-256-GCM with a random 96-bit nonce. Sealed form: nonce ‖ ciphertext ‖ 128-bit tag.
package enum AESGCM {
    package static let keyBytes = 32
    package static let nonceBytes = 12
    static let tagBytes = 16
    package static let overhead = nonceBytes + tagBytes

    /// Fetched once and never freed: `EVP_aes_256_gcm()` makes every init look the
    /// implementation up by name again, a cost of the order of the encryption of a short secret.
    nonisolated(unsafe) private static let cipher: OpaquePointer? = EVP_CIPHER_fetch(nil, "AES-256-GCM", nil)

    package static func seal(_ plaintext: UnsafeRawBufferPointer, key: SecureBytes, aad: [UInt8]) throws -> [UInt8] {
        try seal(plaintext, key: key, aad: aad, nonce: SecureRandom.array(nonceBytes))
    }

    package static func seal(_ plaintext: SecureBytes, key: SecureBytes, aad: [UInt8]) throws -> [UInt8] {
        try plaintext.withUnsafeBytes { try seal($0, key: key, aad: aad) }
    }

    /// With a given nonce: for known-answer tests, and for a caller that draws the random
    /// nonces of several seals at once (`Keychain.seal`: RAND_bytes costs more per call than
    /// per byte). A nonce must be fresh random bytes, never used before.
    package static func seal(_ plaintext: UnsafeRawBufferPointer, key: SecureBytes, aad: [UInt8], nonce: ArraySlice<UInt8>) throws -> [UInt8] {
        try seal(plaintext, key: key, aad: aad, nonce: Array(nonce))
    }

    package static func seal(_ plaintext: SecureBytes, key: SecureBytes, aad: [UInt8], nonce: ArraySlice<UInt8>) throws -> [UInt8] {
        try plaintext.withUnsafeBytes { try seal($0, key: key, aad: aad, nonce: Array(nonce)) }
    }

    /// Deterministic nonce, for known-answer tests only (and the two above).
    package static func seal(_ plaintext: UnsafeRawBufferPointer, key: SecureBytes, aad: [UInt8], nonce: [UInt8]) throws -> [UInt8] {
        precondition(key.count == keyBytes && nonce.count == nonceBytes)
        guard let ctx = EVP_CIPHER_CTX_new() else { throw CryptoError.openSSL("EVP_CIPHER_CTX_new") }
        defer { EVP_CIPHER_CTX_free(ctx) }
        var out = [UInt8](repeating: 0, count: nonceBytes + plaintext.count + tagBytes)
        try out.withUnsafeMutableBufferPointer { o in
            let outBase = o.baseAddress!
            outBase.update(from: nonce, count: nonceBytes)
            try key.withUnsafeBytes { k in
                guard EVP_EncryptInit_ex(ctx, cipher, nil, k.bindMemory(to: UInt8.self).baseAddress, nonce) == 1
                else { throw CryptoError.openSSL("EVP_EncryptInit_ex") }
            }
            var n: Int32 = 0
            if !aad.isEmpty {
                guard EVP_EncryptUpdate(ctx, nil, &n, aad, Int32(aad.count)) == 1 else { throw CryptoError.openSSL("aad") }
            }
            if plaintext.count > 0 {
                guard EVP_EncryptUpdate(ctx, outBase + nonceBytes, &n,
                                        plaintext.bindMemory(to: UInt8.self).baseAddress, Int32(plaintext.count)) == 1
                else { throw CryptoError.openSSL("EVP_EncryptUpdate") }
            }
            guard EVP_EncryptFinal_ex(ctx, outBase + nonceBytes + plaintext.count, &n) == 1,
                  EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, Int32(tagBytes), outBase + nonceBytes + plaintext.count) == 1
            else { throw CryptoError.openSSL("EVP_EncryptFinal_ex") }
        }
        return out
    }

    package static func open(_ sealed: [UInt8], key: SecureBytes, aad: [UInt8]) throws(CryptoError) -> SecureBytes {
        guard key.count == keyBytes else { throw .malformed }
        guard sealed.count >= overhead else { throw .authenticationFailed }
        let out = SecureBytes(count: sealed.count - overhead)
        let ok = out.withUnsafeMutableBytes { open(sealed, key: key, aad: aad, into: $0) }
        guard ok else {
            out.wipe()
            throw .authenticationFailed
        }
        return out
    }

    /// Opens plaintext that is not secret (an item's names and attributes, which become
    /// `String`s anyway) into a temporary buffer, on the stack when small, instead of locked
    /// memory: a mount opens one per item. The buffer is wiped when `body` returns.
    package static func openUnlocked<R>(_ sealed: [UInt8], key: SecureBytes, aad: [UInt8],
                                       _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
        guard key.count == keyBytes else { throw CryptoError.malformed }
        guard sealed.count >= overhead else { throw CryptoError.authenticationFailed }
        let count = sealed.count - overhead
        return try withUnsafeTemporaryAllocation(byteCount: max(count, 1), alignment: 16) { buffer in
            let plain = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count])
            defer { if count > 0 { OPENSSL_cleanse(buffer.baseAddress, count) } }
            guard open(sealed, key: key, aad: aad, into: plain) else { throw CryptoError.authenticationFailed }
            return try body(UnsafeRawBufferPointer(plain))
        }
    }

    /// Decrypts into `out` (exactly the plaintext's size); false if the seal does not open.
    private static func open(_ sealed: [UInt8], key: SecureBytes, aad: [UInt8], into out: UnsafeMutableRawBufferPointer) -> Bool {
        let plainCount = sealed.count - overhead
        guard out.count == plainCount, let ctx = EVP_CIPHER_CTX_new() else { return false }
        defer { EVP_CIPHER_CTX_free(ctx) }
        return sealed.withUnsafeBufferPointer { s in
            let inBase = s.baseAddress!
            return key.withUnsafeBytes { k in
                var n: Int32 = 0
                guard EVP_DecryptInit_ex(ctx, cipher, nil, k.bindMemory(to: UInt8.self).baseAddress, inBase) == 1
                else { return false }
                if !aad.isEmpty, EVP_DecryptUpdate(ctx, nil, &n, aad, Int32(aad.count)) != 1 { return false }
                if plainCount > 0,
                   EVP_DecryptUpdate(ctx, out.bindMemory(to: UInt8.self).baseAddress, &n,
                                     inBase + nonceBytes, Int32(plainCount)) != 1 { return false }
                let tag = UnsafeMutablePointer(mutating: inBase + nonceBytes + plainCount)
                guard EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, Int32(tagBytes), tag) == 1 else { return false }
                var tail = [UInt8](repeating: 0, count: 16)
                return EVP_DecryptFinal_ex(ctx, &tail, &n) == 1
            }
        }
    }
}

/// scrypt parameters, stored with the store so that each store keeps the cost chosen at init.
public struct ScryptParameters: Codable, Equatable, Sendable {
    /// log2 of scrypt's N, the cost in memory and time.
    public var logN: UInt8
    /// scrypt's block size factor.
    public var r: UInt32
    /// scrypt's parallelism factor.
    public var p: UInt32

    /// r and p default to the only values a store accepts (`isAcceptable`).
    public init(logN: UInt8, r: UInt32 = 8, p: UInt32 = 1) {
        self.logN = logN
        self.r = r
        self.p = p
    }

    /// About a third of a second on this class of machine (2^17 · 8 · 128 B = 128 MiB).
    public static let `default` = ScryptParameters(logN: 17)

    /// Exactly what `init` can write (only `logN` is a choice). A store with anything else was
    /// tampered with: a huge r or p would make every unlock take minutes and gigabytes.
    public var isAcceptable: Bool { logN >= 10 && logN <= 22 && r == 8 && p == 1 }
}

/// scrypt (RFC 7914), with the passphrase only ever in locked memory and in HMAC's padded key
/// (on the stack, wiped) for the microseconds of the two PBKDF2 steps. OpenSSL's
/// `EVP_PBE_scrypt` copied the passphrase into its own heap for the whole derivation (a third of
/// a second at the default cost, seconds at the highest). The memory-hard middle, ROMix, is C
/// (CScrypt), built optimised in every configuration.
package enum Scrypt {
    package static func deriveKey(passphrase: SecureBytes, salt: [UInt8], parameters: ScryptParameters,
                                 length: Int = 32) throws -> SecureBytes {
        let r = Int(parameters.r), p = Int(parameters.p), logN = Int(parameters.logN)
        // What a store, a backup or a sync folder can name is far inside this (`isAcceptable`);
        // each bound alone first, so that their product cannot overflow.
        guard (1...1 << 16).contains(r), (1...1 << 16).contains(p), r * p <= 1 << 16, (1...30).contains(logN) else {
            throw CryptoError.keyDerivation("scrypt: parameters out of range (log N \(logN), r \(r), p \(p))")
        }
        let blocks = SecureBytes(count: p * 128 * r)
        defer { blocks.wipe() }
        try salt.withUnsafeBytes { s in
            try blocks.withUnsafeMutableBytes { b in
                pbkdf2(passphrase, salt: s, into: b)
                for k in 0..<p {
                    guard kcfs_scrypt_romix(b.baseAddress!.assumingMemoryBound(to: UInt8.self) + k * 128 * r,
                                            UInt32(r), UInt64(1) << UInt64(logN)) == 0 else {
                        throw CryptoError.keyDerivation("scrypt: no memory for its \((128 * r << logN) >> 20) MiB (\(String(cString: strerror(errno))))")
                    }
                }
            }
        }
        let out = SecureBytes(count: length)
        blocks.withUnsafeBytes { b in out.withUnsafeMutableBytes { pbkdf2(passphrase, salt: b, into: $0) } }
        return out
    }

    /// PBKDF2-HMAC-SHA256 with one iteration, all that scrypt asks of it: output block i is
    /// HMAC(passphrase, salt || INT32BE(i)). The message and each block stay in locked memory.
    static func pbkdf2(_ passphrase: SecureBytes, salt: UnsafeRawBufferPointer, into out: UnsafeMutableRawBufferPointer) {
        let message = SecureBytes(copying: salt)
        message.resize(to: salt.count + 4)
        let block = SecureBytes(count: 32)
        defer { message.wipe(); block.wipe() }
        var index: UInt32 = 1
        var offset = 0
        passphrase.withUnsafeBytes { key in
            while offset < out.count {
                message.withUnsafeMutableBytes { m in
                    for k in 0..<4 { m[salt.count + k] = UInt8(truncatingIfNeeded: index >> (24 - 8 * UInt32(k))) }
                }
                message.withUnsafeBytes { m in block.withUnsafeMutableBytes { HMACSHA256.mac(key: key, data: m, into: $0.baseAddress!) } }
                let n = min(32, out.count - offset)
                block.withUnsafeBytes { (out.baseAddress! + offset).copyMemory(from: $0.baseAddress!, byteCount: n) }
                offset += n
                index += 1
            }
        }
        kcfs_scrub_stack()
    }
}

package enum HMACSHA256 {
    /// The MAC of bytes that stay where they are (a secret in locked memory).
    package static func authenticate(raw data: UnsafeRawBufferPointer, key: SecureBytes) -> [UInt8] {
        key.withUnsafeBytes { mac(key: $0, data: data) }
    }

    package static func authenticate(_ data: [UInt8], key: SecureBytes) -> [UInt8] {
        data.withUnsafeBytes { d in key.withUnsafeBytes { mac(key: $0, data: d) } }
    }

    /// SHA-256, fetched once. OpenSSL's one-shot `HMAC()` fetches the MAC and the digest by
    /// name at every call: five times the instructions of the MAC of a short message, and a
    /// create takes about ten MACs (blind indexes, attribute tags, the ledger).
    nonisolated(unsafe) private static let sha256: OpaquePointer? = EVP_MD_fetch(nil, "SHA256", nil)
    private static let blockBytes = 64

    /// HMAC (RFC 2104) over the fetched digest: H(K ^ opad || H(K ^ ipad || data)). The padded
    /// key and the inner hash are wiped before return; OpenSSL wipes the digest's state as it
    /// frees it.
    static func mac(key: UnsafeRawBufferPointer, data: UnsafeRawBufferPointer) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        out.withUnsafeMutableBytes { mac(key: key, data: data, into: $0.baseAddress!) }
        return out
    }

    /// The MAC, written to the 32 bytes at `result` (locked memory, for a key derived from it).
    static func mac(key: UnsafeRawBufferPointer, data: UnsafeRawBufferPointer, into result: UnsafeMutableRawPointer) {
        guard let md = sha256, let ctx = EVP_MD_CTX_new() else { preconditionFailure("HMAC-SHA256: no SHA-256") }
        defer { EVP_MD_CTX_free(ctx) }
        withUnsafeTemporaryAllocation(byteCount: blockBytes + 32, alignment: 16) { scratch in
            defer { OPENSSL_cleanse(scratch.baseAddress, scratch.count) }
            let pad = UnsafeMutableRawBufferPointer(rebasing: scratch[0..<blockBytes])
            let inner = UnsafeMutableRawBufferPointer(rebasing: scratch[blockBytes...])
            pad.initializeMemory(as: UInt8.self, repeating: 0)
            var ok = true
            if key.count > blockBytes {
                // A long key is its hash (never used here: keys are 32 bytes).
                var n: UInt32 = 0
                ok = EVP_Digest(key.baseAddress, key.count, pad.baseAddress?.assumingMemoryBound(to: UInt8.self), &n, md, nil) == 1
            } else if key.count > 0 {
                pad.copyMemory(from: key)
            }
            func digest(_ xor: UInt8, _ message: UnsafeRawBufferPointer, into result: UnsafeMutableRawPointer) -> Bool {
                for i in 0..<blockBytes { pad[i] ^= xor }
                defer { for i in 0..<blockBytes { pad[i] ^= xor } }
                var n: UInt32 = 0
                return EVP_DigestInit_ex2(ctx, md, nil) == 1 && EVP_DigestUpdate(ctx, pad.baseAddress, blockBytes) == 1
                    && EVP_DigestUpdate(ctx, message.baseAddress ?? UnsafeRawPointer(pad.baseAddress!), message.count) == 1
                    && EVP_DigestFinal_ex(ctx, result.assumingMemoryBound(to: UInt8.self), &n) == 1 && n == 32
            }
            ok = ok && digest(0x36, data, into: inner.baseAddress!)
            ok = ok && digest(0x5c, UnsafeRawBufferPointer(inner), into: result)
            precondition(ok, "HMAC-SHA256 failed")
        }
    }

    /// One key for many messages. The one-shot `authenticate` looks the algorithms up by name
    /// on every call, which costs more than the MAC of a short message; this sets the key once
    /// and only resets the state between messages. Not thread-safe: one per thread.
    package final class Keyed {
        private let ctx: OpaquePointer

        package init(key: SecureBytes) throws {
            guard let mac = EVP_MAC_fetch(nil, "HMAC", nil) else { throw CryptoError.openSSL("EVP_MAC_fetch") }
            defer { EVP_MAC_free(mac) }
            guard let ctx = EVP_MAC_CTX_new(mac) else { throw CryptoError.openSSL("EVP_MAC_CTX_new") }
            var digest = Array("SHA256".utf8CString)
            let ok = digest.withUnsafeMutableBufferPointer { d in
                "digest".withCString { name in
                    var params = [OSSL_PARAM_construct_utf8_string(name, d.baseAddress, 0), OSSL_PARAM_construct_end()]
                    return key.withUnsafeBytes { k in
                        EVP_MAC_init(ctx, k.bindMemory(to: UInt8.self).baseAddress, k.count, &params) == 1
                    }
                }
            }
            guard ok else {
                EVP_MAC_CTX_free(ctx)
                throw CryptoError.openSSL("EVP_MAC_init")
            }
            self.ctx = ctx
        }

        deinit { EVP_MAC_CTX_free(ctx) }

        package func authenticate(_ data: [UInt8]) -> [UInt8] {
            var out = [UInt8](repeating: 0, count: 32)
            var len = 0
            // A nil key restarts the MAC under the key already set.
            let ok = EVP_MAC_init(ctx, nil, 0, nil) == 1 && EVP_MAC_update(ctx, data, data.count) == 1
                && EVP_MAC_final(ctx, &out, &len, 32) == 1 && len == 32
            precondition(ok, "HMAC-SHA256 failed")
            return out
        }
    }
}

package enum HKDF {
    /// HKDF-SHA256 (RFC 5869) of `secret` with an empty salt.
    package static func deriveKey(from secret: SecureBytes, info: String, length: Int = 32) throws -> SecureBytes {
        guard let ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nil) else { throw CryptoError.openSSL("HKDF ctx") }
        defer { EVP_PKEY_CTX_free(ctx) }
        let out = SecureBytes(count: length)
        var outLen = length
        let infoBytes = Array(info.utf8)
        let ok = secret.withUnsafeBytes { s in
            out.withUnsafeMutableBytes { o in
                EVP_PKEY_derive_init(ctx) == 1
                    && EVP_PKEY_CTX_set_hkdf_md(ctx, EVP_sha256()) == 1
                    && EVP_PKEY_CTX_set1_hkdf_key(ctx, s.bindMemory(to: UInt8.self).baseAddress, Int32(s.count)) == 1
                    && EVP_PKEY_CTX_add1_hkdf_info(ctx, infoBytes, Int32(infoBytes.count)) == 1
                    && EVP_PKEY_derive(ctx, o.bindMemory(to: UInt8.self).baseAddress, &outLen) == 1
            }
        }
        guard ok, outLen == length else { throw CryptoError.openSSL("HKDF derive") }
        return out
    }
}

package enum SHA256Digest {
    package static func hash(_ data: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var len: UInt32 = 32
        _ = EVP_Digest(data, data.count, &out, &len, EVP_sha256(), nil)
        return out
    }
}
