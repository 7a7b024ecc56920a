// keychainfs-fill: fills a store with many generic passwords at once, for the tests that need
// a hundred thousand items (one transaction per 5,000 items, through the store library).
//
//     keychainfs-fill STORE PASSPHRASE-FILE COUNT PREFIX [PER-SERVICE]
//
// Item i is service "svc<i / PER-SERVICE>" (default 1000), account "a<i>", class
// when-unlocked, and its secret "<PREFIX>-<i in 7 digits>-" padded with "f" to 23 bytes more
// than the prefix (48 bytes for a prefix of 24).
//
//     keychainfs-fill --time STORE PASSPHRASE-FILE
//
// prints the milliseconds an open (before first unlock), the unlock (KDF included) and the
// loading of every item's name and attributes take, as a mount does today.
import Foundation
import KeychainStore
import KeychainBatch

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("keychainfs-fill: \(message)\n".utf8))
    exit(64)
}

let args = CommandLine.arguments
if args.count == 4 && args[1] == "--time" {
    func ms(_ start: ContinuousClock.Instant) -> String {
        let d = ContinuousClock.now - start
        return String(format: "%.1f", Double(d.components.seconds) * 1000 + Double(d.components.attoseconds) / 1e15)
    }
    do {
        guard let line = try String(contentsOfFile: args[3], encoding: .utf8).split(separator: "\n").first else {
            fail("the passphrase file is empty")
        }
        var t = ContinuousClock.now
        let keychain = try Keychain(openingAt: args[2])
        print("open \(ms(t)) ms")
        t = ContinuousClock.now
        try keychain.unlock(passphrase: SecureBytes(copying: Array(line.utf8)))
        print("unlock \(ms(t)) ms")
        t = ContinuousClock.now
        let (items, problems) = try keychain.allItems()
        print("load \(ms(t)) ms (\(items.count) items, \(problems.count) problems)")
    } catch {
        fail("\(error)")
    }
    exit(0)
}
guard args.count == 5 || args.count == 6, let count = Int(args[3]), count >= 0 else {
    fail("usage: keychainfs-fill STORE PASSPHRASE-FILE COUNT PREFIX [PER-SERVICE]")
}
let perService = args.count == 6 ? Int(args[5]) ?? 0 : 1000
guard perService > 0 else { fail("PER-SERVICE must be a positive number") }
let prefix = args[4]

do {
    guard let line = try String(contentsOfFile: args[2], encoding: .utf8).split(separator: "\n").first else {
        fail("the passphrase file is empty")
    }
    let keychain = try Keychain(openingAt: args[1])
    try keychain.unlock(passphrase: SecureBytes(copying: Array(line.utf8)))
    var i = 0
    while i < count {
        var batch = ItemBatch()
        for n in i..<min(i + 5000, count) {
            let key = ItemKey.generic(try GenericPasswordKey(service: "svc\(n / perService)", account: "a\(n)"))
            let secret = String(format: "%@-%07d-", prefix, n).padding(toLength: prefix.count + 23, withPad: "f", startingAt: 0)
            batch.append(ItemRecord(key: key, attributes: ItemAttributes(accessible: .whenUnlocked)),
                         secret: SecureBytes(copying: Array(secret.utf8)))
        }
        _ = try keychain.save(batch: batch, updateExisting: false)
        i += batch.count
    }
} catch {
    fail("\(error)")
}
