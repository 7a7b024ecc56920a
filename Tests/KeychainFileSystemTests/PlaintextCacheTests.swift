import XCTest
@testable import KeychainFileSystem
import KeychainCrypto
import KeychainModel
import KeychainStore

final class PlaintextCacheTests: XCTestCase {
    private func secret(_ n: Int) -> SecureBytes { SecureBytes(copying: [UInt8](repeating: 1, count: n)) }

    func testLeastRecentlyUsedGoFirst() {
        var cache = PlaintextCache(budget: 3 * 64)
        for id in 1...3 { cache.insert(secret(40), for: Int64(id)) }  // 64-byte slots
        XCTAssertEqual(cache.idsByAge, [1, 2, 3])
        XCTAssertNotNil(cache.secret(1))
        XCTAssertEqual(cache.idsByAge, [2, 3, 1], "a hit makes the secret the most recent")
        XCTAssertNotNil(cache.secret(1))
        XCTAssertEqual(cache.idsByAge, [2, 3, 1], "a hit on the most recent changes nothing")
        cache.insert(secret(40), for: 4)
        XCTAssertEqual(cache.idsByAge, [3, 1, 4], "the least recently used made room")
        XCTAssertNil(cache.secret(2))
        XCTAssertEqual(cache.bytes, 3 * 64)
        XCTAssertEqual(cache.count, 3)
    }

    func testBytesAreTheLockedMemoryTaken() {
        var cache = PlaintextCache(budget: 8192)
        cache.insert(secret(10), for: 1)
        cache.insert(secret(3000), for: 2)
        XCTAssertEqual(cache.bytes, 16 + 4096, "a slot, and a page of its own")
        cache.insert(secret(20), for: 1)
        XCTAssertEqual(cache.bytes, 32 + 4096, "replacing a secret counts only the new one")
        cache.remove(2)
        XCTAssertEqual(cache.bytes, 32)
        XCTAssertEqual(cache.idsByAge, [1])
    }

    func testASecretOverTheBudgetIsNotKept() {
        var cache = PlaintextCache(budget: 4096)
        cache.insert(secret(10), for: 1)
        cache.insert(secret(5000), for: 2)
        XCTAssertNil(cache.secret(2))
        XCTAssertNotNil(cache.secret(1), "and it does not push out what fits")
    }

    func testShrinkAndRemoveWhere() {
        var cache = PlaintextCache(budget: 1 << 20)
        for id in 1...10 { cache.insert(secret(30), for: Int64(id)) }
        cache.shrink(to: 4 * 32)
        XCTAssertEqual(cache.idsByAge, [7, 8, 9, 10])
        cache.removeAll { $0 % 2 == 0 }
        XCTAssertEqual(cache.idsByAge, [7, 9])
        cache.removeAll()
        XCTAssertEqual(cache.count, 0)
        XCTAssertEqual(cache.bytes, 0)
        XCTAssertEqual(cache.idsByAge, [])
    }

    func testBudgetFollowsTheLockLimit() {
        XCTAssertEqual(PlaintextCache.budget(forLimit: 8 << 20), 2 << 20)
        XCTAssertEqual(PlaintextCache.budget(forLimit: 1 << 20), 256 << 10)
        XCTAssertEqual(PlaintextCache.budget(forLimit: 16 << 10), 4 << 10)
        XCTAssertEqual(PlaintextCache.budget(forLimit: 1 << 30), 16 << 20, "at most 16 MiB")
        XCTAssertEqual(PlaintextCache.budget(forLimit: nil), 16 << 20)
    }

    /// Reading more items than the budget holds keeps the cache within it, and every read is right.
    func testTheServedCacheStaysWithinItsBudget() throws {
        let dir = NSTemporaryDirectory() + "kcfs-cache-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let keychain = try Keychain.create(at: dir + "/k.db", passphrase: SecureBytes(copying: Array("pw".utf8)),
                                           scrypt: ScryptParameters(logN: 10), deviceKeyPath: dir + "/device.key")
        let served = try ServedKeychain(keychain: keychain, cacheBudget: 10 * 64)
        let tree = KeychainTree(served: served)
        for i in 0..<30 {
            _ = try served.save(.generic(try GenericPasswordKey(service: "svc", account: "a\(i)")),
                                secret: SecureBytes(copying: Array("secret number \(i) of thirty, padded".utf8)),
                                changes: AttributeChanges(), updateExisting: false)
        }
        for i in 0..<30 {
            let h = try tree.open("/svc/a\(i)", flags: O_RDONLY)
            var buf = [UInt8](repeating: 0, count: 100)
            let n = try buf.withUnsafeMutableBytes { try tree.read(h, offset: 0, count: 100, into: $0.baseAddress!) }
            XCTAssertEqual(String(decoding: buf[0..<n], as: UTF8.self), "secret number \(i) of thirty, padded")
            try tree.release(h)
        }
        let usage = served.cacheUsage
        XCTAssertEqual(usage.secrets, 10)
        XCTAssertEqual(usage.bytes, 10 * 64)
        XCTAssertEqual(usage.budget, 10 * 64)
        tree.lock()
        XCTAssertEqual(served.cacheUsage.secrets, 0, "a lock drops every when-unlocked secret")
    }
}
