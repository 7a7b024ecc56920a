import Foundation
import KeychainModel

/// A device of a sync folder: 16 random bytes, as 32 lowercase hex characters (its directory's
/// name). Ordered by that text, which breaks ties between equal Lamport versions.
package struct DeviceID: Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    package let hex: String

    package init(hex: String) throws(KeychainError) {
        guard hex.utf8.count == 32, hex.utf8.allSatisfy({ ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }) else {
            throw .invalidInput("'\(hex)' is not a sync device id (32 lowercase hex characters)")
        }
        self.hex = hex
    }

    package static func random() -> DeviceID { try! DeviceID(hex: SyncHex.encode(SyncRandom.bytes(16))) }

    /// The first 8 characters: what a conflict copy's name and `sync status` show.
    package var short: String { String(hex.prefix(8)) }
    package var description: String { hex }
    package static func < (a: DeviceID, b: DeviceID) -> Bool { a.hex < b.hex }

    package init(from decoder: Decoder) throws { self = try DeviceID(hex: try decoder.singleValueContainer().decode(String.self)) }
    package func encode(to encoder: Encoder) throws { var c = encoder.singleValueContainer(); try c.encode(hex) }
}

/// An item as the folder knows it: a keyed hash of its identity (`SyncKeys.itemID`), so that no
/// file name reveals a service or an account. 64 lowercase hex characters.
package struct SyncItemID: Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    package let hex: String

    package init(hex: String) throws(KeychainError) {
        guard hex.utf8.count == 64, hex.utf8.allSatisfy({ ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }) else {
            throw .invalidInput("'\(hex)' is not a sync item id")
        }
        self.hex = hex
    }

    package var description: String { hex }
    package static func < (a: SyncItemID, b: SyncItemID) -> Bool { a.hex < b.hex }
    package init(from decoder: Decoder) throws { self = try SyncItemID(hex: try decoder.singleValueContainer().decode(String.self)) }
    package func encode(to encoder: Encoder) throws { var c = encoder.singleValueContainer(); try c.encode(hex) }
}

/// A version's place in the total order of versions: its Lamport counter, then its device.
package struct SyncVersion: Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    package var lamport: UInt64
    package var device: DeviceID

    package init(lamport: UInt64, device: DeviceID) { self.lamport = lamport; self.device = device }

    package static func < (a: SyncVersion, b: SyncVersion) -> Bool { (a.lamport, a.device) < (b.lamport, b.device) }
    package var description: String { "\(lamport)@\(device.short)" }
}

/// Per item, how many versions of it each device has written: what tells a later version (it
/// counts every version its writer had merged) from a concurrent one (neither counts the other).
package struct VersionVector: Hashable, Sendable, Codable {
    package var counts: [DeviceID: UInt64]

    package init(_ counts: [DeviceID: UInt64] = [:]) { self.counts = counts.filter { $0.value > 0 } }

    package subscript(device: DeviceID) -> UInt64 { counts[device] ?? 0 }

    /// Every count here is at most `other`'s.
    package func isCovered(by other: VersionVector) -> Bool { counts.allSatisfy { other[$0.key] >= $0.value } }

    /// Covered by `other` and not equal to it: `other` was written knowing this one.
    package func isDominated(by other: VersionVector) -> Bool { self != other && isCovered(by: other) }

    package func joined(_ other: VersionVector) -> VersionVector {
        VersionVector(counts.merging(other.counts, uniquingKeysWith: max))
    }

    /// The vector of a new version by `device` that follows all of `known`. Its own count is
    /// at least `atLeast`: the writer passes its Lamport clock, which has passed every count it
    /// ever gave, so no two of its writes share a count, even when what it knows of its earlier
    /// ones is gone (an own version written over and dropped, a state restored from a copy).
    package static func next(after known: [VersionVector], by device: DeviceID, atLeast: UInt64 = 0) -> VersionVector {
        var v = known.reduce(VersionVector()) { $0.joined($1) }
        v.counts[device] = max(v[device] + 1, atLeast)
        return v
    }

    package init(from decoder: Decoder) throws {
        let raw = try decoder.singleValueContainer().decode([String: UInt64].self)
        var counts: [DeviceID: UInt64] = [:]
        for (k, v) in raw { counts[try DeviceID(hex: k)] = v }
        self.init(counts)
    }

    package func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(Dictionary(uniqueKeysWithValues: counts.map { ($0.key.hex, $0.value) }))
    }
}

/// One version of one item as a device published it: the item's value (sealed in its file,
/// whose SHA-256 is `fileDigest`) or a tombstone.
package struct SyncEntry: Hashable, Sendable, Codable {
    package var item: SyncItemID
    package var version: SyncVersion
    package var vector: VersionVector
    package var isTombstone: Bool
    /// Seconds since 1970 when a tombstone was written: expiry counts from it.
    package var deletedAt: Int64?
    /// The writer's manifest sequence number when it wrote this version: expiry waits until
    /// every device has merged that manifest.
    package var writtenSeq: UInt64
    /// SHA-256 of the item's sealed file, so that a file swapped under a signed manifest fails.
    package var fileDigest: String
    /// The version as its writer wrote it, when another device publishes it again (its writer's
    /// directory gone, or this device's own directory lost): the same vector, and the same
    /// place in the order of versions (`order`). Nil for a version as written.
    package var writtenAs: SyncVersion?

    package init(item: SyncItemID, version: SyncVersion, vector: VersionVector, isTombstone: Bool,
                 deletedAt: Int64? = nil, writtenSeq: UInt64, fileDigest: String, writtenAs: SyncVersion? = nil) {
        self.item = item; self.version = version; self.vector = vector; self.isTombstone = isTombstone
        self.deletedAt = deletedAt; self.writtenSeq = writtenSeq; self.fileDigest = fileDigest
        self.writtenAs = writtenAs
    }

    /// Where the version stands among concurrent ones: where its writer put it.
    package var order: SyncVersion { writtenAs ?? version }

    /// Of two versions a device published of one item, the later: its Lamport counter, which
    /// grows at every version the device publishes (one published again too, whose vector
    /// does not count it). The rest only makes the order total, so that merging stays
    /// commutative whatever arrives.
    static func precedesFromOneWriter(_ a: SyncEntry, _ b: SyncEntry) -> Bool {
        if a.version != b.version { return a.version < b.version }
        if a.isTombstone != b.isTombstone { return !a.isTombstone }
        return a.fileDigest < b.fileDigest
    }

    /// The order of concurrent versions: where their writers put them, then where they were
    /// published (two publications of one version), so every device picks the same winner.
    static func ranksBelow(_ a: SyncEntry, _ b: SyncEntry) -> Bool { (a.order, a.version) < (b.order, b.version) }
}

/// The versions the folder holds: per device (each writes only its own directory), per item,
/// the device's latest version. Merging two states keeps, for each device and item, the later
/// of the two: a join, so merging is commutative, associative and idempotent, and devices that
/// have merged the same versions in any order hold the same state.
package struct SyncState: Hashable, Sendable {
    package var entries: [DeviceID: [SyncItemID: SyncEntry]] = [:]

    package init() {}

    /// Adds a version; it replaces the same device's version of the item only if later.
    package mutating func insert(_ e: SyncEntry) {
        let d = e.version.device
        if let old = entries[d]?[e.item], !SyncEntry.precedesFromOneWriter(old, e) { return }
        entries[d, default: [:]][e.item] = e
    }

    package func merged(_ other: SyncState) -> SyncState {
        var out = self
        for (_, items) in other.entries { for (_, e) in items { out.insert(e) } }
        return out
    }

    package var items: Set<SyncItemID> { Set(entries.values.flatMap(\.keys)) }

    /// Every device's version of the item.
    package func versions(of item: SyncItemID) -> [SyncEntry] {
        entries.values.compactMap { $0[item] }.sorted { $0.version < $1.version }
    }

    /// What the item is once merged: the versions no other version was written over (`heads`),
    /// the greatest of them (`winner`: by Lamport counter, then device, where their writers
    /// put them: `SyncEntry.ranksBelow`), and the others that
    /// hold a value (`conflicts`): concurrent edits, kept as conflict copies. A tombstone wins
    /// over every older version; a concurrent edit it beat is a conflict, so nothing is lost.
    /// Versions with one vector are one version, published again by another device (every
    /// write counts itself in its vector with a count its writer never gave before, so two
    /// writes never share one): never a conflict, and ranked where its writer put it (`order`).
    package func resolve(_ item: SyncItemID) -> SyncResolution? {
        let all = versions(of: item)
        let heads = all.filter { e in !all.contains { e.vector.isDominated(by: $0.vector) } }
        guard let winner = heads.max(by: SyncEntry.ranksBelow) else { return nil }
        var distinct: [VersionVector: SyncEntry] = [:]
        for h in heads where !h.isTombstone && h.vector != winner.vector {
            if let seen = distinct[h.vector], SyncEntry.ranksBelow(h, seen) { continue }
            distinct[h.vector] = h
        }
        let conflicts = distinct.values.sorted(by: SyncEntry.ranksBelow)
        return SyncResolution(winner: winner, conflicts: conflicts, heads: heads)
    }
}

package struct SyncResolution: Hashable, Sendable {
    package var winner: SyncEntry
    package var conflicts: [SyncEntry]
    package var heads: [SyncEntry]
}
