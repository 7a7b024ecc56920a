import Foundation
import COpenSSL
import Synchronization

/// Bytes of key material or plaintext secret, in their own mlock'ed pages that never reach
/// swap or a core dump, wiped with OPENSSL_cleanse on resize and on free.
///
/// Not thread-safe on its own; owners guard shared instances with their own lock.
public final class SecureBytes: @unchecked Sendable {
    private var base: UnsafeMutableRawPointer?
    private var mapped: Int = 0
    public private(set) var count: Int = 0
    /// False when the pages could not be locked (RLIMIT_MEMLOCK); they are still wiped.
    public private(set) var isLocked = true

    private static let lockFailures = Atomic<Int>(0)
    /// True while no buffer of this process has failed to be locked.
    public static var allLocked: Bool { lockFailures.load(ordering: .relaxed) == 0 }

    public init(count: Int = 0) {
        reserve(count)
        self.count = count
    }

    public convenience init<C: Collection>(copying bytes: C) where C.Element == UInt8 {
        self.init(count: bytes.count)
        withUnsafeMutableBytes { dst in dst.copyBytes(from: bytes) }
    }

    public convenience init(copying raw: UnsafeRawBufferPointer) {
        self.init(count: raw.count)
        if raw.count > 0 { base!.copyMemory(from: raw.baseAddress!, byteCount: raw.count) }
    }

    deinit { release() }

    /// Grows or shrinks to `newCount` bytes; new bytes are zero, dropped bytes are wiped.
    public func resize(to newCount: Int) {
        if newCount > mapped {
            let oldBase = base, oldMapped = mapped, oldCount = count
            base = nil; mapped = 0
            reserve(max(newCount, oldMapped * 2))
            if let oldBase {
                base!.copyMemory(from: oldBase, byteCount: oldCount)
                OPENSSL_cleanse(oldBase, oldMapped)
                munlock(oldBase, oldMapped)
                munmap(oldBase, oldMapped)
            }
        } else if newCount < count {
            OPENSSL_cleanse(base! + newCount, count - newCount)
        }
        count = newCount
    }

    /// Wipes the bytes now and leaves an empty buffer.
    public func wipe() {
        release()
        count = 0
    }

    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: base, count: count))
    }

    public func withUnsafeMutableBytes<R>(_ body: (UnsafeMutableRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeMutableRawBufferPointer(start: base, count: count))
    }

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

    private func reserve(_ n: Int) {
        guard n > 0 else { return }
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let size = (n + page - 1) / page * page
        let p = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        guard let p, p != MAP_FAILED else { fatalError("out of memory for \(n) secure bytes") }
        isLocked = mlock(p, size) == 0
        if !isLocked { Self.lockFailures.add(1, ordering: .relaxed) }
        _ = madvise(p, size, MADV_DONTDUMP)
        base = p
        mapped = size
    }

    private func release() {
        guard let base else { return }
        OPENSSL_cleanse(base, mapped)
        munlock(base, mapped)
        munmap(base, mapped)
        self.base = nil
        mapped = 0
    }
}
