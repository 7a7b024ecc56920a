import Foundation
import KeychainCrypto
import KeychainStore
@testable import KeychainFileSystem

/// Files written and read as a program does it: open (with O_TRUNC) or create, write, close.
extension KeychainTree {
    func put(_ path: String, _ text: String) throws {
        let h: UInt64
        if let opened = try? open(path, flags: O_WRONLY | O_TRUNC) { h = opened } else { h = try create(path, flags: O_WRONLY) }
        _ = try Array(text.utf8).withUnsafeBytes { try write(h, offset: 0, data: $0) }
        try release(h)
    }

    func get(_ path: String) throws -> String {
        let h = try open(path, flags: O_RDONLY)
        defer { try? release(h) }
        var buf = [UInt8](repeating: 0, count: 4096)
        let n = try buf.withUnsafeMutableBytes { try read(h, offset: 0, count: 4096, into: $0.baseAddress!) }
        return String(decoding: buf[0..<n], as: UTF8.self)
    }
}

/// A new store (scrypt 2^10, a device key beside it) in a directory of its own under the
/// temporary directory; the test removes the directory in its tearDown.
func makeTemporaryKeychain(_ prefix: String, passphrase: SecureBytes) throws -> (directory: String, keychain: Keychain) {
    let dir = NSTemporaryDirectory() + "\(prefix)-\(UUID().uuidString)"
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    let keychain = try Keychain.create(at: dir + "/k.db", passphrase: passphrase, scrypt: ScryptParameters(logN: 10),
                                       deviceKeyPath: dir + "/device.key")
    return (dir, keychain)
}
