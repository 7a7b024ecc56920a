import Foundation
import Glibc
import KeychainCrypto
import KeychainModel

/// How an open file was opened, from open(2) flags.
package struct OpenMode: Equatable, Sendable {
    package var readable: Bool
    package var writable: Bool
    package var append: Bool
    package var truncate: Bool

    package init(flags: Int32) {
        let access = flags & O_ACCMODE
        readable = access == O_RDONLY || access == O_RDWR
        writable = access == O_WRONLY || access == O_RDWR
        append = flags & O_APPEND != 0
        truncate = flags & O_TRUNC != 0 && writable
    }
}

/// One open file: the secret in locked memory. Readers share the tree's decrypted copy;
/// the first change makes a private copy (copy on write). Changes are committed at flush,
/// fsync and release, so a reader sees the old value or the new one, never a mix.
// @unchecked Sendable because it is only touched under `ServedKeychain.state`, under its mutex.
final class OpenFile: @unchecked Sendable {
    /// Negative while the item is pending (created, not yet committed); its commit sets the stored id.
    var itemID: Int64
    let accessible: AccessibilityClass
    let mode: OpenMode
    private(set) var buffer: SecureBytes
    /// False while `buffer` is the tree's shared copy, which this handle must neither change nor wipe.
    private var ownsBuffer: Bool
    /// Opened with O_TRUNC: the stored value is to become empty. That alone is committed only
    /// at release, not at the flush a shell's dup-and-close sends before the first write, so a
    /// write that then fails (EFBIG) leaves the stored value as it was.
    private(set) var truncatedAtOpen = false
    /// Written or truncated since the last commit.
    private(set) var hasWrites = false
    /// Writes and truncations so far: a commit clears `hasWrites` only if none came after
    /// the copy it committed.
    private(set) var writes: UInt64 = 0
    var isDirty: Bool { truncatedAtOpen || hasWrites }
    /// Changes that a commit will still write: not those of a revoked or abandoned copy,
    /// which never will.
    var isPending: Bool { isDirty && !isRevoked && !isAbandoned }
    /// The item's modification date when opened, then the time of this handle's last change:
    /// what `stat` reports while it is pending and what its commit stores, so that the
    /// kernel's cached attributes stay right across the commit.
    private(set) var modified: Date
    /// Set when the keychain locks and this item's class key goes: reads then fail with ENOKEY.
    private(set) var isRevoked = false
    /// Set by a write or truncate past 16 MiB: the copy is then never committed, so the
    /// stored value stays as it was rather than becoming a cut-off prefix.
    private(set) var isAbandoned = false
    /// This handle's create() made the item, which is pending until this handle's first commit
    /// inserts it; an abandoned or failed create removes it again.
    var createdItem = false
    /// The item was a new file still pending when another channel stored an item under its
    /// name (`ServedKeychain.State.insertStored`): the file lost its name, and the first
    /// commit of its item fails with EEXIST, as its insert would have.
    var lostName = false

    init(itemID: Int64, accessible: AccessibilityClass, mode: OpenMode, contents: SecureBytes, shared: Bool = false,
         modified: Date = Date()) {
        self.itemID = itemID
        self.accessible = accessible
        self.mode = mode
        self.buffer = contents
        self.ownsBuffer = !shared
        self.modified = modified
        if mode.truncate {
            buffer = SecureBytes()
            ownsBuffer = true
            truncatedAtOpen = true
            self.modified = Date()
        }
    }

    private func makeOwned() {
        guard !ownsBuffer else { return }
        buffer = buffer.copy()
        ownsBuffer = true
    }

    func read(offset: Int, count: Int, into destination: UnsafeMutableRawPointer) throws(FileSystemError) -> Int {
        try withReadBytes(offset: offset, count: count) { bytes, _ in
            if bytes.count > 0 { destination.copyMemory(from: bytes.baseAddress!, byteCount: bytes.count) }
            return bytes.count
        }
    }

    /// The bytes a read at `offset` of up to `count` returns, in place, and whether the buffer
    /// is the shared (never changed in place) copy.
    func withReadBytes<T>(offset: Int, count: Int, _ body: (UnsafeRawBufferPointer, Bool) -> T) throws(FileSystemError) -> T {
        guard !isRevoked else { throw .keyUnavailable }
        guard mode.readable else { throw .badHandle }
        guard offset >= 0 else { throw .invalid }
        let range = Self.readRange(offset: offset, count: count, size: buffer.count)
        return buffer.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[range]), !ownsBuffer) }
    }

    static func readRange(offset: Int, count: Int, size: Int) -> Range<Int> {
        offset < size ? offset..<(offset + min(max(count, 0), size - offset)) : size..<size
    }

    /// Writes at `offset` (at the end when opened with O_APPEND), zero-filling any gap.
    func write(_ data: UnsafeRawBufferPointer, offset: Int) throws(FileSystemError) -> Int {
        guard !isRevoked else { throw .keyUnavailable }
        guard mode.writable else { throw .badHandle }
        guard offset >= 0 else { throw .invalid }
        let start = mode.append ? buffer.count : offset
        let end = start + data.count
        guard end <= maxSecretBytes else { isAbandoned = true; throw .tooLarge }
        makeOwned()
        if end > buffer.count { buffer.resize(to: end) }
        if data.count > 0 {
            buffer.withUnsafeMutableBytes { ($0.baseAddress! + start).copyMemory(from: data.baseAddress!, byteCount: data.count) }
        }
        hasWrites = true
        writes += 1
        modified = Date()
        return data.count
    }

    func truncate(to size: Int) throws(FileSystemError) {
        guard !isRevoked else { throw .keyUnavailable }
        guard size >= 0 else { throw .invalid }
        guard size <= maxSecretBytes else { isAbandoned = true; throw .tooLarge }
        makeOwned()
        buffer.resize(to: size)
        hasWrites = true
        writes += 1
        modified = Date()
    }

    func markCommitted(writes committed: UInt64) {
        truncatedAtOpen = false
        if writes == committed { hasWrites = false }
    }

    /// Another channel stored a new value of the item: every change not yet committed here is
    /// older than that value, so no later commit of this handle may write it over it (it
    /// would undo a change whose client already heard "done"). The copy stays, as a reader's
    /// does; a write after this is a change of its own, committed as usual.
    func dropUncommitted() {
        truncatedAtOpen = false
        hasWrites = false
    }

    /// At lock, for classes whose key is gone: later reads and writes fail with ENOKEY.
    func revoke() {
        isRevoked = true
        close()
    }

    /// Wipes a private copy and lets go of a shared one.
    func close() {
        if ownsBuffer { buffer.wipe() }
        buffer = SecureBytes()
        ownsBuffer = true
    }
}
