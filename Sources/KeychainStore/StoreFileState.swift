import Foundation
import CStoreVFS
import Synchronization
import KeychainModel

/// The store's database and WAL files as the file system describes them: device, inode, size,
/// and modification and change times to the nanosecond. Any write to either file, a copy put
/// in its place or a rename over it gives another state; the change time cannot be set from
/// user space, and the kernel gives a file that was looked at since its last change a
/// fine-grained one at the next. An empty, emptied (zeroed, `StoreFiles.walHoldsFrames`) or
/// missing WAL counts as the same state: it holds nothing.
///
/// Kept beside the commit counter after each check of the rows and once commits pause
/// (`Keychain+FilesRecord.swift`), it lets an
/// open skip reading every row when the files are as this machine's keychainfs left them
/// (`Keychain.checkRows`): whoever could change them unseen could change the counter too.
struct StoreFileState: Equatable {
    /// Per file: device, inode, size, modification and change times (seconds, nanoseconds);
    /// the database's, then the WAL's when it holds anything. Compared as numbers (a commit
    /// without a watch takes the state twice); only the record is text.
    private let fields: [UInt64]
    private static let perFile = 7

    init?(storePath: String) {
        var db = stat()
        guard stat(storePath, &db) == 0 else { return nil }
        var fields = Self.fields(db)
        var wal = stat()
        if stat(storePath + "-wal", &wal) == 0 && wal.st_size > 0 && StoreFiles.walHoldsFrames(storePath: storePath) {
            fields += Self.fields(wal)
        }
        self.fields = fields
    }

    /// A state as `text` gave it; text that is not one matches no state of the files (which
    /// always have a database's fields).
    init(text: String) {
        let words = text.split(separator: " ")
        func numbers(_ words: ArraySlice<Substring>) -> [UInt64]? {
            guard words.count == 5 else { return nil }
            var out: [UInt64] = []
            for (i, word) in words.enumerated() {
                let parts = i < 3 ? [word] : word.split(separator: ".", omittingEmptySubsequences: false)
                for part in parts {
                    guard parts.count == (i < 3 ? 1 : 2) else { return nil }
                    if let v = UInt64(part) { out.append(v) } else if let v = Int64(part) { out.append(UInt64(bitPattern: v)) } else { return nil }
                }
            }
            return out
        }
        var parsed: [UInt64]?
        if words.count >= 8, words[0] == "db", words[6] == "wal", let db = numbers(words[1..<6]) {
            if words.count == 8 && words[7] == "empty" {
                parsed = db
            } else if words.count == 12, let wal = numbers(words[7..<12]) {
                parsed = db + wal
            }
        }
        fields = parsed ?? []
    }

    /// The record's text: "db <dev> <ino> <size> <mtime> <ctime> wal <the same, or empty>".
    var text: String { String(decoding: textBytes, as: UTF8.self) }

    /// `text` as bytes, written digit by digit: string interpolation of its 14 numbers was a
    /// fortieth of an update's instructions when every commit recorded it.
    var textBytes: [UInt8] {
        guard fields.count >= Self.perFile else { return [] }
        var out: [UInt8] = []
        out.reserveCapacity(StoreCounter.filesRecordWidth + 1)
        func number(_ v: UInt64, signed: Bool) {
            var magnitude = v
            if signed && Int64(bitPattern: v) < 0 {
                out.append(UInt8(ascii: "-"))
                magnitude = Int64(bitPattern: v).magnitude
            }
            var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                          UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
                (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            var n = 0
            withUnsafeMutableBytes(of: &digits) { d in
                repeat {
                    d[n] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                    magnitude /= 10
                    n += 1
                } while magnitude > 0
                while n > 0 { n -= 1; out.append(d[n]) }
            }
        }
        func describe(_ at: Int) {
            number(fields[at], signed: false); out.append(UInt8(ascii: " "))
            number(fields[at + 1], signed: false); out.append(UInt8(ascii: " "))
            number(fields[at + 2], signed: true); out.append(UInt8(ascii: " "))
            number(fields[at + 3], signed: true); out.append(UInt8(ascii: "."))
            number(fields[at + 4], signed: true); out.append(UInt8(ascii: " "))
            number(fields[at + 5], signed: true); out.append(UInt8(ascii: "."))
            number(fields[at + 6], signed: true)
        }
        out.append(contentsOf: "db ".utf8)
        describe(0)
        out.append(contentsOf: " wal ".utf8)
        if fields.count >= 2 * Self.perFile { describe(Self.perFile) } else { out.append(contentsOf: "empty".utf8) }
        return out
    }

    private static func fields(_ s: stat) -> [UInt64] {
        [UInt64(s.st_dev), UInt64(s.st_ino), UInt64(bitPattern: Int64(s.st_size)),
         UInt64(bitPattern: Int64(s.st_mtim.tv_sec)), UInt64(bitPattern: Int64(s.st_mtim.tv_nsec)),
         UInt64(bitPattern: Int64(s.st_ctim.tv_sec)), UInt64(bitPattern: Int64(s.st_ctim.tv_nsec))]
    }
}

extension StoreCounter {
    var filesPath: String { path + ".files" }
    /// Longer than any state's text: devices, inodes, sizes and times in decimal.
    static let filesRecordWidth = 400

    /// The files' state recorded after the last commit or check of the rows; nil if none.
    func readFiles() -> StoreFileState? {
        guard let line = Self.line(filesPath), !line.isEmpty else { return nil }
        return StoreFileState(text: line)
    }

    /// Records `state`, or removes the record when nil (the files are in a state no check vouches for).
    func recordFiles(_ state: StoreFileState?) {
        recorded.state.withLock { $0 = state }
        guard let state else {
            recorded.files.remove(filesPath)
            return
        }
        // Padded to one length (read back without the spaces, `line`), so that a shorter
        // state leaves nothing behind and the file needs no truncation.
        var bytes = state.textBytes
        if bytes.count < Self.filesRecordWidth { bytes += repeatElement(UInt8(ascii: " "), count: Self.filesRecordWidth - bytes.count) }
        bytes.append(10)
        recorded.files.withDescriptor(filesPath, readable: false) { Self.overwrite($0, size: $1, with: bytes) }
    }

    /// The state this instance last recorded (nil: none, or it removed the record): what a
    /// commit compares the files with, without reading the record back.
    func recordedHere() -> StoreFileState? { recorded.state.withLock { $0 } }
}

/// The files record as this instance last wrote it (`StoreCounter.recordFiles`), and the
/// descriptors of the two records, kept open: each commit rewrites the counter, and their
/// opens and closes were 4 of a commit's system calls.
final class RecordedFiles: Sendable {
    let state = Mutex<StoreFileState?>(nil)
    let counter = RecordDescriptor()
    let files = RecordDescriptor()
}

/// One record file's descriptor, opened at first use and kept. Records are only ever written
/// in place, so the descriptor stays the file's; should the file be removed or renamed over all
/// the same (by hand, or by another process's `recordFiles(nil)`), the open file has no name
/// left, and the next use opens the path anew. A leaf lock.
final class RecordDescriptor: Sendable {
    private let fd = Mutex<Int32>(-1)

    /// Runs `body` with the descriptor of the file at `path`, made if missing; nothing if it
    /// cannot be opened.
    /// `body` is given the file's size as the check of its name found it (nil when just
    /// opened): a record written in place needs it, and a second `fstat` was one of an update's system calls.
    func withDescriptor(_ path: String, readable: Bool, _ body: (Int32, off_t?) -> Void) {
        fd.withLock { fd in
            var size: off_t?
            if fd >= 0 {
                // Without the times (store_files.c says why).
                var links: UInt64 = 0, bytes: Int64 = 0
                if kcfs_file_links_and_size(fd, &links, &bytes) == 0 && links > 0 {
                    size = off_t(bytes)
                } else {
                    close(fd)
                    fd = -1
                }
            }
            if fd < 0 { fd = StoreCounter.openForWriting(path, readable: readable) ?? -1 }
            if fd >= 0 { body(fd, size) }
        }
    }

    /// Closes the descriptor and removes the file.
    func remove(_ path: String) {
        fd.withLock { fd in
            if fd >= 0 { close(fd) }
            fd = -1
            unlink(path)
        }
    }

    // Whether the open file still has a name is one `statx` (its link count), where an open and
    // a close each resolved the path. (A record written to a file with no name is lost, which
    // only makes the next open read every row, or the counter lag, as after a crash.)

    deinit { fd.withLock { if $0 >= 0 { close($0) } } }
}
