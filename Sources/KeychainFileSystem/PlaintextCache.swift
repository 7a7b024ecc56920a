import KeychainCrypto

/// Decrypted secrets by item id, least recently used first out, within a budget of locked
/// memory: each secret counts the slot or pages it takes (`SecureBytes.footprint`). A secret
/// dropped here is wiped once no open file shares it any more.
///
/// A value type, guarded by `ServedKeychain.state`.
struct PlaintextCache {
    private struct Entry {
        var secret: SecureBytes
        var bytes: Int
        var older: Int64?
        var newer: Int64?
    }

    /// The most locked memory the cached secrets may take.
    let budget: Int
    private var entries: [Int64: Entry] = [:]
    private var oldest: Int64?
    private var newest: Int64?
    private(set) var bytes = 0

    init(budget: Int) { self.budget = budget }

    /// A budget from the locked memory this process may take: a quarter of RLIMIT_MEMLOCK,
    /// so that keys, open files and control messages keep the rest; at most 16 MiB (also
    /// when there is no limit).
    static func budget(forLimit limit: Int?) -> Int {
        let cap = 16 << 20
        guard let limit else { return cap }
        return min(limit / 4, cap)
    }

    var count: Int { entries.count }

    /// The cached secret, now the most recently used.
    mutating func secret(_ id: Int64) -> SecureBytes? {
        guard let e = entries[id] else { return nil }
        // Read again and again, a secret is already the newest: nothing to relink.
        if newest != id {
            unlink(id, e)
            linkNewest(id)
        }
        return e.secret
    }

    /// Keeps `secret` for `id`, dropping the least recently used secrets that do not fit.
    /// A secret larger than the whole budget is not kept.
    mutating func insert(_ secret: SecureBytes, for id: Int64) {
        remove(id)
        let size = max(secret.footprint, 1)
        guard size <= budget else { return }
        while bytes + size > budget, let victim = oldest { remove(victim) }
        entries[id] = Entry(secret: secret, bytes: size, older: nil, newer: nil)
        bytes += size
        linkNewest(id)
    }

    mutating func remove(_ id: Int64) {
        guard let e = entries[id] else { return }
        unlink(id, e)
        entries[id] = nil
        bytes -= e.bytes
    }

    /// Drops the least recently used secrets until at most `target` bytes remain.
    mutating func shrink(to target: Int) {
        while bytes > target, let victim = oldest { remove(victim) }
    }

    mutating func removeAll(where drop: (Int64) -> Bool) {
        for id in Array(entries.keys) where drop(id) { remove(id) }
    }

    mutating func removeAll() {
        entries = [:]
        oldest = nil
        newest = nil
        bytes = 0
    }

    /// Ids from the least to the most recently used (for tests).
    var idsByAge: [Int64] {
        var out: [Int64] = []
        var at = oldest
        while let id = at {
            out.append(id)
            at = entries[id]?.newer
        }
        return out
    }

    private mutating func unlink(_ id: Int64, _ e: Entry) {
        if let o = e.older { entries[o]!.newer = e.newer } else { oldest = e.newer }
        if let n = e.newer { entries[n]!.older = e.older } else { newest = e.older }
        entries[id]!.older = nil
        entries[id]!.newer = nil
    }

    private mutating func linkNewest(_ id: Int64) {
        entries[id]!.older = newest
        if let n = newest { entries[n]!.newer = id } else { oldest = id }
        newest = id
    }
}
