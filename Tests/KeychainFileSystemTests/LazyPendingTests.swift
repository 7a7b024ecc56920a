import Foundation
import XCTest
@testable import KeychainFileSystem
import KeychainCrypto
import KeychainModel
import KeychainStore

/// Pending creates (a new file in the index only, until its one commit) in the lazy index,
/// which reads the store as names are looked up and drops what was used least.
final class LazyPendingTests: XCTestCase {
    var dir: String!
    var keychain: Keychain!

    override func setUpWithError() throws {
        (dir, keychain) = try makeTemporaryKeychain("kcfs-lazypending", passphrase: SecureBytes(copying: Array("pw".utf8)))
    }

    override func tearDownWithError() throws { try? FileManager.default.removeItem(atPath: dir) }

    func key(_ service: String, _ account: String) throws -> ItemKey {
        .generic(try GenericPasswordKey(service: service, account: account))
    }

    func fill(_ service: String, count: Int) throws {
        for i in 0..<count {
            try keychain.add(ItemRecord(key: try key(service, "a\(i)"), attributes: ItemAttributes()),
                             secret: SecureBytes(copying: Array("secret-\(i)".utf8)))
        }
    }

    func write(_ tree: KeychainTree, _ h: UInt64, _ text: String) throws {
        _ = try Array(text.utf8).withUnsafeBytes { try tree.write(h, offset: 0, data: $0) }
    }

    func pending(_ served: ServedKeychain) -> [KeychainItem] {
        served.state.withLock { $0.index.items.values.filter(\.isPending) }
    }

    /// A service read whole after the create (its first `ls`) keeps the pending file: the
    /// store does not have it yet, but it is in that directory.
    func testAGroupReadAfterACreateKeepsThePendingFile() throws {
        try fill("svc", count: 3)
        let tree = try KeychainTree(keychain: keychain)
        let h = try tree.create("/svc/new", flags: O_WRONLY)
        XCTAssertEqual(pending(tree.served).count, 1)
        XCTAssertEqual(try tree.list("/svc").map(\.name), ["a0", "a1", "a2", "new"])
        XCTAssertEqual(try tree.stat("/svc/new").size, 0)
        XCTAssertEqual(try tree.list("/").map(\.name), ["internet", "svc"])
        try write(tree, h, "v")
        let before = keychain.commitCount
        try tree.release(h)
        XCTAssertEqual(keychain.commitCount - before, 1, "still one commit per create")
        XCTAssertTrue(pending(tree.served).isEmpty)
        XCTAssertEqual(try tree.get("/svc/new"), "v")
        XCTAssertEqual(try tree.list("/svc").map(\.name), ["a0", "a1", "a2", "new"])
    }

    /// An internet path directory's pending entry survives the server's group read.
    func testAServerReadAfterACreateKeepsThePendingFile() throws {
        try keychain.add(ItemRecord(key: .internet(try InternetPasswordKey(server: "h.example", port: 443, path: "/", protocol: .https,
                                                                          account: "old")),
                                    attributes: ItemAttributes()), secret: SecureBytes(copying: [1]))
        let tree = try KeychainTree(keychain: keychain)
        let names = try tree.list("/internet/h.example/443").map(\.name)
        XCTAssertEqual(names.count, 1)
        let h = try tree.create("/internet/h.example/443/fresh", flags: O_WRONLY)
        tree.served.state.withLock { $0.index.forgetCompleteness() }
        XCTAssertEqual(try tree.list("/internet/h.example/443").count, 2, "the group read again keeps the pending entry")
        try tree.release(h)
        XCTAssertEqual(try tree.list("/internet/h.example/443").count, 2)
    }

    /// A small index full of other items: the pending file stays however many are read.
    func testAPendingItemIsNeverEvicted() throws {
        try fill("svc", count: 40)
        let served = try ServedKeychain(keychain: keychain, indexLimit: 4)
        let tree = KeychainTree(served: served)
        let h = try tree.create("/svc/new", flags: O_WRONLY)
        for i in 0..<40 { XCTAssertEqual(try tree.get("/svc/a\(i)"), "secret-\(i)") }
        XCTAssertEqual(pending(served).map(\.key.account), ["new"])
        XCTAssertEqual(try tree.list("/svc").count, 41)
        try write(tree, h, "kept")
        try tree.release(h)
        XCTAssertEqual(try tree.get("/svc/new"), "kept")
    }

    /// Eviction alone, with no open file to pin the pending item: it is still not dropped.
    func testEvictionPassesOverPendingItemsEvenUnpinned() throws {
        var index = ItemIndex()
        index.makeService("svc")
        let p = KeychainItem(pending: ItemRecord(key: try key("svc", "p"), attributes: ItemAttributes()), id: -1)
        index.insert(p)
        try fill("svc", count: 6)
        for item in try keychain.items(matching: ItemQuery(kind: .generic)) { index.install(item) }
        index.evict(limit: 2, pinned: [])
        XCTAssertNotNil(index.item(-1))
        XCTAssertEqual(index.services["svc"]?.accounts["p"], -1)
    }

    /// Every change of a pending item counts in the generation, so that a fill read before
    /// it is not installed over it.
    func testPendingChangesCountInTheGeneration() throws {
        try fill("svc", count: 1)
        let tree = try KeychainTree(keychain: keychain)
        _ = try tree.list("/svc")
        func generation() -> UInt64 { tree.served.state.withLock { $0.generation } }
        var g = generation()
        let h = try tree.create("/svc/tmp", flags: O_WRONLY)
        XCTAssertGreaterThan(generation(), g, "create"); g = generation()
        try tree.rename("/svc/tmp", to: "/svc/final", noReplace: false, exchange: false)
        XCTAssertGreaterThan(generation(), g, "rename"); g = generation()
        try tree.setAttribute("/svc/final", name: "user.keychain.label", value: Array("l".utf8))
        XCTAssertGreaterThan(generation(), g, "attribute"); g = generation()
        try write(tree, h, "x")
        try tree.release(h)
        XCTAssertGreaterThan(generation(), g, "first commit")
        XCTAssertEqual(try keychain.item(for: try key("svc", "final"))?.record.attributes.label, "l")
    }
}
