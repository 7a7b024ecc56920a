@testable import KeychainCrypto
import Synchronization
import XCTest

/// A kernel that locks pages up to `limit` bytes, as RLIMIT_MEMLOCK makes it do.
private final class LimitedLocking: PageLocking {
    let limit: Int
    let locked = Mutex(0)

    init(limit: Int) { self.limit = limit }

    func lock(_ address: UnsafeMutableRawPointer, _ size: Int) -> Bool {
        locked.withLock { n in
            guard n + size <= limit else { return false }
            n += size
            return true
        }
    }

    func unlock(_ address: UnsafeMutableRawPointer, _ size: Int) { locked.withLock { $0 -= size } }
}

private final class Transitions: Sendable {
    let seen = Mutex<[Bool]>([])
}

final class LockedMemoryTests: XCTestCase {
    private func fill(_ b: LockedBlock, _ byte: UInt8, _ n: Int) { memset(b.base, Int32(byte), n) }

    private func bytes(_ p: UnsafeMutableRawPointer, _ n: Int) -> [UInt8] {
        Array(UnsafeRawBufferPointer(start: p, count: n))
    }

    func testSmallBlocksShareOneSlab() {
        let memory = LockedMemory(locking: LimitedLocking(limit: .max))
        let blocks = (0..<200).map { _ in memory.allocate(32) }
        XCTAssertEqual(memory.usage.slabs, 1, "200 slots of 32 bytes fit one 16 KiB slab")
        XCTAssertEqual(memory.usage.mappings, 0)
        XCTAssertEqual(memory.usage.lockedBytes, LockedMemory.slabBytes)
        XCTAssertEqual(memory.usage.inUseBytes, 200 * 32)
        XCTAssertEqual(Set(blocks.map(\.base)).count, 200, "every slot is distinct")
        let low = blocks.map { UInt(bitPattern: $0.base) }.min()!, high = blocks.map { UInt(bitPattern: $0.base) }.max()!
        XCTAssertLessThan(high - low, UInt(LockedMemory.slabBytes))
        for b in blocks { memory.free(b, used: 32) }
        XCTAssertEqual(memory.usage.inUseBytes, 0)
        XCTAssertLessThanOrEqual(memory.usage.slabs, 1, "at most one empty slab is kept per class")
    }

    func testSizeClasses() {
        let memory = LockedMemory(locking: LimitedLocking(limit: .max))
        for (asked, got) in [(1, 16), (16, 16), (17, 32), (48, 64), (2048, 2048), (2049, 4096), (10_000, 12_288)] {
            let b = memory.allocate(asked)
            XCTAssertEqual(b.capacity, got, "a block of \(asked) bytes")
            XCTAssertEqual(bytes(b.base, b.capacity), [UInt8](repeating: 0, count: b.capacity), "a new block is zero")
            memory.free(b, used: asked)
        }
        XCTAssertEqual(memory.usage.mappings, 0, "large blocks give their pages back")
    }

    func testFreeWipesTheSlot() {
        let memory = LockedMemory(locking: LimitedLocking(limit: .max))
        let keep = memory.allocate(64)  // keeps the slab mapped, so the freed slot can be read
        let b = memory.allocate(64)
        fill(b, 0xA5, 64)
        memory.free(b, used: 64)
        XCTAssertEqual(bytes(b.base, 64), [UInt8](repeating: 0, count: 64))
        let again = memory.allocate(64)
        XCTAssertEqual(again.base, b.base, "the freed slot is handed out again")
        XCTAssertEqual(bytes(again.base, 64), [UInt8](repeating: 0, count: 64))
        memory.free(again, used: 0)
        memory.free(keep, used: 0)
    }

    func testRefusedLockingIsCountedAndReported() {
        let locking = LimitedLocking(limit: LockedMemory.slabBytes)
        let memory = LockedMemory(locking: locking)
        let transitions = Transitions()
        memory.setExhaustionHandler { exhausted, _ in transitions.seen.withLock { $0.append(exhausted) } }
        let first = memory.allocate(32)
        XCTAssertTrue(memory.isLocked(first))
        XCTAssertFalse(memory.isExhausted)
        // A second size class needs a second slab, which the limit refuses.
        let second = memory.allocate(512)
        XCTAssertFalse(memory.isLocked(second))
        XCTAssertTrue(memory.isExhausted)
        XCTAssertEqual(memory.usage.unlockedBytes, LockedMemory.slabBytes)
        XCTAssertEqual(memory.usage.refusals, 1)
        // A large block is refused too, and still usable.
        let large = memory.allocate(100_000)
        fill(large, 1, 100_000)
        XCTAssertEqual(memory.usage.refusals, 2)
        memory.free(large, used: 100_000)
        XCTAssertTrue(memory.isExhausted, "the 512-byte slab is still unlocked")
        // Giving back the locked slab lets the unlocked one be locked.
        memory.free(first, used: 32)
        XCTAssertTrue(memory.isLocked(second), "freed locked pages go to the unlocked slab")
        XCTAssertFalse(memory.isExhausted)
        XCTAssertEqual(memory.usage.unlockedBytes, 0)
        memory.free(second, used: 512)
        XCTAssertEqual(transitions.seen.withLock { $0 }, [true, false])
        XCTAssertEqual(locking.locked.withLock { $0 }, memory.usage.lockedBytes, "what the kernel holds is what is counted")
    }

    func testLockedSlabsAreFilledFirst() {
        let memory = LockedMemory(locking: LimitedLocking(limit: LockedMemory.slabBytes))
        let perSlab = LockedMemory.slabBytes / 64
        var locked = (0..<perSlab).map { _ in memory.allocate(64) }
        let overflow = memory.allocate(64)
        XCTAssertFalse(memory.isLocked(overflow), "the second slab is over the limit")
        memory.free(locked.removeLast(), used: 64)
        let next = memory.allocate(64)
        XCTAssertTrue(memory.isLocked(next), "a free slot in a locked slab is used before an unlocked one")
        for b in locked + [next, overflow] { memory.free(b, used: 64) }
        XCTAssertEqual(memory.usage.unlockedBytes, 0)
    }

    func testAHundredThousandSecretsTakeAFewHundredMappings() {
        let memory = LockedMemory(locking: LimitedLocking(limit: .max))
        let before = Self.mappingCount()
        var blocks: [LockedBlock] = []
        blocks.reserveCapacity(100_000)
        for i in 0..<100_000 {
            let b = memory.allocate(48)
            withUnsafeBytes(of: i) { b.base.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
            blocks.append(b)
        }
        XCTAssertEqual(memory.usage.slabs, (100_000 + 255) / 256)
        XCTAssertLessThan(Self.mappingCount() - before, 1_000, "slabs, not a mapping per secret")
        for (i, b) in blocks.enumerated() { XCTAssertEqual(b.base.load(as: Int.self), i) }
        for b in blocks { memory.free(b, used: 48) }
        XCTAssertLessThanOrEqual(memory.usage.slabs, 1)
        XCTAssertEqual(memory.usage.inUseBytes, 0)
    }

    func testSecureBytesUseSlots() {
        let small = SecureBytes(copying: Array(repeating: UInt8(7), count: 40))
        XCTAssertEqual(small.footprint, 64)
        XCTAssertTrue(small.isLocked)
        small.resize(to: 3000)
        XCTAssertEqual(small.footprint, 4096, "past the largest slot, pages of its own")
        XCTAssertEqual(Array(small.unprotectedArray.prefix(41)), Array(repeating: 7, count: 40) + [0])
        XCTAssertEqual(SecureBytes().footprint, 0)
    }

    private static func mappingCount() -> Int {
        ((try? String(contentsOfFile: "/proc/self/maps", encoding: .utf8)) ?? "").split(separator: "\n").count
    }
}
