import Foundation
import KeychainCrypto

/// Seals rows on a helper thread while the caller writes them, in order. When the next row is
/// not sealed yet, the caller seals one from the far end instead of waiting: the writes
/// (SQLite, one connection) cannot be shared, the sealing can, so both cores stay busy.
///
/// @unchecked Sendable because every mutable field is guarded by `condition`.
final class SealingPipeline<Row: Sendable, Sealed: Sendable>: @unchecked Sendable {
    typealias Seal = @Sendable (Row, SealScratch) throws -> Sealed

    private let rows: [Row]
    private let seal: Seal
    private let indexKey: SecureBytes
    private let condition = NSCondition()
    /// The helper claims rows from the front, the caller from the back, until they meet.
    private var front = 0
    private var back: Int
    private var sealed: [Sealed?]
    private var failure: (any Error)?
    private var stopped = false

    private init(rows: [Row], indexKey: SecureBytes, seal: @escaping Seal) {
        self.rows = rows
        self.seal = seal
        self.indexKey = indexKey
        back = rows.count - 1
        sealed = Array(repeating: nil, count: rows.count)
    }

    /// Calls `write` with every row's sealed form, in the order of `rows`. The first error,
    /// from `seal` or `write`, stops both threads and is rethrown once the helper has stopped.
    /// `indexKey` keys each thread's MAC (`SealScratch`).
    static func run(_ rows: [Row], indexKey: SecureBytes, seal: @escaping Seal, write: (Int, Sealed) throws -> Void) throws {
        let scratch = try SealScratch(indexKey: indexKey)
        guard rows.count >= 64 else {
            for (i, row) in rows.enumerated() { try write(i, try seal(row, scratch)) }
            return
        }
        let pipeline = SealingPipeline(rows: rows, indexKey: indexKey, seal: seal)
        let helperDone = DispatchSemaphore(value: 0)
        let helper = Thread {
            pipeline.sealFromTheFront()
            helperDone.signal()
        }
        helper.name = "keychainfs-sealing"
        helper.start()
        defer {
            pipeline.stop()
            helperDone.wait()
        }
        for i in rows.indices { try write(i, try pipeline.take(i, scratch: scratch)) }
    }

    private func sealFromTheFront() {
        let scratch: SealScratch
        do { scratch = try SealScratch(indexKey: indexKey) } catch { return store(0, .failure(error)) }  // a failure stops both threads
        while true {
            condition.lock()
            guard !stopped, failure == nil, front <= back else {
                condition.unlock()
                return
            }
            let i = front
            front += 1
            condition.unlock()
            store(i, Result { try seal(rows[i], scratch) })
        }
    }

    /// Row `i` sealed, sealing rows from the back meanwhile rather than waiting.
    private func take(_ i: Int, scratch: SealScratch) throws -> Sealed {
        condition.lock()
        defer { condition.unlock() }
        while true {
            if let failure { throw failure }
            if let s = sealed[i] {
                sealed[i] = nil
                return s
            }
            if front <= back {
                let j = back
                back -= 1
                condition.unlock()
                let r = Result { try seal(rows[j], scratch) }
                condition.lock()
                record(j, r)
            } else {
                condition.wait()
            }
        }
    }

    private func store(_ i: Int, _ r: Result<Sealed, any Error>) {
        condition.lock()
        record(i, r)
        condition.unlock()
    }

    /// Called with `condition` locked.
    private func record(_ i: Int, _ r: Result<Sealed, any Error>) {
        switch r {
        case .success(let s): sealed[i] = s
        case .failure(let e): if failure == nil { failure = e }
        }
        condition.broadcast()
    }

    private func stop() {
        condition.lock()
        stopped = true
        condition.broadcast()
        condition.unlock()
    }
}

/// What each sealing thread keeps for itself: the buffer the fresh item key goes in (one
/// locked mapping, not one per item), and a MAC under the index key for the blind indexes
/// and attribute tags: the one-shot HMAC looks its algorithms up by name at every call,
/// which at four per item was a tenth of an import's time.
final class SealScratch {
    let itemKey = SecureBytes(count: AESGCM.keyBytes)
    let mac: HMACSHA256.Keyed

    init(indexKey: SecureBytes) throws { mac = try HMACSHA256.Keyed(key: indexKey) }
}
