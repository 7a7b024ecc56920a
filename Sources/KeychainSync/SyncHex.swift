import KeychainCrypto

/// Lowercase hex, as file names and the manifest carry ids and digests.
package enum SyncHex {
    package static func encode(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for b in bytes { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 0xf)]) }
        return String(decoding: out, as: UTF8.self)
    }
}

/// Random bytes for ids (not secrets).
package enum SyncRandom {
    package static func bytes(_ n: Int) -> [UInt8] { SecureRandom.array(n) }
}
