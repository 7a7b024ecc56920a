import Glibc
import COpenSSL
import Synchronization

/// Bytes of key material or plaintext secret in locked memory (`LockedMemory`): never in swap
/// while the kernel lets the process lock pages, never in a core dump, wiped with
/// OPENSSL_cleanse on shrink, on move and on free. Small buffers share locked slabs; large
/// ones have pages of their own.
///
/// Not thread-safe on its own; owners guard shared instances with their own lock.
/// @unchecked Sendable because owners that share an instance guard it with their own lock.
public final class SecureBytes: @unchecked Sendable {
    private var block: LockedBlock?
    /// How many bytes are held; the pages behind them may be more.
    public private(set) var count: Int = 0

    /// True while no buffer of this process has failed to be locked.
    public static var allLocked: Bool { LockedMemory.shared.usage.refusals == 0 }

    /// `count` zero bytes in locked memory.
    public init(count: Int = 0) {
        if count > 0 { block = LockedMemory.shared.allocate(count) }
        self.count = count
    }

    /// Copies `bytes` into locked memory; the caller still owns (and should wipe) the original.
    public convenience init<C: Collection>(copying bytes: C) where C.Element == UInt8 {
        self.init(count: bytes.count)
        withUnsafeMutableBytes { dst in dst.copyBytes(from: bytes) }
    }

    /// Copies `raw` into locked memory without an intermediate array.
    public convenience init(copying raw: UnsafeRawBufferPointer) {
        self.init(count: raw.count)
        if raw.count > 0 { block!.base.copyMemory(from: raw.baseAddress!, byteCount: raw.count) }
    }

    deinit { release() }

    /// False when the kernel refused to lock these bytes' pages (RLIMIT_MEMLOCK); they are
    /// still wiped, and `LockedMemory.shared.usage` counts them.
    public var isLocked: Bool { block.map { LockedMemory.shared.isLocked($0) } ?? true }

    /// Bytes of locked memory this buffer takes (its slot or its pages).
    package var footprint: Int { block?.capacity ?? 0 }

    /// Grows or shrinks to `newCount` bytes; new bytes are zero, dropped bytes are wiped.
    public func resize(to newCount: Int) {
        let capacity = block?.capacity ?? 0
        if newCount > capacity {
            // Doubling keeps a buffer that grows by many small writes linear in cost.
            let grown = LockedMemory.shared.allocate(max(newCount, capacity * 2))
            if let old = block {
                grown.base.copyMemory(from: old.base, byteCount: count)
                LockedMemory.shared.free(old, used: count)
            }
            block = grown
        } else if newCount < count {
            OPENSSL_cleanse(block!.base + newCount, count - newCount)
        }
        count = newCount
    }

    /// Adds `bytes` at the end, growing as `resize` does.
    public func append(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty else { return }
        let start = count
        resize(to: start + bytes.count)
        (block!.base + start).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
    }

    /// Wipes the bytes now and leaves an empty buffer.
    public func wipe() {
        release()
        count = 0
    }

    /// The bytes, valid only inside `body`: never let the pointer or an unlocked copy escape.
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: block?.base, count: count))
    }

    /// The bytes to write in place, valid only inside `body`.
    public func withUnsafeMutableBytes<R>(_ body: (UnsafeMutableRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeMutableRawBufferPointer(start: block?.base, count: count))
    }

    /// A second locked buffer with the same bytes, wiped independently of this one.
    public func copy() -> SecureBytes { withUnsafeBytes { SecureBytes(copying: $0) } }

    /// Constant-time comparison.
    public func isEqual(to other: SecureBytes) -> Bool {
        guard count == other.count else { return false }
        return withUnsafeBytes { a in other.withUnsafeBytes { b in
            count == 0 || CRYPTO_memcmp(a.baseAddress, b.baseAddress, count) == 0
        } }
    }

    /// Bytes for APIs that need an array; only for values that are not secret.
    public var unprotectedArray: [UInt8] { withUnsafeBytes { Array($0) } }

    private func release() {
        guard let old = block else { return }
        block = nil
        LockedMemory.shared.free(old, used: count)
    }
}
