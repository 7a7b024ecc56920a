import KeychainErrors

/// What pins a program: the file's device, inode, size, modification time and SHA-256. Any
/// change (a package upgrade, a rebuild, a copy elsewhere, an edit) makes another program.
package struct FileIdentity: Hashable, Sendable, CustomStringConvertible {
    package var device: UInt64
    package var inode: UInt64
    package var size: UInt64
    package var modifiedSeconds: Int64
    package var modifiedNanoseconds: UInt32
    package var sha256: [UInt8]

    package init(device: UInt64, inode: UInt64, size: UInt64, modifiedSeconds: Int64,
                 modifiedNanoseconds: UInt32, sha256: [UInt8]) {
        self.device = device
        self.inode = inode
        self.size = size
        self.modifiedSeconds = modifiedSeconds
        self.modifiedNanoseconds = modifiedNanoseconds
        self.sha256 = sha256
    }

    package var description: String {
        "dev \(device) ino \(inode) size \(size) mtime \(modifiedSeconds).\(modifiedNanoseconds) sha256 "
            + sha256.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }
}
