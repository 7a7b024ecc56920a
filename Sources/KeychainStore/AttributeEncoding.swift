import Foundation
import KeychainModel

/// How an item's key and attributes are laid out before they are sealed.
///
/// Format 1 is binary: the format byte, the kind, then each field in a fixed order, strings and
/// data as a LEB128 length and their bytes, dates as the bits of their `timeIntervalSinceReferenceDate`,
/// and the optional attributes (`ItemAttribute.all`, in its order) behind a mask of their
/// presence bits. Format 2 is format 1 with a two-byte mask (big-endian), for attributes whose
/// bit is above 7 (`synchronizable`); a row without such an attribute is still written in
/// format 1, so older versions read it. Earlier versions wrote JSON, which starts
/// with `{`; such rows are still read, and are written again in format 1 when they next change.
/// Decoding JSON was a quarter to a third of a 100,000-item mount.
enum AttributeEncoding {
    static let binaryFormat: UInt8 = 1
    static let wideMaskFormat: UInt8 = 2
    static let jsonStart = UInt8(ascii: "{")
    /// The presence bits of the attributes this version knows; a row with another is refused.
    static let knownBits = ItemAttribute.all.reduce(UInt16(0)) { $0 | 1 << UInt16($1.presenceBit) }

    static func encode(_ record: ItemRecord) -> [UInt8] {
        let a = record.attributes
        let present = ItemAttribute.all.compactMap { attribute in
            a.values[attribute].map { (attribute.presenceBit, $0) }
        }
        let mask = present.reduce(UInt16(0)) { $0 | 1 << UInt16($1.0) }
        var w = Writer()
        w.out.reserveCapacity(96)
        w.byte(mask > 0xff ? wideMaskFormat : binaryFormat)
        switch record.key {
        case .generic(let g):
            w.byte(UInt8(ItemKind.generic.rawValue))
            w.string(g.accessGroup); w.string(g.service); w.string(g.account)
        case .internet(let i):
            w.byte(UInt8(ItemKind.internet.rawValue))
            w.string(i.accessGroup); w.string(i.server); w.byte(UInt8(i.port >> 8)); w.byte(UInt8(i.port & 0xff))
            w.string(i.path); w.code(i.protocol.code); w.code(i.authenticationType.code)
            w.string(i.securityDomain); w.string(i.account)
        }
        w.byte(UInt8(a.accessible.code))
        w.date(a.created); w.date(a.modified)
        if mask > 0xff { w.byte(UInt8(mask >> 8)) }
        w.byte(UInt8(mask & 0xff))
        for (_, value) in present {
            switch value {
            case .text(let v): w.string(v)
            case .bytes(let v): w.bytes(v)
            case .programs(let list): w.bytes(Data(list.encoded))
            case .code(let v): w.code(v)
            case .flag(let b): w.byte(b ? 1 : 0)
            }
        }
        return w.out
    }

    /// The record in `plain`, in format 1 or in the JSON of earlier versions; nil if it is
    /// neither (the caller reports that as the item's integrity failure).
    static func decode(_ plain: UnsafeRawBufferPointer) -> ItemRecord? {
        guard let first = plain.first else { return nil }
        switch first {
        case binaryFormat, wideMaskFormat:
            var r = Reader(bytes: plain, at: 1, wideMask: first == wideMaskFormat)
            return r.record()
        case jsonStart:
            return try? JSONDecoder().decode(ItemRecord.self, from: Data(plain))
        default:
            return nil
        }
    }

    private struct Writer {
        var out: [UInt8] = []

        mutating func byte(_ b: UInt8) { out.append(b) }

        mutating func length(_ n: Int) {
            var v = UInt64(n)
            while v >= 0x80 {
                out.append(UInt8(truncatingIfNeeded: v) | 0x80)
                v >>= 7
            }
            out.append(UInt8(v))
        }

        mutating func string(_ s: String) {
            var s = s
            s.withUTF8 { u in
                length(u.count)
                out.append(contentsOf: u)
            }
        }

        mutating func bytes(_ d: Data) {
            length(d.count)
            out.append(contentsOf: d)
        }

        mutating func code(_ c: FourCharCode) { out.append(contentsOf: c.text.utf8) }

        mutating func date(_ d: Date) {
            let bits = d.timeIntervalSinceReferenceDate.bitPattern
            for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: bits >> UInt64(shift))) }
        }
    }

    /// Every read is bounds-checked; any short, overlong or ill-formed field makes the whole record nil.
    private struct Reader {
        let bytes: UnsafeRawBufferPointer
        var at: Int
        let wideMask: Bool

        init(bytes: UnsafeRawBufferPointer, at: Int, wideMask: Bool) {
            self.bytes = bytes
            self.at = at
            self.wideMask = wideMask
        }

        mutating func mask() -> UInt16? {
            guard wideMask else { return byte().map(UInt16.init) }
            guard let hi = byte(), let lo = byte() else { return nil }
            return UInt16(hi) << 8 | UInt16(lo)
        }

        mutating func byte() -> UInt8? {
            guard at < bytes.count else { return nil }
            defer { at += 1 }
            return bytes[at]
        }

        mutating func length() -> Int? {
            var v = 0
            var shift = 0
            while let b = byte() {
                v |= Int(b & 0x7f) << shift
                if b & 0x80 == 0 { return v }
                shift += 7
                // A secret's attributes are far below 2^28 bytes; more length bytes are damage.
                if shift > 28 { return nil }
            }
            return nil
        }

        mutating func raw(_ n: Int) -> UnsafeRawBufferPointer? {
            guard n >= 0, n <= bytes.count - at else { return nil }
            defer { at += n }
            return UnsafeRawBufferPointer(rebasing: bytes[at..<at + n])
        }

        mutating func string() -> String? {
            guard let n = length(), let b = raw(n) else { return nil }
            return String(validating: b.bindMemory(to: UInt8.self), as: UTF8.self)
        }

        mutating func data() -> Data? {
            guard let n = length(), let b = raw(n) else { return nil }
            return Data(b)
        }

        mutating func code() -> FourCharCode? {
            guard let b = raw(4), let text = String(validating: b.bindMemory(to: UInt8.self), as: UTF8.self) else { return nil }
            return try? FourCharCode(text)
        }

        mutating func date() -> Date? {
            guard let b = raw(8) else { return nil }
            let bits = b.reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            let t = Double(bitPattern: bits)
            guard t.isFinite else { return nil }
            return Date(timeIntervalSinceReferenceDate: t)
        }

        mutating func record() -> ItemRecord? {
            guard let kind = byte() else { return nil }
            let key: ItemKey
            switch Int(kind) {
            case ItemKind.generic.rawValue:
                guard let group = string(), let service = string(), let account = string() else { return nil }
                key = .generic(GenericPasswordKey(storedService: service, account: account, accessGroup: group))
            case ItemKind.internet.rawValue:
                guard let group = string(), let server = string(), let hi = byte(), let lo = byte(),
                      let path = string(), let proto = code(), let auth = code(),
                      let domain = string(), let account = string() else { return nil }
                key = .internet(InternetPasswordKey(
                    storedServer: server, port: UInt16(hi) << 8 | UInt16(lo), path: path,
                    protocol: InternetProtocol(code: proto), authenticationType: AuthenticationType(code: auth),
                    securityDomain: domain, account: account, accessGroup: group))
            default:
                return nil
            }
            guard let classCode = byte(), let accessible = AccessibilityClass(code: Int(classCode)),
                  let created = date(), let modified = date(), let mask = mask(),
                  mask & ~AttributeEncoding.knownBits == 0 else { return nil }
            var a = ItemAttributes(accessible: accessible, created: created, modified: modified)
            for attribute in ItemAttribute.all where mask & 1 << UInt16(attribute.presenceBit) != 0 {
                let value: AttributeValue? = switch attribute.kind {
                case .text: string().map(AttributeValue.text)
                case .bytes: data().map(AttributeValue.bytes)
                case .code: code().map(AttributeValue.code)
                // Sealed with the rest: a list that does not decode is a damaged record.
                case .programs: data().flatMap { try? AccessList(decoding: Array($0)) }.map(AttributeValue.programs)
                case .flag: byte().flatMap { $0 <= 1 ? AttributeValue.flag($0 == 1) : nil }
                }
                guard let value else { return nil }
                a.values[attribute] = value
            }
            guard at == bytes.count else { return nil }
            return ItemRecord(key: key, attributes: a)
        }
    }
}
