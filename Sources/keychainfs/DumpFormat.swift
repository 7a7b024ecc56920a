import Foundation
import KeychainControl
import KeychainCrypto
import KeychainModel

/// One item in `dump-keychain --json`. Bytes (the generic attribute and the secret) are
/// base64; a secret that could not be read is left out and `secretError` says why. The
/// settable attributes are keys beside the others, one per row of `ItemAttribute.all`.
///
/// The encoder only ever sees a placeholder for the secret (`SecretSplice`): JSON text made by
/// Foundation lives in buffers nothing wipes, so the secrets' base64 is put in its place
/// afterwards, in locked memory.
struct DumpedItem: Encodable {
    var fields: Fields
    var attributes: AttributeValues

    /// Everything but the settable attributes.
    struct Fields: Encodable {
        var id: Int64
        var kind: String
        var service: String?
        var server: String?
        var port: UInt16?
        var path: String?
        var `protocol`: String?
        var authenticationType: String?
        var securityDomain: String?
        var account: String
        var accessGroup: String
        var accessible: String
        var created: Date
        var modified: Date
        /// `SecretSplice`'s placeholder.
        var secret: String?
        var secretError: String?
    }

    init(_ item: FoundItem, splice: SecretSplice) {
        let a = item.record.attributes
        var f = Fields(id: item.itemID, kind: "generic-password", account: item.record.key.account,
                       accessGroup: item.record.key.accessGroup, accessible: a.accessible.rawValue,
                       created: a.created, modified: a.modified)
        switch item.record.key {
        case .generic(let g):
            f.service = g.service
        case .internet(let i):
            f.kind = "internet-password"
            f.server = i.server; f.port = i.port; f.path = i.path; f.protocol = i.protocol.name
            f.authenticationType = i.authenticationType.name; f.securityDomain = i.securityDomain
        }
        switch item.secret {
        case .value(let bytes): f.secret = splice.placeholder(for: bytes)
        case .unavailable(let c): f.secretError = "unavailable: '\(c.rawValue)' items are locked"
        case .damaged(let reason): f.secretError = "integrity failure: \(reason)"
        case .refused(let reason): f.secretError = "access denied: \(reason)"
        case nil: break
        }
        fields = f
        attributes = a.values
    }

    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    func encode(to encoder: Encoder) throws {
        try fields.encode(to: encoder)
        var c = encoder.container(keyedBy: Key.self)
        for attribute in ItemAttribute.all {
            let key = Key(stringValue: attribute.jsonKey)
            switch attributes[attribute] {
            case .text(let text)?: try c.encode(text, forKey: key)
            case .bytes(let data)?: try c.encode(data, forKey: key)
            case .code(let code)?: try c.encode(code.text, forKey: key)
            case .programs(let list)?: try c.encode(list.rules.map(\.program.description), forKey: key)
            case .flag(let b)?: try c.encode(b, forKey: key)
            case nil: break
            }
        }
    }
}

struct DumpDocument: Encodable {
    var store: String
    var items: [DumpedItem]
}

/// Puts secrets into encoded JSON without the encoder ever holding them: each secret is
/// encoded as a placeholder string (a random run-wide nonce and its number, which no other
/// value can hold by chance), and `splice` copies the JSON into locked memory with each
/// placeholder replaced by the secret's base64.
final class SecretSplice {
    private let nonce: String
    private var secrets: [SecureBytes] = []

    init() {
        // The system's generator: getrandom(2).
        nonce = "secret-" + String(UInt64.random(in: .min ... .max), radix: 16) + String(UInt64.random(in: .min ... .max), radix: 16)
    }

    func placeholder(for secret: SecureBytes) -> String {
        secrets.append(secret)
        return "\(nonce)-\(secrets.count - 1)."
    }

    /// `json` with every placeholder replaced; the placeholders' quotes stay.
    func splice(_ json: Data) -> SecureBytes {
        let out = SecureBytes()
        let marker = Array(nonce.utf8) + [UInt8(ascii: "-")]
        json.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
            var at = 0, copied = 0
            while let found = Self.find(marker, in: raw, from: at) {
                let digitsStart = found + marker.count
                var end = digitsStart, index = 0
                while end < raw.count, end - digitsStart < 9, let digit = raw[end].wholeNumberDigit { index = index * 10 + digit; end += 1 }
                guard end > digitsStart, end < raw.count, raw[end] == UInt8(ascii: "."), index < secrets.count else {
                    at = found + 1
                    continue
                }
                out.append(UnsafeRawBufferPointer(rebasing: raw[copied..<found]))
                secrets[index].withUnsafeBytes { Base64.append($0, to: out) }
                copied = end + 1
                at = copied
            }
            out.append(UnsafeRawBufferPointer(rebasing: raw[copied...]))
        }
        return out
    }

    private static func find(_ needle: [UInt8], in raw: UnsafeRawBufferPointer, from: Int) -> Int? {
        guard raw.count >= needle.count, from <= raw.count - needle.count else { return nil }
        for i in from...(raw.count - needle.count) where raw[i] == needle[0] {
            if raw[i..<i + needle.count].elementsEqual(needle) { return i }
        }
        return nil
    }
}

/// Standard base64 (RFC 4648, with padding), written straight into locked memory.
enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    static func append(_ raw: UnsafeRawBufferPointer, to out: SecureBytes) {
        let start = out.count
        out.resize(to: start + (raw.count + 2) / 3 * 4)
        out.withUnsafeMutableBytes { dst in
            var o = start, i = 0
            while i < raw.count {
                let b0 = UInt32(raw[i]), b1 = i + 1 < raw.count ? UInt32(raw[i + 1]) : 0
                let b2 = i + 2 < raw.count ? UInt32(raw[i + 2]) : 0
                let n = b0 << 16 | b1 << 8 | b2
                dst[o] = alphabet[Int(n >> 18 & 63)]
                dst[o + 1] = alphabet[Int(n >> 12 & 63)]
                dst[o + 2] = i + 1 < raw.count ? alphabet[Int(n >> 6 & 63)] : UInt8(ascii: "=")
                dst[o + 3] = i + 2 < raw.count ? alphabet[Int(n & 63)] : UInt8(ascii: "=")
                o += 4; i += 3
            }
        }
    }
}

private extension UInt8 {
    var wholeNumberDigit: Int? { self >= 0x30 && self <= 0x39 ? Int(self - 0x30) : nil }
}
