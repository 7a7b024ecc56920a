import Foundation
import KeychainStore
import XCTest

final class ZZTimingScratch: XCTestCase {
    func testTiming() throws {
        guard ProcessInfo.processInfo.environment["KCFS_TIMING"] != nil else { return }
        let base = ProcessInfo.processInfo.environment["KCFS_TIMING_DIR"] ?? NSTemporaryDirectory()
        let dir = base + "/kcfs-timing-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let k = try Keychain.create(at: dir + "/k.db", passphrase: secure("p"), scrypt: ScryptParameters(logN: 10), deviceKeyPath: dir + "/d.key")
        let key = try genericKey("svc", "a")
        for i in 0..<100 { try add(k, genericKey("fill", "x\(i)"), String(repeating: "y", count: 32)) }
        try k.save(key, secret: secure("0123456789abcdef0123456789abcdef"), updateExisting: false)
        var samples: [Double] = []
        for round in 0..<300 {
            let t0 = DispatchTime.now().uptimeNanoseconds
            try k.save(key, secret: secure(String(format: "%032d", round)), updateExisting: true)
            samples.append(Double(DispatchTime.now().uptimeNanoseconds - t0) / 1000)
        }
        samples.sort()
        var creates: [Double] = []
        for i in 0..<300 {
            let t0 = DispatchTime.now().uptimeNanoseconds
            try add(k, genericKey("new", "n\(i)"), "0123456789abcdef0123456789abcdef")
            creates.append(Double(DispatchTime.now().uptimeNanoseconds - t0) / 1000)
        }
        creates.sort()
        var deletes: [Double] = []
        for i in 0..<300 {
            let item = try XCTUnwrap(try k.item(for: genericKey("new", "n\(i)")))
            let t0 = DispatchTime.now().uptimeNanoseconds
            try k.delete([item])
            deletes.append(Double(DispatchTime.now().uptimeNanoseconds - t0) / 1000)
        }
        deletes.sort()
        print("TIMING update median \(samples[150]) µs p10 \(samples[30]) p90 \(samples[270]); add median \(creates[150]); delete median \(deletes[150])")
    }
}
