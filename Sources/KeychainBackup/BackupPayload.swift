import Foundation
import KeychainCrypto
import KeychainModel
import KeychainBatch

/// The plaintext of a backup, built in locked memory: an item count, then each item.
///
/// Integers are big-endian. A string or byte field is a UInt32 length and its bytes. An item:
///
///     kind u8 (1 generic, 2 internet) · class u8 (`AccessibilityClass.code`) · access group
///     generic:  service · account
///     internet: server · port u16 · path · protocol 4 bytes · authentication type 4 bytes ·
///               security domain · account
///     present u16 (u8 in format version 1; each attribute's `ItemAttribute.presenceBit`: 0 label
///     to 5 type, 7 access, 8 synchronizable; bit 6 extras), then the attributes that are
///     present, in the table's order: text and bytes as strings, four-character codes as their
///     4 bytes, a flag as one byte 0 or 1
///     created, modified: the `Double` seconds since 2001 as their 64-bit pattern, so they
///     round-trip exactly
///     secret
///     extras, if bit 6 is set: git's expiry and refresh token, as sealed beside the secret
// @unchecked Sendable because its one buffer is a SecureBytes that only its owner touches.
package struct BackupPayload: @unchecked Sendable {
    package let buffer = SecureBytes(count: 8)
    package private(set) var count = 0

    package init() {}

    package mutating func append(_ record: ItemRecord, secret: SecureBytes, extras: SecureBytes? = nil) {
        secret.withUnsafeBytes { s in
            if let extras { extras.withUnsafeBytes { append(record, secret: s, extras: $0) } } else { append(record, secret: s) }
        }
    }

    package mutating func append(_ record: ItemRecord, secret: UnsafeRawBufferPointer, extras: UnsafeRawBufferPointer? = nil) {
        let out = ByteSink(buffer)
        let a = record.attributes
        switch record.key {
        case .generic(let g):
            out.u8(UInt8(ItemKind.generic.rawValue)); out.u8(UInt8(a.accessible.code)); out.string(g.accessGroup)
            out.string(g.service); out.string(g.account)
        case .internet(let i):
            out.u8(UInt8(ItemKind.internet.rawValue)); out.u8(UInt8(a.accessible.code)); out.string(i.accessGroup)
            out.string(i.server); out.u16(i.port); out.string(i.path)
            out.code(i.protocol.code); out.code(i.authenticationType.code)
            out.string(i.securityDomain); out.string(i.account)
        }
        let present = ItemAttribute.all.compactMap { attribute in
            a.values[attribute].map { (attribute.presenceBit, $0) }
        }
        out.u16(present.reduce(extras != nil ? Self.extrasBit : 0) { $0 | 1 << UInt16($1.0) })
        for (_, value) in present {
            switch value {
            case .text(let v): out.string(v)
            case .bytes(let v): v.withUnsafeBytes { out.bytes($0) }
            case .programs(let list): list.encoded.withUnsafeBytes { out.bytes($0) }
            case .code(let v): out.code(v)
            case .flag(let b): out.u8(b ? 1 : 0)
            }
        }
        out.u64(a.created.timeIntervalSinceReferenceDate.bitPattern)
        out.u64(a.modified.timeIntervalSinceReferenceDate.bitPattern)
        out.bytes(secret)
        if let extras { out.bytes(extras) }
        count += 1
        buffer.withUnsafeMutableBytes { b in
            for i in 0..<8 { b[i] = UInt8(truncatingIfNeeded: UInt64(count) >> UInt64(56 - 8 * i)) }
        }
    }

    /// The items of a decrypted payload, their secrets left where they are in `plaintext`.
    /// Every name goes through the model's checks, as if typed at the command line.
    /// `formatVersion` is the file's: version 1 has a one-byte presence mask.
    package static func decode(_ plaintext: SecureBytes, formatVersion: UInt16 = BackupFile.formatVersion) throws -> ItemBatch {
        var entries: [ItemBatch.Entry] = []
        try plaintext.withUnsafeBytes { raw in
            var input = ByteSource(raw)
            let count = try input.u64()
            // Each item takes at least 35 bytes, so a count beyond that is malformed, not a reason to reserve memory.
            guard count <= UInt64(raw.count / 35) else { throw BackupPayload.malformed("its item count is impossible") }
            entries.reserveCapacity(Int(count))
            for _ in 0..<count { entries.append(try decodeItem(&input, wideMask: formatVersion >= 2)) }
            guard input.isAtEnd else { throw BackupPayload.malformed("bytes follow the last item") }
        }
        return try ItemBatch(secrets: plaintext, entries: entries)
    }

    private static func decodeItem(_ input: inout ByteSource, wideMask: Bool) throws -> ItemBatch.Entry {
        let kind = try input.u8()
        guard let accessible = AccessibilityClass(code: Int(try input.u8())) else { throw malformed("an unknown class") }
        let group = try input.string()
        let key: ItemKey
        do {
            switch kind {
            case UInt8(ItemKind.generic.rawValue):
                let service = try input.string(), account = try input.string()
                key = .generic(try GenericPasswordKey(service: service, account: account, accessGroup: group))
            case UInt8(ItemKind.internet.rawValue):
                let server = try input.string(), port = try input.u16(), path = try input.string()
                let proto = InternetProtocol(code: try input.code()), auth = AuthenticationType(code: try input.code())
                let domain = try input.string(), account = try input.string()
                guard port != 0 else { throw malformed("an internet item without a port") }
                key = .internet(try InternetPasswordKey(server: server, port: port, path: path, protocol: proto,
                                                        authenticationType: auth, securityDomain: domain,
                                                        account: account, accessGroup: group))
            default:
                throw malformed("an unknown item kind")
            }
        } catch let e as ModelError {
            let why = "the backup holds an item that cannot be stored: \(KeychainError(e).description)"
            // Too long is told apart (exit 66), as everywhere else an item is refused for it.
            if case .nameTooLong = e { throw KeychainError.nameTooLong(why) }
            throw KeychainError.invalidInput(why)
        }
        let present = wideMask ? try input.u16() : UInt16(try input.u8())
        guard present & ~(knownBits | extrasBit) == 0 else { throw malformed("unknown attributes") }
        var a = ItemAttributes(accessible: accessible)
        for attribute in ItemAttribute.all where present & 1 << UInt16(attribute.presenceBit) != 0 {
            let value: AttributeValue = switch attribute.kind {
            case .text: .text(try input.string())
            case .bytes: .bytes(Data(try input.bytes()))
            case .code: .code(try input.code())
            case .programs:
                .programs(try { () throws -> AccessList in
                    do { return try AccessList(decoding: Array(try input.bytes())) } catch let e as KeychainError {
                        throw malformed("an access list that does not decode (\(e.description))")
                    }
                }())
            case .flag:
                .flag(try { () throws -> Bool in
                    let b = try input.u8()
                    guard b <= 1 else { throw malformed("a flag that is neither 0 nor 1") }
                    return b == 1
                }())
            }
            a.values[attribute] = value
        }
        a.created = Date(timeIntervalSinceReferenceDate: Double(bitPattern: try input.u64()))
        a.modified = Date(timeIntervalSinceReferenceDate: Double(bitPattern: try input.u64()))
        let secret = try input.span()
        guard secret.count <= maxSecretBytes else { throw KeychainError.secretTooLarge(secret.count) }
        let extras = present & extrasBit != 0 ? try input.span() : nil
        return ItemBatch.Entry(record: ItemRecord(key: key, attributes: a), secret: secret, extras: extras)
    }

    /// The item's extras follow its secret. Bit 6 is never an attribute's (`ItemAttribute.all`).
    static let extrasBit: UInt16 = 1 << 6
    static let knownBits = ItemAttribute.all.reduce(UInt16(0)) { $0 | 1 << UInt16($1.presenceBit) }

    static func malformed(_ what: String) -> KeychainError {
        .integrityFailure("the backup's contents are malformed: \(what)")
    }
}

/// Appends to a locked buffer.
private struct ByteSink {
    let buffer: SecureBytes
    init(_ buffer: SecureBytes) { self.buffer = buffer }

    func raw(_ bytes: UnsafeRawBufferPointer) { buffer.append(bytes) }

    func u8(_ v: UInt8) { withUnsafeBytes(of: v) { raw($0) } }
    func u16(_ v: UInt16) { withUnsafeBytes(of: v.bigEndian) { raw($0) } }
    func u32(_ v: UInt32) { withUnsafeBytes(of: v.bigEndian) { raw($0) } }
    func u64(_ v: UInt64) { withUnsafeBytes(of: v.bigEndian) { raw($0) } }
    func bytes(_ b: UnsafeRawBufferPointer) { u32(UInt32(b.count)); raw(b) }
    func string(_ s: String) { var s = s; s.withUTF8 { bytes(UnsafeRawBufferPointer($0)) } }
    func code(_ c: FourCharCode) { var s = c.text; s.withUTF8 { raw(UnsafeRawBufferPointer($0)) } }
}

/// Reads a decrypted payload; running past its end is a malformed payload.
private struct ByteSource {
    let raw: UnsafeRawBufferPointer
    var offset = 0
    init(_ raw: UnsafeRawBufferPointer) { self.raw = raw }

    var isAtEnd: Bool { offset == raw.count }

    mutating func take(_ n: Int) throws -> Range<Int> {
        guard n >= 0, raw.count - offset >= n else { throw BackupPayload.malformed("an item is cut short") }
        defer { offset += n }
        return offset..<offset + n
    }

    mutating func integer(_ n: Int) throws -> UInt64 {
        try take(n).reduce(0) { $0 << 8 | UInt64(raw[$1]) }
    }

    mutating func u8() throws -> UInt8 { UInt8(try integer(1)) }
    mutating func u16() throws -> UInt16 { UInt16(try integer(2)) }
    mutating func u64() throws -> UInt64 { try integer(8) }
    mutating func span() throws -> Range<Int> { try take(Int(try integer(4))) }
    mutating func bytes() throws -> [UInt8] { Array(raw[try span()]) }

    mutating func string() throws -> String {
        guard let s = String(validating: UnsafeRawBufferPointer(rebasing: raw[try span()]), as: UTF8.self) else {
            throw BackupPayload.malformed("a name that is not UTF-8")
        }
        return s
    }

    mutating func code() throws -> FourCharCode {
        guard let s = String(validating: UnsafeRawBufferPointer(rebasing: raw[try take(4)]), as: UTF8.self),
              let c = try? FourCharCode(s) else { throw BackupPayload.malformed("a bad four-character code") }
        return c
    }
}
