import Foundation
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
