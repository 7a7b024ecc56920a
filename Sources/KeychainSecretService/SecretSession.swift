import COpenSSL
import KeychainCrypto
import SDBus

/// How a session carries secrets over the bus (the specification's "Transfer of Secrets"):
/// in the clear (`plain`), or under AES-128-CBC with a key agreed by Diffie-Hellman over the
/// 1024-bit MODP group of RFC 2409 and HKDF-SHA256 (`dh-ietf1024-sha256-aes128-cbc-pkcs7`).
/// Both are required: clients such as go-keyring open only `plain`.
package enum SecretTransfer {
    case plain
    case aes(key: SecureBytes)

    package static let plainName = "plain"
    package static let dhName = "dh-ietf1024-sha256-aes128-cbc-pkcs7"

    /// The second Oakley group (RFC 2409, 6.2), generator 2.
    static let prime: [UInt8] = hex("""
        FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E3404DD\
        EF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED\
        EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE65381FFFFFFFFFFFFFFFF
        """)

    private static func hex(_ s: String) -> [UInt8] {
        var out: [UInt8] = []
        var it = s.utf8.makeIterator()
        while let a = it.next(), let b = it.next() {
            out.append(UInt8(String(decoding: [a, b], as: UTF8.self), radix: 16)!)
        }
        return out
    }

    /// Agrees on a key with a client's package value: our package value for the reply, and the
    /// transfer. A package value outside 2 … p-2 is refused (it would force a known secret).
    package static func negotiate(clientPublic: [UInt8]) throws -> (serverPublic: [UInt8], transfer: SecretTransfer) {
        guard !clientPublic.isEmpty, clientPublic.count <= prime.count else {
            throw BusError.invalidArgs("the client's package key is \(clientPublic.count) bytes; at most \(prime.count)")
        }
        guard let ctx = BN_CTX_new() else { throw BusError.failed("OpenSSL: BN_CTX_new") }
        defer { BN_CTX_free(ctx) }
        let p = BN_bin2bn(prime, Int32(prime.count), nil)!
        let y = BN_bin2bn(clientPublic, Int32(clientPublic.count), nil)!
        let g = BN_new()!, x = BN_secure_new()!, ours = BN_new()!, shared = BN_secure_new()!, limit = BN_new()!
        defer { [p, y, g, ours, limit].forEach { BN_free($0) }; BN_clear_free(x); BN_clear_free(shared) }
        BN_set_word(g, 2)
        BN_copy(limit, p)
        BN_sub_word(limit, 1)
        guard BN_cmp(y, BN_value_one()) > 0, BN_cmp(y, limit) < 0 else {
            throw BusError.invalidArgs("the client's package key is out of range")
        }
        // A fresh 256-bit exponent: this 1024-bit group gives about 80 bits of security, and an
        // exponent of at least twice that is the usual rule (RFC 3526, RFC 7919's 225 bits for
        // its 2048-bit group). A full 1024-bit one, as libsecret takes, made the two modular
        // exponentiations most of the daemon's work in a `secret-tool lookup` (callgrind).
        guard BN_priv_rand(x, 256, BN_RAND_TOP_ONE, BN_RAND_BOTTOM_ANY) == 1, BN_mod_exp(ours, g, x, p, ctx) == 1,
              BN_mod_exp(shared, y, x, p, ctx) == 1 else { throw BusError.failed("OpenSSL: Diffie-Hellman") }
        // The shared value in the prime's length, leading zeros kept, as libsecret derives from it.
        let secret = SecureBytes(count: prime.count)
        _ = secret.withUnsafeMutableBytes { BN_bn2binpad(shared, $0.bindMemory(to: UInt8.self).baseAddress, Int32(prime.count)) }
        var serverPublic = [UInt8](repeating: 0, count: prime.count)
        _ = BN_bn2binpad(ours, &serverPublic, Int32(prime.count))
        let key = try HKDF.deriveKey(from: secret, info: "", length: 16)
        secret.wipe()
        return (serverPublic, .aes(key: key))
    }

    /// The secret as the bus carries it: (parameters, value). The ciphertext stays in locked
    /// memory too: the session's key outlives a lock while its client is connected, and with
    /// a ciphertext left in the heap it would give the secret back.
    package func encode(_ secret: SecureBytes) throws -> (parameters: [UInt8], value: SecureBytes) {
        switch self {
        case .plain: return ([], secret)
        case .aes(let key):
            let iv = SecureRandom.array(16)
            return (iv, try Self.cbc(encrypt: true, key: key, iv: iv, secret))
        }
    }

    /// The secret a client sent: decrypted into locked memory.
    package func decode(parameters: [UInt8], value: SecureBytes) throws -> SecureBytes {
        switch self {
        case .plain: return value
        case .aes(let key):
            guard parameters.count == 16 else { throw BusError.invalidArgs("the secret's parameters must be a 16-byte IV") }
            guard value.count % 16 == 0, value.count > 0 else { throw BusError.invalidArgs("the encrypted secret is not whole AES blocks") }
            return try Self.cbc(encrypt: false, key: key, iv: parameters, value)
        }
    }

    /// AES-128-CBC with PKCS#7 padding; the output in locked memory.
    private static func cbc(encrypt: Bool, key: SecureBytes, iv: [UInt8], _ input: SecureBytes) throws -> SecureBytes {
        guard let ctx = EVP_CIPHER_CTX_new() else { throw BusError.failed("OpenSSL: cipher context") }
        defer { EVP_CIPHER_CTX_free(ctx) }
        let out = SecureBytes(count: input.count + 16)
        var n: Int32 = 0, tail: Int32 = 0
        let ok = key.withUnsafeBytes { k in input.withUnsafeBytes { i in out.withUnsafeMutableBytes { o in
            let kp = k.bindMemory(to: UInt8.self).baseAddress, op = o.bindMemory(to: UInt8.self).baseAddress!
            var empty: UInt8 = 0
            let ip = i.bindMemory(to: UInt8.self).baseAddress ?? withUnsafePointer(to: &empty) { $0 }
            return EVP_CipherInit_ex(ctx, EVP_aes_128_cbc(), nil, kp, iv, encrypt ? 1 : 0) == 1
                && EVP_CipherUpdate(ctx, op, &n, ip, Int32(i.count)) == 1
                && EVP_CipherFinal_ex(ctx, op + Int(n), &tail) == 1
        } } }
        guard ok else {
            out.wipe()
            throw encrypt ? BusError.failed("OpenSSL: AES-CBC") : BusError.invalidArgs("the encrypted secret does not decrypt (wrong session key or padding)")
        }
        out.resize(to: Int(n + tail))
        return out
    }
}
