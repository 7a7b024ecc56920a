import COpenSSL
// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif
import Synchronization

/// How pages are locked in RAM; tests replace it to play a kernel that refuses.
package protocol PageLocking: Sendable {
    /// True when the pages are now locked (mlock).
    func lock(_ address: UnsafeMutableRawPointer, _ size: Int) -> Bool
    func unlock(_ address: UnsafeMutableRawPointer, _ size: Int)
}

/// The kernel's mlock, which RLIMIT_MEMLOCK bounds for a process without CAP_IPC_LOCK.
package struct KernelPageLocking: PageLocking {
    package init() {}
    package func lock(_ address: UnsafeMutableRawPointer, _ size: Int) -> Bool { mlock(address, size) == 0 }
    package func unlock(_ address: UnsafeMutableRawPointer, _ size: Int) { munlock(address, size) }
}

/// How much locked memory the keys and secrets of this process take.
package struct LockedMemoryUsage: Sendable, Equatable {
    /// Bytes of pages locked in RAM.
    package var lockedBytes = 0
    /// Bytes of pages holding keys or secrets that the kernel refused to lock: they may be swapped.
    package var unlockedBytes = 0
    /// Times the kernel refused to lock pages, since the process started.
    package var refusals = 0
    /// Bytes handed out (slots and mappings in use).
    package var inUseBytes = 0
    /// Slabs of small blocks, and mappings of their own for large blocks.
    package var slabs = 0
    package var mappings = 0

    package var isExhausted: Bool { unlockedBytes > 0 }
}

/// A block of memory from `LockedMemory`. Its bytes past what its owner uses are zero.
// @unchecked Sendable because it is a pointer owned by one SecureBytes at a time.
package struct LockedBlock: @unchecked Sendable {
    package let base: UnsafeMutableRawPointer
    package let capacity: Int
    fileprivate let origin: Origin

    fileprivate enum Origin {
        /// A slot of a shared slab.
        case slot(LockedMemory.Slab, index: Int)
        /// Pages of its own: mmap'ed, or from the heap when mmap failed.
        case pages(Region)
    }
}

/// Pages obtained for a slab or a large block, and whether they are locked.
// @unchecked Sendable because its fields are constants or mutated only under `LockedMemory.state`.
fileprivate final class Region: @unchecked Sendable {
    let base: UnsafeMutableRawPointer
    let size: Int
    /// From posix_memalign, because mmap failed (vm.max_map_count, say).
    let fromHeap: Bool
    /// Mutated only under `LockedMemory.state`.
    var locked = false

    init(base: UnsafeMutableRawPointer, size: Int, fromHeap: Bool) {
        self.base = base
        self.size = size
        self.fromHeap = fromHeap
    }
}

/// Where `SecureBytes` keep their bytes: pages locked in RAM and left out of core dumps.
///
/// Blocks of up to `largestSlot` bytes are slots of shared slabs (`slabBytes` each, one size
/// class per slab), so a small key or secret costs its slot, not a locked page and a kernel
/// mapping of its own: a hundred thousand cached secrets take a few hundred mappings, far below
/// vm.max_map_count. Larger blocks get pages of their own. Every block is wiped when freed.
///
/// When the kernel refuses to lock more (RLIMIT_MEMLOCK), memory is still handed out, unlocked,
/// and counted in `usage`; `setExhaustionHandler` hears when that starts and ends. Locked pages
/// that are given back let unlocked slabs be locked again, so the state mends once use falls.
package final class LockedMemory: Sendable {
    package static let shared = LockedMemory()
    package static let slabBytes = 16 * 1024
    package static let slotSizes = [16, 32, 64, 128, 256, 512, 1024, 2048]
    package static var largestSlot: Int { slotSizes[slotSizes.count - 1] }
    static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

    private let locking: any PageLocking
    private let state = Mutex(State())
    private let exhausted = Atomic<Bool>(false)
    /// In a struct, not bare: see `ExhaustionHandler`.
    private let exhaustionHandler = Mutex<ExhaustionHandler?>(nil)

    /// A bare closure kept in a `Mutex` and read with `withLock { $0 }` is wrapped in one more
    /// reabstraction thunk at every read (Swift 6.3: the generic `inout`'s write-back is
    /// stored); inside a struct it keeps its own representation.
    private struct ExhaustionHandler: Sendable {
        let run: @Sendable (Bool, LockedMemoryUsage) -> Void
    }

    /// A slab of equal slots. Mutated only under `LockedMemory.state`.
    // @unchecked Sendable because it is mutated only under `LockedMemory.state`.
    final class Slab: @unchecked Sendable {
        fileprivate let region: Region
        let slotSize: Int
        let sizeClass: Int
        let slotCount: Int
        /// One bit per slot, set when the slot is free.
        var free: [UInt64]
        var used = 0
        /// Position in its class's list of slabs with free slots, if it is in one.
        var listIndex: Int?

        fileprivate init(region: Region, sizeClass: Int) {
            self.region = region
            self.sizeClass = sizeClass
            slotSize = LockedMemory.slotSizes[sizeClass]
            slotCount = region.size / slotSize
            free = [UInt64](repeating: 0, count: (slotCount + 63) / 64)
            for i in 0..<slotCount { free[i / 64] |= 1 << UInt64(i % 64) }
        }

        func takeSlot() -> Int {
            for (w, word) in free.enumerated() where word != 0 {
                let bit = word.trailingZeroBitCount
                free[w] &= ~(1 << UInt64(bit))
                used += 1
                return w * 64 + bit
            }
            preconditionFailure("a full slab was on a list of slabs with free slots")
        }

        func returnSlot(_ i: Int) {
            free[i / 64] |= 1 << UInt64(i % 64)
            used -= 1
        }

        var isFull: Bool { used == slotCount }
    }

    /// Slabs with free slots, removable in O(1).
    struct SlabList {
        var slabs: [Slab] = []

        mutating func insert(_ s: Slab) {
            s.listIndex = slabs.count
            slabs.append(s)
        }

        mutating func remove(_ s: Slab) {
            guard let i = s.listIndex else { return }
            let last = slabs.removeLast()
            if last !== s {
                slabs[i] = last
                last.listIndex = i
            }
            s.listIndex = nil
        }
    }

    struct SizeClass {
        /// Locked slabs are used first, so that unlocked ones empty and go.
        var lockedWithRoom = SlabList()
        var unlockedWithRoom = SlabList()
    }

    struct State {
        var classes = [SizeClass](repeating: SizeClass(), count: LockedMemory.slotSizes.count)
        /// Unlocked slabs, full or not, to lock when locked pages are given back.
        var unlockedSlabs: [ObjectIdentifier: Slab] = [:]
        var usage = LockedMemoryUsage()
    }

    package init(locking: any PageLocking = KernelPageLocking()) {
        self.locking = locking
    }

    // MARK: reporting

    package var usage: LockedMemoryUsage { state.withLock { $0.usage } }

    /// True while some keys or secrets sit in pages the kernel would not lock.
    package var isExhausted: Bool { exhausted.load(ordering: .relaxed) }

    /// Called (outside any lock of this allocator) with `true` when the kernel first refuses
    /// to lock pages that hold keys or secrets, and with `false` once none is left unlocked.
    /// A handler set while memory is already exhausted hears of it at once: the refusal may
    /// have come before anyone listened (the daemon allocates before it installs its handler).
    package func setExhaustionHandler(_ handler: (@Sendable (Bool, LockedMemoryUsage) -> Void)?) {
        exhaustionHandler.withLock { $0 = handler.map(ExhaustionHandler.init) }
        if isExhausted { handler?(true, usage) }
    }

    /// RLIMIT_MEMLOCK as it binds this process: nil when unlimited or when it may lock
    /// without limit (CAP_IPC_LOCK, as root has).
    package static var processLimit: Int? {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(__RLIMIT_MEMLOCK.rawValue), &limit) == 0, limit.rlim_cur != rlim_t.max else { return nil }
        if hasIPCLockCapability { return nil }
        return Int(clamping: limit.rlim_cur)
    }

    private static var hasIPCLockCapability: Bool {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("CapEff:") }),
              let mask = UInt64(String(line.dropFirst("CapEff:".count).filter { $0 != " " && $0 != "\t" }), radix: 16)
        else { return false }
        let capIPCLock: UInt64 = 14
        return mask & (1 << capIPCLock) != 0
    }

    // MARK: allocating

    /// A zeroed block of at least `count` bytes (`count` > 0).
    package func allocate(_ count: Int) -> LockedBlock {
        precondition(count > 0)
        var change: Bool?
        let block: LockedBlock = state.withLock { s in
            defer { change = noteExhaustion(s.usage) }
            if let c = Self.slotSizes.firstIndex(where: { $0 >= count }) {
                return allocateSlot(sizeClass: c, &s)
            }
            let region = obtainRegion(size: (count + Self.pageSize - 1) / Self.pageSize * Self.pageSize, &s)
            s.usage.mappings += 1
            s.usage.inUseBytes += region.size
            return LockedBlock(base: region.base, capacity: region.size, origin: .pages(region))
        }
        if let change { report(change) }
        return block
    }

    /// Wipes the block's first `used` bytes (the rest is zero already) and frees it.
    package func free(_ block: LockedBlock, used: Int) {
        OPENSSL_cleanse(block.base, min(used, block.capacity))
        var change: Bool?
        state.withLock { s in
            switch block.origin {
            case .slot(let slab, let index):
                freeSlot(slab, index, &s)
            case .pages(let region):
                s.usage.mappings -= 1
                s.usage.inUseBytes -= region.size
                let wasLocked = region.locked
                release(region, &s)
                if wasLocked { relock(&s) }
            }
            change = noteExhaustion(s.usage)
        }
        if let change { report(change) }
    }

    /// Whether the block's pages are locked now.
    package func isLocked(_ block: LockedBlock) -> Bool {
        state.withLock { _ in
            switch block.origin {
            case .slot(let slab, _): slab.region.locked
            case .pages(let region): region.locked
            }
        }
    }

    private func allocateSlot(sizeClass c: Int, _ s: inout State) -> LockedBlock {
        let slab: Slab
        if let locked = s.classes[c].lockedWithRoom.slabs.last {
            slab = locked
        } else if let unlocked = s.classes[c].unlockedWithRoom.slabs.last {
            slab = unlocked
        } else {
            slab = Slab(region: obtainRegion(size: Self.slabBytes, &s), sizeClass: c)
            s.usage.slabs += 1
            if slab.region.locked {
                s.classes[c].lockedWithRoom.insert(slab)
            } else {
                s.classes[c].unlockedWithRoom.insert(slab)
                s.unlockedSlabs[ObjectIdentifier(slab)] = slab
            }
        }
        let index = slab.takeSlot()
        if slab.isFull { list(of: slab, &s) { $0.remove(slab) } }
        s.usage.inUseBytes += slab.slotSize
        return LockedBlock(base: slab.region.base + index * slab.slotSize, capacity: slab.slotSize,
                           origin: .slot(slab, index: index))
    }

    private func freeSlot(_ slab: Slab, _ index: Int, _ s: inout State) {
        let wasFull = slab.isFull
        slab.returnSlot(index)
        s.usage.inUseBytes -= slab.slotSize
        if wasFull { list(of: slab, &s) { $0.insert(slab) } }
        guard slab.used == 0 else { return }
        // An empty slab stays if it is its class's only locked one with room, so that one key
        // made and dropped over and over does not map and unmap a slab each time; unless
        // unlocked slabs wait for its locked pages.
        let c = slab.sizeClass
        if slab.region.locked && s.classes[c].lockedWithRoom.slabs.count == 1 && s.unlockedSlabs.isEmpty { return }
        list(of: slab, &s) { $0.remove(slab) }
        s.unlockedSlabs[ObjectIdentifier(slab)] = nil
        s.usage.slabs -= 1
        let wasLocked = slab.region.locked
        release(slab.region, &s)
        if wasLocked { relock(&s) }
    }

    private func list(of slab: Slab, _ s: inout State, _ body: (inout SlabList) -> Void) {
        if slab.region.locked { body(&s.classes[slab.sizeClass].lockedWithRoom) }
        else { body(&s.classes[slab.sizeClass].unlockedWithRoom) }
    }

    /// Zeroed pages, locked if the kernel lets us, never in a core dump. mmap first; the heap
    /// when the kernel has no mapping left to give (vm.max_map_count), so that running out of
    /// mappings costs locking, not the process.
    private func obtainRegion(size: Int, _ s: inout State) -> Region {
        let region: Region
        let p = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        if let p, p != MAP_FAILED {
            region = Region(base: p, size: size, fromHeap: false)
        } else {
            var heap: UnsafeMutableRawPointer?
            guard posix_memalign(&heap, Self.pageSize, size) == 0, let heap else {
                fatalError("out of memory for \(size) bytes of keys or secrets")
            }
            memset(heap, 0, size)
            region = Region(base: heap, size: size, fromHeap: true)
        }
        _ = madvise(region.base, size, MADV_DONTDUMP)
        region.locked = locking.lock(region.base, size)
        if region.locked {
            s.usage.lockedBytes += size
        } else {
            s.usage.unlockedBytes += size
            s.usage.refusals += 1
        }
        return region
    }

    private func release(_ region: Region, _ s: inout State) {
        if region.locked {
            locking.unlock(region.base, region.size)
            s.usage.lockedBytes -= region.size
        } else {
            s.usage.unlockedBytes -= region.size
        }
        if region.fromHeap {
            _ = madvise(region.base, region.size, MADV_DODUMP)
            Glibc.free(region.base)
        } else {
            munmap(region.base, region.size)
        }
    }

    /// Locks unlocked slabs while the kernel lets us, now that locked pages were given back.
    private func relock(_ s: inout State) {
        for (id, slab) in s.unlockedSlabs {
            guard locking.lock(slab.region.base, slab.region.size) else { return }
            let hadRoom = slab.listIndex != nil
            if hadRoom { s.classes[slab.sizeClass].unlockedWithRoom.remove(slab) }
            slab.region.locked = true
            if hadRoom { s.classes[slab.sizeClass].lockedWithRoom.insert(slab) }
            s.unlockedSlabs[id] = nil
            s.usage.unlockedBytes -= slab.region.size
            s.usage.lockedBytes += slab.region.size
        }
    }

    /// The new exhaustion state if it changed.
    private func noteExhaustion(_ usage: LockedMemoryUsage) -> Bool? {
        let now = usage.isExhausted
        return exhausted.exchange(now, ordering: .relaxed) != now ? now : nil
    }

    private func report(_ isExhausted: Bool) {
        exhaustionHandler.withLock { $0 }?.run(isExhausted, usage)
    }
}
