// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif
import KeychainModel

/// What a running daemon publishes about itself, as `<store>.daemon` beside the store (0600),
/// removed when it exits. Paths are real paths. JSON with these keys; readers ignore keys they
/// do not know, so that any version can read any other's record and name its version.
package struct MountRecord: Encodable, Sendable, Equatable {
    package var pid: Int32
    package var storePath: String
    package var mountpoint: String
    package var socketPath: String
    /// keychainfs's version, for messages.
    package var version: String
    /// `ControlProtocol.version` of the daemon; a client of another one refuses to talk to it.
    package var protocolVersion: UInt16

    /// Paths compare as bytes (`String.isSame`), as the kernel tells them apart.
    package static func == (a: Self, b: Self) -> Bool {
        a.pid == b.pid && a.storePath.isSame(as: b.storePath) && a.mountpoint.isSame(as: b.mountpoint)
            && a.socketPath.isSame(as: b.socketPath) && a.version == b.version && a.protocolVersion == b.protocolVersion
    }

    package init(pid: Int32, storePath: String, mountpoint: String, socketPath: String,
                version: String = ControlProtocol.softwareVersion, protocolVersion: UInt16 = ControlProtocol.version) {
        self.pid = pid; self.storePath = storePath; self.mountpoint = mountpoint; self.socketPath = socketPath
        self.version = version; self.protocolVersion = protocolVersion
    }

    enum CodingKeys: String, CodingKey {
        case pid, storePath, mountpoint, socketPath, version
        case protocolVersion = "protocol"
    }

    /// A record as JSON text: one object, whose keys besides `CodingKeys` are skipped whatever
    /// their value. Read without JSONDecoder, whose generic machinery was a third of a lookup by
    /// the keychainfs front (the record is read at every command that reaches a daemon).
    package init?(json: [UInt8]) {
        var reader = JSONObjectReader(json)
        var pid: Int32?, storePath: String?, mountpoint: String?, socketPath: String?
        var version: String?, protocolVersion: UInt16?
        let complete = reader.readObject { key, reader in
            switch CodingKeys(rawValue: key) {
            case .pid: pid = reader.readInteger().flatMap { Int32(exactly: $0) }; return pid != nil
            case .storePath: storePath = reader.readString(); return storePath != nil
            case .mountpoint: mountpoint = reader.readString(); return mountpoint != nil
            case .socketPath: socketPath = reader.readString(); return socketPath != nil
            case .version: version = reader.readString(); return version != nil
            case .protocolVersion:
                protocolVersion = reader.readInteger().flatMap { UInt16(exactly: $0) }
                return protocolVersion != nil
            case nil: return reader.skipValue()
            }
        }
        guard complete, let pid, let storePath, let mountpoint, let socketPath else { return nil }
        self.init(pid: pid, storePath: storePath, mountpoint: mountpoint, socketPath: socketPath,
                  version: version ?? "unknown", protocolVersion: protocolVersion ?? 0)
    }
}

/// Reads one JSON object (RFC 8259) from bytes, handing each key to the caller, which reads or
/// skips its value. Only what a mount record needs: strings, integers, and skipping the rest.
struct JSONObjectReader {
    private let bytes: [UInt8]
    private var at = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// False when the text is not one well-formed object, or `value` returned false.
    mutating func readObject(_ value: (String, inout JSONObjectReader) -> Bool) -> Bool {
        skipSpace()
        guard take(UInt8(ascii: "{")) else { return false }
        skipSpace()
        if !take(UInt8(ascii: "}")) {
            repeat {
                skipSpace()
                guard let key = readString() else { return false }
                skipSpace()
                guard take(UInt8(ascii: ":")) else { return false }
                skipSpace()
                guard value(key, &self) else { return false }
                skipSpace()
            } while take(UInt8(ascii: ","))
            guard take(UInt8(ascii: "}")) else { return false }
        }
        skipSpace()
        return at == bytes.count
    }

    mutating func readString() -> String? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        var utf8: [UInt8] = []
        while at < bytes.count {
            let byte = bytes[at]
            at += 1
            switch byte {
            case UInt8(ascii: "\""):
                return String(validating: utf8, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard at < bytes.count else { return nil }
                let escape = bytes[at]
                at += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): utf8.append(escape)
                case UInt8(ascii: "b"): utf8.append(0x08)
                case UInt8(ascii: "f"): utf8.append(0x0c)
                case UInt8(ascii: "n"): utf8.append(0x0a)
                case UInt8(ascii: "r"): utf8.append(0x0d)
                case UInt8(ascii: "t"): utf8.append(0x09)
                case UInt8(ascii: "u"):
                    guard let scalar = readEscapedScalar() else { return nil }
                    utf8.append(contentsOf: Character(scalar).utf8)
                default: return nil
                }
            case 0..<0x20: return nil
            default: utf8.append(byte)
            }
        }
        return nil
    }

    /// An optional minus and decimal digits; a fraction or exponent is not an integer.
    mutating func readInteger() -> Int64? {
        let negative = take(UInt8(ascii: "-"))
        var value: Int64 = 0
        var digits = 0
        while at < bytes.count, let digit = Self.digit(bytes[at]) {
            let (times10, o1) = value.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times10.addingReportingOverflow(Int64(digit))
            guard !o1, !o2 else { return nil }
            value = sum
            digits += 1
            at += 1
        }
        guard digits > 0, at == bytes.count || !Self.continuesNumber(bytes[at]) else { return nil }
        return negative ? -value : value
    }

    /// Any value: a string, or an object or array (to its matching bracket, strings read as
    /// strings), or a number or literal.
    mutating func skipValue() -> Bool {
        var depth = 0
        repeat {
            skipSpace()
            guard at < bytes.count else { return false }
            switch bytes[at] {
            case UInt8(ascii: "\""):
                guard readString() != nil else { return false }
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                depth += 1
                at += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                guard depth > 0 else { return false }
                depth -= 1
                at += 1
            case UInt8(ascii: ","), UInt8(ascii: ":"):
                guard depth > 0 else { return false }
                at += 1
            default:
                let start = at
                while at < bytes.count, Self.continuesNumber(bytes[at]) || Self.isLetter(bytes[at]) { at += 1 }
                guard at > start else { return false }
            }
        } while depth > 0
        return true
    }

    /// The four hex digits after `\u`, and the low surrogate's escape after a high one.
    private mutating func readEscapedScalar() -> Unicode.Scalar? {
        guard let unit = readHex4() else { return nil }
        if (0xD800..<0xDC00).contains(unit) {
            guard take(UInt8(ascii: "\\")), take(UInt8(ascii: "u")), let low = readHex4(),
                  (0xDC00..<0xE000).contains(low) else { return nil }
            return Unicode.Scalar(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))
        }
        return Unicode.Scalar(unit)
    }

    private mutating func readHex4() -> UInt32? {
        guard at + 4 <= bytes.count else { return nil }
        var value: UInt32 = 0
        for byte in bytes[at..<at + 4] {
            guard let digit = Self.hexDigit(byte) else { return nil }
            value = value << 4 | digit
        }
        at += 4
        return value
    }

    private mutating func take(_ byte: UInt8) -> Bool {
        guard at < bytes.count, bytes[at] == byte else { return false }
        at += 1
        return true
    }

    private mutating func skipSpace() {
        while at < bytes.count {
            switch bytes[at] {
            case 0x20, 0x09, 0x0a, 0x0d: at += 1
            default: return
            }
        }
    }

    private static func digit(_ byte: UInt8) -> UInt8? {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) ? byte - UInt8(ascii: "0") : nil
    }

    private static func hexDigit(_ byte: UInt8) -> UInt32? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt32(byte - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): UInt32(byte - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): UInt32(byte - UInt8(ascii: "A") + 10)
        default: nil
        }
    }

    private static func continuesNumber(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E"),
             UInt8(ascii: "+"), UInt8(ascii: "-"): true
        default: false
        }
    }

    private static func isLetter(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
    }
}
