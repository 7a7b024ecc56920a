// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif
import KeychainCrypto
import KeychainModel

/// The field tags of the control protocol's payloads. A payload is a sequence of fields, each
/// `tag (UInt16) | length (UInt32) | value`, big-endian; a nested value is itself a sequence
/// of fields. Integers have the width their field says; strings are UTF-8; secrets are raw bytes.
/// Never renumber a tag: add new ones. Tags 1 and 2 are frozen for the version-mismatch frame.
package enum WireTag: UInt16, CaseIterable {
    // The version-mismatch frame (frozen across versions).
    case softwareVersion = 1        // string
    case protocolVersion = 2        // u16

    // Keys and queries.
    case itemKind = 10              // u8: 1 generic, 2 internet
    case accessGroup = 11           // string
    case account = 12               // string
    case service = 13               // string
    case server = 14                // string
    case port = 15                  // u16
    case path = 16                  // string
    case internetProtocol = 17      // four ASCII bytes
    case authenticationType = 18    // four ASCII bytes
    case securityDomain = 19        // string

    // Attributes. The settable ones take their tags from `ItemAttribute.all` (30 to 35 today:
    // label, comment, description, generic, creator, type), never one of these.
    case accessible = 36            // u8: `AccessibilityClass.code`
    case created = 37               // u64: bits of the Double seconds since 2001
    case modified = 38              // u64, as `created`

    // Requests and replies.
    case key = 50                   // nested key
    case changes = 51               // nested attributes
    case query = 52                 // nested query
    case record = 53                // nested: key and attributes
    case secret = 54                // secret bytes
    case passphrase = 55            // secret bytes
    case updateExisting = 56        // u8 0/1
    case withSecrets = 57           // u8 0/1
    case limit = 58                 // u64
    case itemID = 59                // u64: bits of the Int64
    case secretState = 60           // u8: 1 value, 2 unavailable, 3 damaged
    case damage = 61                // string
    case count = 62                 // u64
    case problem = 63               // nested, repeated: itemID and damage
    case lockState = 64             // u8: 1 before first unlock, 2 unlocked, 3 locked
    case storePath = 65             // string
    case mountpoint = 66            // string
    case lockAfter = 67             // u64
    case classCount = 68            // nested, repeated: accessible and count
    case hasPassphrase = 69         // u8 0/1
    case daemonPID = 70             // u64
    case daemonVersion = 71         // string
    case memoryLocked = 72          // u8 0/1
    case allowRoot = 73             // u8 0/1
    case all = 74                   // u8 0/1: a delete acts on every match, not the first
    case extras = 75                // secret bytes: git's expiry and refresh token, sealed like the secret
    case passphraseWait = 76        // u64: seconds before a passphrase would be judged; absent when none

    // Backups.
    case batchItem = 90             // nested, repeated: record, secret and extras of one item
    case added = 91                 // u64
    case replaced = 92              // u64
    case skipped = 93               // nested, repeated: a key left as it was
    case afterID = 94               // u64: bits of the Int64
    case nextID = 95                // u64: bits of the Int64; absent after the last page

    // The daemon's memory, in the status.
    case memory = 100                // nested: the daemon's locked memory (fields 101-107)
    case lockedBytes = 101           // u64
    case unlockedBytes = 102         // u64
    case lockLimit = 103             // u64; absent when unlimited
    case lockRefusals = 104          // u64
    case cachedSecrets = 105         // u64
    case cachedBytes = 106           // u64
    case cacheBudget = 107           // u64

    // Sync (issue 20).
    case syncAction = 110            // u8: `SyncAction`
    case syncFolder = 111            // string
    case scryptLogN = 112            // u8
    case published = 113             // u64
    case applied = 114               // u64
    case removed = 115               // u64
    case conflictCopies = 116        // u64
    case deferred = 117              // u64
    case refusal = 118               // nested, repeated: message
    case syncDevice = 119            // string
    case ownDirectoryRewritten = 121 // string: `SyncOutcome.ownDirectoryRewritten`
    case heldHere = 122              // nested, repeated: a key (`SyncOutcome.heldByItemThatDoesNotSync`)

    // Access lists.
    case repin = 120                 // nested attributes: the programs `setAccess` pins anew

    // Errors.
    case errorCase = 80             // u16: `WireError` case
    case message = 81               // string: the case's text (a path, a reason)
    case number = 82                // u64: the case's number (seconds, bytes)
    case errorText = 83             // string: the whole message, for a case the reader does not know
}

/// Writes a payload into locked memory, so that a secret copied in is never in ordinary memory,
/// and the whole frame is wiped when it is dropped.
package final class WireWriter {
    package let buffer: SecureBytes
    package private(set) var count: Int

    package init(reserving capacity: Int = 4096) {
        buffer = SecureBytes(count: capacity)
        count = 0
    }

    private func grow(by n: Int) {
        if count + n > buffer.count { buffer.resize(to: max(count + n, buffer.count * 2)) }
    }

    package func raw(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        grow(by: bytes.count)
        let at = count
        buffer.withUnsafeMutableBytes { dst in
            (dst.baseAddress! + at).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        }
        count += bytes.count
    }

    package func raw(_ bytes: [UInt8]) { bytes.withUnsafeBytes { raw($0) } }

    package func integer<T: FixedWidthInteger>(_ value: T) {
        withUnsafeBytes(of: value.bigEndian) { raw($0) }
    }

    /// Overwrites a big-endian UInt32 written earlier (a length placeholder).
    package func patch(_ value: UInt32, at offset: Int) {
        buffer.withUnsafeMutableBytes { dst in
            withUnsafeBytes(of: value.bigEndian) { src in
                (dst.baseAddress! + offset).copyMemory(from: src.baseAddress!, byteCount: 4)
            }
        }
    }

    package func field(_ tag: WireTag, _ value: UnsafeRawBufferPointer) { field(tag: tag.rawValue, value) }

    /// An attribute's value, under its tag from the table: text as UTF-8, a code as its four
    /// bytes, bytes as they are.
    package func field(_ attribute: ItemAttribute, _ value: AttributeValue) { field(attribute, bytes: value.bytes) }

    /// Any bytes under an attribute's tag (what a client that skips validation could send).
    package func field(_ attribute: ItemAttribute, bytes: [UInt8]) {
        bytes.withUnsafeBytes { field(tag: attribute.wireTag, $0) }
    }

    private func field(tag: UInt16, _ value: UnsafeRawBufferPointer) {
        integer(tag)
        integer(UInt32(value.count))
        raw(value)
    }

    package func field(_ tag: WireTag, bytes: [UInt8]) { bytes.withUnsafeBytes { field(tag, $0) } }
    package func field(_ tag: WireTag, _ string: String) { field(tag, bytes: Array(string.utf8)) }
    package func field(_ tag: WireTag, secret: SecureBytes) { secret.withUnsafeBytes { field(tag, $0) } }
    package func field(_ tag: WireTag, _ flag: Bool) { field(tag, UInt8(flag ? 1 : 0)) }

    package func field<T: FixedWidthInteger & UnsignedInteger>(_ tag: WireTag, _ value: T) {
        withUnsafeBytes(of: value.bigEndian) { field(tag, $0) }
    }

    package func field(_ tag: WireTag, ifPresent string: String?) { if let string { field(tag, string) } }

    /// A field whose value is the fields `body` writes.
    package func nested(_ tag: WireTag, _ body: (WireWriter) throws -> Void) rethrows {
        integer(tag.rawValue)
        let lengthAt = count
        integer(UInt32(0))
        let start = count
        try body(self)
        patch(UInt32(count - start), at: lengthAt)
    }
}

/// The fields of a payload (or of a nested field), read in place from the frame's locked buffer.
/// Accessors throw `KeychainError.io` for a malformed payload: a field cut short, a duplicate
/// of a single-valued field, a value of the wrong width, text that is not UTF-8.
package struct WireFields {
    private let frame: SecureBytes
    private let fields: [(tag: UInt16, range: Range<Int>)]

    package init(_ frame: SecureBytes) throws { try self.init(frame, range: 0..<frame.count) }

    private init(_ frame: SecureBytes, range: Range<Int>) throws {
        self.frame = frame
        var fields: [(tag: UInt16, range: Range<Int>)] = []
        try frame.withUnsafeBytes { raw in
            var at = range.lowerBound
            while at < range.upperBound {
                guard range.upperBound - at >= 6 else { throw WireFields.malformed("a field header is cut short") }
                let tag = UInt16(raw[at]) << 8 | UInt16(raw[at + 1])
                let length = Int(raw[at + 2]) << 24 | Int(raw[at + 3]) << 16 | Int(raw[at + 4]) << 8 | Int(raw[at + 5])
                at += 6
                guard length <= range.upperBound - at else {
                    throw WireFields.malformed("field \(tag) claims \(length) bytes; \(range.upperBound - at) remain")
                }
                fields.append((tag, at..<at + length))
                at += length
            }
        }
        self.fields = fields
    }

    package static func malformed(_ why: String) -> KeychainError { .io("malformed control message: \(why)") }

    private func ranges(_ tag: WireTag) -> [Range<Int>] { ranges(tag: tag.rawValue) }
    private func ranges(tag: UInt16) -> [Range<Int>] { fields.filter { $0.tag == tag }.map(\.range) }

    private func one(_ tag: WireTag) throws -> Range<Int>? { try one(tag: tag.rawValue, named: "\(tag)") }

    private func one(tag: UInt16, named name: String) throws -> Range<Int>? {
        let found = ranges(tag: tag)
        guard found.count <= 1 else { throw Self.malformed("field \(name) appears \(found.count) times") }
        return found.first
    }

    /// An attribute's value under its tag from the table. Text that is not UTF-8 is a malformed
    /// message; a bad four-character code is the model's error, as on the command line.
    package func attribute(_ attribute: ItemAttribute) throws -> AttributeValue? {
        guard let r = try one(tag: attribute.wireTag, named: attribute.name) else { return nil }
        let raw = frame.withUnsafeBytes { Array($0[r]) }
        if (attribute.kind == .text || attribute.kind == .code) && String(validating: raw, as: UTF8.self) == nil {
            throw Self.malformed("field \(attribute.name) is not UTF-8")
        }
        do { return try attribute.value(from: raw) } catch { throw KeychainError(error) }
    }

    package func has(_ tag: WireTag) -> Bool { fields.contains { $0.tag == tag.rawValue } }

    package func bytes(_ tag: WireTag) throws -> [UInt8]? {
        try one(tag).map { r in frame.withUnsafeBytes { Array($0[r]) } }
    }

    package func string(_ tag: WireTag) throws -> String? {
        guard let r = try one(tag) else { return nil }
        return try frame.withUnsafeBytes { raw in
            guard let s = String(validating: raw[r], as: UTF8.self) else { throw Self.malformed("field \(tag) is not UTF-8") }
            return s
        }
    }

    package func string(required tag: WireTag) throws -> String {
        guard let s = try string(tag) else { throw Self.malformed("field \(tag) is missing") }
        return s
    }

    /// Calls `body` with the field's bytes in place in the frame's locked buffer (nil when the
    /// field is absent), so a secret can be copied on without a buffer of its own.
    package func withBytes<R>(_ tag: WireTag, _ body: (UnsafeRawBufferPointer?) throws -> R) throws -> R {
        guard let r = try one(tag) else { return try body(nil) }
        return try frame.withUnsafeBytes { raw in try body(UnsafeRawBufferPointer(rebasing: raw[r])) }
    }

    /// Copied from the frame's locked buffer straight into a new locked buffer.
    package func secret(_ tag: WireTag) throws -> SecureBytes? {
        guard let r = try one(tag) else { return nil }
        return frame.withUnsafeBytes { raw in SecureBytes(copying: UnsafeRawBufferPointer(rebasing: raw[r])) }
    }

    package func integer<T: FixedWidthInteger & UnsignedInteger>(_ tag: WireTag, as: T.Type = T.self) throws -> T? {
        guard let r = try one(tag) else { return nil }
        guard r.count == MemoryLayout<T>.size else {
            throw Self.malformed("field \(tag) is \(r.count) bytes; expected \(MemoryLayout<T>.size)")
        }
        return frame.withUnsafeBytes { raw in r.reduce(T(0)) { $0 << 8 | T(raw[$1]) } }
    }

    package func integer<T: FixedWidthInteger & UnsignedInteger>(required tag: WireTag, as: T.Type = T.self) throws -> T {
        guard let v = try integer(tag, as: T.self) else { throw Self.malformed("field \(tag) is missing") }
        return v
    }

    package func flag(_ tag: WireTag) throws -> Bool {
        switch try integer(tag, as: UInt8.self) {
        case nil, 0: false
        case 1: true
        case let v?: throw Self.malformed("field \(tag) is \(v); expected 0 or 1")
        }
    }

    package func nested(_ tag: WireTag) throws -> WireFields? {
        try one(tag).map { try WireFields(frame, range: $0) }
    }

    package func nested(required tag: WireTag) throws -> WireFields {
        guard let n = try nested(tag) else { throw Self.malformed("field \(tag) is missing") }
        return n
    }

    package func nestedAll(_ tag: WireTag) throws -> [WireFields] {
        try ranges(tag).map { try WireFields(frame, range: $0) }
    }
}
