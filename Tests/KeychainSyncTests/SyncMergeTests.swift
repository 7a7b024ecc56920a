import XCTest
@testable import KeychainSync

/// A small seeded generator (SplitMix64), so that a failure names a seed that reproduces it.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E3779B97F4A7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58476D1CE4E5B9
        z = (z ^ (z >> 27)) &* 0x94D049BB133111EB
        return z ^ (z >> 31)
    }
}

/// One simulated device: what it has merged, and its Lamport clock.
struct SimulatedDevice {
    let id: DeviceID
    var state = SyncState()
    var clock: UInt64 = 0
    var seq: UInt64 = 0

    /// An edit (or a delete) of `item`: a version after every version of it this device knows.
    mutating func write(_ item: SyncItemID, tombstone: Bool, value: Int) -> SyncEntry {
        let known = state.versions(of: item).map(\.vector)
        clock = max(clock, state.entries.values.flatMap(\.values).map(\.version.lamport).max() ?? 0) + 1
        seq += 1
        let e = SyncEntry(item: item, version: SyncVersion(lamport: clock, device: id),
                          vector: VersionVector.next(after: known, by: id), isTombstone: tombstone,
                          deletedAt: tombstone ? 0 : nil, writtenSeq: seq, fileDigest: String(value))
        state.insert(e)
        return e
    }

    /// What another device published: its own versions (each device writes only its own directory).
    func published() -> SyncState {
        var s = SyncState()
        for e in state.entries[id]?.values.map({ $0 }) ?? [] { s.insert(e) }
        return s
    }
}

final class SyncMergeTests: XCTestCase {
    static let devices = (0..<3).map { i in try! DeviceID(hex: String(repeating: String(i + 1), count: 32)) }
    static let items = (0..<4).map { i in try! SyncItemID(hex: String(repeating: String(i + 1), count: 64)) }

    /// Random states made by random edits on random devices, with random partial merges between.
    func randomStates(_ rng: inout SeededGenerator, count: Int) -> ([SyncState], [SyncEntry]) {
        var devices = Self.devices.map { SimulatedDevice(id: $0) }
        var written: [SyncEntry] = []
        var snapshots: [SyncState] = []
        for step in 0..<40 {
            let d = Int.random(in: 0..<devices.count, using: &rng)
            switch Int.random(in: 0..<10, using: &rng) {
            case 0..<5:
                written.append(devices[d].write(Self.items.randomElement(using: &rng)!, tombstone: false, value: step))
            case 5:
                written.append(devices[d].write(Self.items.randomElement(using: &rng)!, tombstone: true, value: step))
            default:
                let from = Int.random(in: 0..<devices.count, using: &rng)
                devices[d].state = devices[d].state.merged(devices[from].published())
            }
            if Int.random(in: 0..<4, using: &rng) == 0 { snapshots.append(devices[d].state) }
        }
        snapshots += devices.map(\.state)
        return (Array(snapshots.shuffled(using: &rng).prefix(count)), written)
    }

    func testMergeIsCommutativeAssociativeAndIdempotent() {
        for seed in UInt64(1)...300 {
            var rng = SeededGenerator(seed: seed)
            let (s, _) = randomStates(&rng, count: 3)
            guard s.count == 3 else { continue }
            let (a, b, c) = (s[0], s[1], s[2])
            XCTAssertEqual(a.merged(b), b.merged(a), "commutative, seed \(seed)")
            XCTAssertEqual(a.merged(b).merged(c), a.merged(b.merged(c)), "associative, seed \(seed)")
            XCTAssertEqual(a.merged(a), a, "idempotent, seed \(seed)")
            XCTAssertEqual(a.merged(b).merged(b), a.merged(b), "idempotent after a merge, seed \(seed)")
        }
    }

    /// Three devices edit and delete while versions reach each other in random orders; once
    /// every device has merged every other's directory, in any order, they agree on every item.
    func testThreeDevicesConvergeWhateverTheArrivalOrder() {
        for seed in UInt64(1)...300 {
            var rng = SeededGenerator(seed: seed)
            var devices = Self.devices.map { SimulatedDevice(id: $0) }
            var written: [SyncEntry] = []
            for step in 0..<60 {
                let d = Int.random(in: 0..<3, using: &rng)
                switch Int.random(in: 0..<10, using: &rng) {
                case 0..<4: written.append(devices[d].write(Self.items.randomElement(using: &rng)!, tombstone: false, value: step))
                case 4: written.append(devices[d].write(Self.items.randomElement(using: &rng)!, tombstone: true, value: step))
                default:
                    let from = Int.random(in: 0..<3, using: &rng)
                    devices[d].state = devices[d].state.merged(devices[from].published())
                }
            }
            // The final exchanges, in a random order of random pairs, until everyone has merged everyone.
            var pairs = (0..<3).flatMap { a in (0..<3).filter { $0 != a }.map { (a, $0) } }
            for _ in 0..<2 {
                pairs.shuffle(using: &rng)
                for (to, from) in pairs { devices[to].state = devices[to].state.merged(devices[from].published()) }
            }
            XCTAssertEqual(devices[0].state, devices[1].state, "seed \(seed)")
            XCTAssertEqual(devices[1].state, devices[2].state, "seed \(seed)")
            let items = devices[0].state.items
            for i in items {
                let r = devices.map { $0.state.resolve(i) }
                XCTAssertEqual(r[0], r[1], "seed \(seed)"); XCTAssertEqual(r[1], r[2], "seed \(seed)")
            }
            // No version is lost without a conflict record: each value ever written is the winner,
            // a conflict, or was written over by a device that had merged it.
            let final = devices[0].state
            let all = final.entries.values.flatMap(\.values)
            for e in written where !e.isTombstone {
                guard let r = final.resolve(e.item) else { return XCTFail("item gone from the state, seed \(seed)") }
                let kept = r.winner == e || r.conflicts.contains(e) || all.contains { e.vector.isDominated(by: $0.vector) }
                XCTAssertTrue(kept, "version \(e.version) lost, seed \(seed)")
            }
        }
    }

    func testALaterVersionWinsWithoutConflict() {
        var a = SimulatedDevice(id: Self.devices[0]), b = SimulatedDevice(id: Self.devices[1])
        let item = Self.items[0]
        _ = a.write(item, tombstone: false, value: 1)
        b.state = b.state.merged(a.published())
        let later = b.write(item, tombstone: false, value: 2)
        let r = a.state.merged(b.published()).resolve(item)!
        XCTAssertEqual(r.winner, later)
        XCTAssertEqual(r.conflicts, [])
    }

    func testConcurrentEditsKeepTheLoserAsAConflictAndTheDeviceIdBreaksTies() {
        var a = SimulatedDevice(id: Self.devices[0]), b = SimulatedDevice(id: Self.devices[1])
        let item = Self.items[0]
        let ea = a.write(item, tombstone: false, value: 1)
        let eb = b.write(item, tombstone: false, value: 2)
        XCTAssertEqual(ea.version.lamport, eb.version.lamport, "the same Lamport counter")
        let r = a.published().merged(b.published()).resolve(item)!
        XCTAssertEqual(r.winner, eb, "the greater device id wins the tie")
        XCTAssertEqual(r.conflicts, [ea])
    }

    func testATombstoneBeatsOlderVersionsAndAConcurrentEditItBeatIsAConflict() {
        var a = SimulatedDevice(id: Self.devices[0]), b = SimulatedDevice(id: Self.devices[1])
        let item = Self.items[0]
        _ = a.write(item, tombstone: false, value: 1)
        b.state = b.state.merged(a.published())
        let gone = b.write(item, tombstone: true, value: 0)
        var r = a.state.merged(b.published()).resolve(item)!
        XCTAssertEqual(r.winner, gone)
        XCTAssertEqual(r.conflicts, [], "the deleted version was known to the deleter")
        // A concurrent edit with a lower counter loses to the tombstone but is kept.
        var c = SimulatedDevice(id: Self.devices[2])
        c.state = c.state.merged(a.published())
        c.clock = 0
        let edit = c.write(item, tombstone: false, value: 3)
        b.clock += 5
        let later = b.write(item, tombstone: true, value: 0)
        r = a.state.merged(b.published()).merged(c.published()).resolve(item)!
        XCTAssertEqual(r.winner, later)
        XCTAssertEqual(r.conflicts, [edit])
    }

    /// A version published again by another device keeps its vector: it is that version, not a
    /// concurrent edit of it; a later version of its writer follows it (a delete deletes it).
    func testAVersionPublishedAgainIsNoConflictAndItsWritersNextVersionFollowsIt() {
        var v = SimulatedDevice(id: Self.devices[0]), s = SimulatedDevice(id: Self.devices[1])
        let item = Self.items[0]
        let original = v.write(item, tombstone: false, value: 1)
        var again = original
        again.version = SyncVersion(lamport: original.version.lamport + 7, device: s.id)
        s.state.insert(again)
        var r = v.published().merged(s.published()).resolve(item)!
        XCTAssertEqual(r.winner, again, "the later Lamport counter is the winner")
        XCTAssertEqual(r.conflicts, [], "the same version twice is no conflict")
        let gone = v.write(item, tombstone: true, value: 0)
        r = v.published().merged(s.published()).resolve(item)!
        XCTAssertEqual(r.winner, gone, "the writer's delete follows the version published again")
        XCTAssertEqual(r.heads, [gone])
        XCTAssertEqual(r.conflicts, [])
    }
}
