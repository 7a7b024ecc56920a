// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif
import KeychainCrypto
import KeychainModel

/// Items to save together, their secrets and extras packed back to back in one locked buffer:
/// a batch of 100,000 items costs one mapping, not one per secret.
///
/// Copies share the buffer. `append` only ever adds to its end, so the ranges of a copy stay
/// valid, and `slices` hands out views of the same buffer.
/// @unchecked Sendable because its shared buffer is only appended to past every copy's ranges.
public struct ItemBatch: @unchecked Sendable {
    /// One item of the batch: its record, and where its secret and extras sit in `secrets`.
    public struct Entry: Sendable {
        /// The item's key and attributes.
        public var record: ItemRecord
        /// Where the secret sits in `secrets`.
        public var secret: Range<Int>
        /// Where git's extras (expiry, refresh token) sit in `secrets`; nil when the item has none.
        public var extras: Range<Int>?

        /// An entry over ranges of a buffer; `ItemBatch.init(secrets:entries:)` checks them.
        public init(record: ItemRecord, secret: Range<Int>, extras: Range<Int>? = nil) {
            self.record = record; self.secret = secret; self.extras = extras
        }
    }

    /// The locked buffer every entry's secret and extras sit in; shared by copies and slices.
    public let secrets: SecureBytes
    /// The items, in the order they were appended.
    public private(set) var entries: [Entry]

    /// An empty batch with its own buffer.
    public init() {
        secrets = SecureBytes(count: 0)
        entries = []
    }

    /// A batch over a buffer filled by the caller (a decrypted backup, say).
    public init(secrets: SecureBytes, entries: [Entry]) throws {
        func outside(_ r: Range<Int>) -> Bool { r.lowerBound < 0 || r.upperBound > secrets.count }
        for e in entries where outside(e.secret) || e.extras.map(outside) == true {
            throw KeychainError.invalidInput("a batch entry's secret lies outside its buffer")
        }
        self.secrets = secrets
        self.entries = entries
    }

    /// Number of items.
    public var count: Int { entries.count }
    /// True when there are no items.
    public var isEmpty: Bool { entries.isEmpty }
    /// Bytes of secret and extras held by the entries (not the buffer, which slices share).
    public var secretBytes: Int { entries.reduce(0) { $0 + $1.secret.count + ($1.extras?.count ?? 0) } }

    /// Copies `secret` and `extras` onto the end of the buffer.
    public mutating func append(_ record: ItemRecord, secret: UnsafeRawBufferPointer, extras: UnsafeRawBufferPointer? = nil) {
        let secretRange = copy(secret)
        let extrasRange = extras.map(copy)
        entries.append(Entry(record: record, secret: secretRange, extras: extrasRange))
    }

    /// Copies `secret` and `extras` onto the end of the buffer.
    public mutating func append(_ record: ItemRecord, secret: SecureBytes, extras: SecureBytes? = nil) {
        secret.withUnsafeBytes { s in
            if let extras {
                extras.withUnsafeBytes { append(record, secret: s, extras: $0) }
            } else {
                append(record, secret: s)
            }
        }
    }

    private func copy(_ bytes: UnsafeRawBufferPointer) -> Range<Int> {
        let start = secrets.count
        secrets.append(bytes)
        return start..<start + bytes.count
    }

    /// Calls `body` with one entry's secret, which is valid only inside it.
    public func withSecret<R>(_ entry: Entry, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try secrets.withUnsafeBytes { all in
            try body(UnsafeRawBufferPointer(rebasing: all[entry.secret]))
        }
    }

    /// Calls `body` with one entry's secret and extras (nil when it has none), valid only inside it.
    public func withSecretAndExtras<R>(_ entry: Entry,
                                       _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer?) throws -> R) rethrows -> R {
        try secrets.withUnsafeBytes { all in
            try body(UnsafeRawBufferPointer(rebasing: all[entry.secret]),
                     entry.extras.map { UnsafeRawBufferPointer(rebasing: all[$0]) })
        }
    }

    /// Consecutive views of this batch, each at most `maxItems` entries and, unless one entry is
    /// larger on its own, `maxSecretBytes` of secrets: the unit of one transaction or one request.
    public func slices(maxItems: Int, maxSecretBytes: Int) -> [ItemBatch] {
        var out: [ItemBatch] = []
        var current: [Entry] = [], bytes = 0
        for e in entries {
            let size = e.secret.count + (e.extras?.count ?? 0)
            if !current.isEmpty && (current.count >= maxItems || bytes + size > maxSecretBytes) {
                out.append(ItemBatch(sharing: secrets, current))
                current = []; bytes = 0
            }
            current.append(e)
            bytes += size
        }
        if !current.isEmpty { out.append(ItemBatch(sharing: secrets, current)) }
        return out
    }

    /// The entries in `range`, sharing this batch's buffer.
    public func slice(_ range: Range<Int>) -> ItemBatch { ItemBatch(sharing: secrets, Array(entries[range])) }

    private init(sharing secrets: SecureBytes, _ entries: [Entry]) {
        self.secrets = secrets
        self.entries = entries
    }
}

/// One page of an export (`Keychain.exportPage(afterID:limit:)`, `KeychainService.exportItems`).
public struct ExportPage: Sendable {
    /// The page's items with their secrets.
    public var batch: ItemBatch
    /// Items that fail their integrity check and are left out.
    public var damaged: [IntegrityProblem]
    /// The `afterID` of the next page; nil after the last.
    public var next: Int64?

    /// A page as the store or the control protocol hands it over.
    public init(batch: ItemBatch, damaged: [IntegrityProblem], next: Int64?) {
        self.batch = batch; self.damaged = damaged; self.next = next
    }
}

/// What one import of a batch did.
public struct ImportReport: Sendable, Equatable {
    /// New items stored.
    public var added: Int
    /// Existing items overwritten (`updateExisting`), keeping their ids.
    public var replaced: Int
    /// Keys that existed already and were left as they were.
    public var skipped: [ItemKey]

    /// A report with the given counts; the defaults are an import that did nothing.
    public init(added: Int = 0, replaced: Int = 0, skipped: [ItemKey] = []) {
        self.added = added; self.replaced = replaced; self.skipped = skipped
    }

    /// Adds the counts of a later batch, for an import done in several.
    public mutating func add(_ other: ImportReport) {
        added += other.added; replaced += other.replaced; skipped += other.skipped
    }
}
