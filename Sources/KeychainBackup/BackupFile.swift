import Foundation
import KeychainCrypto
import KeychainModel
import KeychainBatch

/// A backup file: a `BackupPayload` sealed under a key derived from the backup passphrase.
///
/// Layout, integers big-endian:
///
///     0   8   magic "KCFSBKUP"
///     8   2   format version (2; version 1, read still, has a one-byte presence mask per item)
///     10  1   scrypt log2(N)     11  4  scrypt r     15  4  scrypt p
///     19  16  salt
///     35  4   chunk size: plaintext bytes in every chunk but the last
///     39  32  key check: HMAC-SHA256 of bytes 0..<39 under the check key
///     71      chunks, each AES-256-GCM (nonce ‖ ciphertext ‖ tag)
///
/// The scrypt key gives, by HKDF, the check key and the sealing key. Each chunk's associated
/// data is the 71-byte header, the chunk's index (u64) and a final-chunk flag (u8), so a
/// changed header, reordered or dropped chunks, and a file cut at any point (even between
/// chunks) all fail authentication. The key check tells a wrong passphrase from a damaged file.
package enum BackupFile {
    package static let formatVersion: UInt16 = 2
    /// The versions `open` reads.
    static let readableVersions: ClosedRange<UInt16> = 1...2
    static let magic = Array("KCFSBKUP".utf8)
    static let headerBytes = 71
    static let checkedBytes = 39
    package static let defaultChunkBytes = 1 << 20
    static let chunkOverhead = AESGCM.overhead

    /// What `export` writes and `import` accepts: r 8, p 1 and the cost range of `init`, so a
    /// file cannot make import allocate more than 4 GiB for the key derivation.
    package static func isAcceptable(_ p: ScryptParameters) -> Bool { p.r == 8 && p.p == 1 && (10...22).contains(p.logN) }

    /// The sealed file's bytes; they hold no plaintext and may go to any file.
    package static func seal(_ payload: BackupPayload, passphrase: SecureBytes, scrypt: ScryptParameters = .default,
                            chunkBytes: Int = defaultChunkBytes) throws -> [UInt8] {
        guard isAcceptable(scrypt) else { throw KeychainError.invalidInput("scrypt cost must be from 10 to 22") }
        precondition(chunkBytes >= 16 && chunkBytes <= maxChunkBytes)
        var header = magic
        header += be(UInt64(formatVersion), 2) + [scrypt.logN] + be(UInt64(scrypt.r), 4) + be(UInt64(scrypt.p), 4)
        header += SecureRandom.array(16) + be(UInt64(chunkBytes), 4)
        let keys = try Keys(passphrase: passphrase, header: header)
        header += HMACSHA256.authenticate(header, key: keys.check)
        let plaintext = payload.buffer
        let chunks = max(1, (plaintext.count + chunkBytes - 1) / chunkBytes)
        var out = header
        out.reserveCapacity(headerBytes + plaintext.count + chunks * chunkOverhead)
        try plaintext.withUnsafeBytes { raw in
            for i in 0..<chunks {
                let range = i * chunkBytes..<min((i + 1) * chunkBytes, raw.count)
                out += try AESGCM.seal(UnsafeRawBufferPointer(rebasing: raw[range]), key: keys.seal,
                                       aad: chunkAAD(header, index: i, last: i == chunks - 1))
            }
        }
        return out
    }

    /// Checks every chunk of the file before anything is decoded, then returns its items, with
    /// the plaintext in locked memory. `name` is the file as the user gave it, for messages.
    ///
    /// Errors: not a backup, or a newer format: `invalidInput`; a wrong passphrase (or a damaged
    /// header): `wrongPassphrase`; anything cut off, altered or malformed: `integrityFailure`.
    package static func open(_ file: [UInt8], named name: String, passphrase: SecureBytes) throws -> ItemBatch {
        guard file.count >= magic.count, Array(file[0..<magic.count]) == magic else {
            throw KeychainError.invalidInput("\(name) is not a keychainfs backup")
        }
        guard file.count >= headerBytes + chunkOverhead else {
            throw KeychainError.integrityFailure("\(name) is truncated: it ends inside its header")
        }
        let version = UInt16(int(file, 8, 2))
        guard readableVersions.contains(version) else {
            throw KeychainError.invalidInput("\(name) is a backup of format version \(version); this keychainfs reads versions \(readableVersions.lowerBound) to \(readableVersions.upperBound)")
        }
        let scrypt = ScryptParameters(logN: file[10], r: UInt32(int(file, 11, 4)), p: UInt32(int(file, 15, 4)))
        let chunkBytes = Int(int(file, 35, 4))
        guard isAcceptable(scrypt), chunkBytes >= 16, chunkBytes <= maxChunkBytes else {
            throw KeychainError.integrityFailure("\(name) has a damaged header")
        }
        let header = Array(file[0..<headerBytes])
        let keys = try Keys(passphrase: passphrase, header: Array(header[0..<checkedBytes]))
        let check = SecureBytes(copying: HMACSHA256.authenticate(Array(header[0..<checkedBytes]), key: keys.check))
        guard check.isEqual(to: SecureBytes(copying: header[checkedBytes..<headerBytes])) else {
            throw KeychainError.wrongPassphrase
        }

        let sealedChunk = chunkBytes + chunkOverhead
        let body = file.count - headerBytes
        let chunks = (body + sealedChunk - 1) / sealedChunk
        let plaintext = SecureBytes(count: body - chunks * chunkOverhead)
        var written = 0
        for i in 0..<chunks {
            let start = headerBytes + i * sealedChunk
            let sealed = Array(file[start..<min(start + sealedChunk, file.count)])
            let part: SecureBytes
            do {
                part = try AESGCM.open(sealed, key: keys.seal, aad: chunkAAD(header, index: i, last: i == chunks - 1))
            } catch {
                throw KeychainError.integrityFailure(
                    "\(name) is truncated or was altered: part \(i + 1) of \(chunks) fails authentication; nothing was imported")
            }
            part.withUnsafeBytes { src in
                plaintext.withUnsafeMutableBytes { dst in
                    if src.count > 0 { (dst.baseAddress! + written).copyMemory(from: src.baseAddress!, byteCount: src.count) }
                }
            }
            written += part.count
        }
        return try BackupPayload.decode(plaintext, formatVersion: version)
    }

    static let maxChunkBytes = 64 << 20

    private struct Keys {
        let check: SecureBytes
        let seal: SecureBytes

        init(passphrase: SecureBytes, header: [UInt8]) throws {
            let scrypt = ScryptParameters(logN: header[10], r: UInt32(int(header, 11, 4)), p: UInt32(int(header, 15, 4)))
            let master = try Scrypt.deriveKey(passphrase: passphrase, salt: Array(header[19..<35]), parameters: scrypt)
            check = try HKDF.deriveKey(from: master, info: "keychainfs backup v1 check")
            seal = try HKDF.deriveKey(from: master, info: "keychainfs backup v1 seal")
        }
    }

    private static func chunkAAD(_ header: [UInt8], index: Int, last: Bool) -> [UInt8] {
        header + be(UInt64(index), 8) + [last ? 1 : 0]
    }

    private static func be(_ v: UInt64, _ n: Int) -> [UInt8] {
        (0..<n).map { UInt8(truncatingIfNeeded: v >> UInt64(8 * (n - 1 - $0))) }
    }

    private static func int(_ bytes: [UInt8], _ at: Int, _ n: Int) -> UInt64 {
        bytes[at..<at + n].reduce(0) { $0 << 8 | UInt64($1) }
    }
}

extension BackupFile {
    /// Reads a whole backup file. Its bytes are sealed, so an ordinary array holds them.
    package static func read(from path: String) throws -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else {
            let reason = FileManager.default.fileExists(atPath: path) ? "cannot be read" : "does not exist"
            throw KeychainError.invalidInput("the backup file \(path) \(reason)")
        }
        return [UInt8](data)
    }

    /// Writes `bytes` to `path` (mode 0600) durably and atomically: through a temporary file in
    /// the same directory, renamed over `path`, so an existing file is replaced only by a
    /// complete backup.
    package static func write(_ bytes: [UInt8], to path: String) throws {
        let directory = PathText.parent(KeychainLocations.absolute(path))
        let temp = directory + "/.\(PathText.lastComponent(path)).\(getpid()).tmp"
        func failure(_ what: String) -> KeychainError {
            let code = errno
            return code == ENOSPC ? .diskFull : .io("cannot \(what) \(path): \(String(cString: strerror(code)))")
        }
        let fd = Glibc.open(temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw failure("write") }
        var ok = false
        defer { if !ok { unlink(temp) } }
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + off, $0.count - off) }
            if n < 0 {
                if errno == EINTR { continue }
                let e = failure("write"); close(fd); throw e
            }
            off += n
        }
        guard fsync(fd) == 0 else { let e = failure("write"); close(fd); throw e }
        close(fd)
        guard rename(temp, path) == 0 else { throw failure("replace") }
        ok = true
        let dfd = Glibc.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dfd >= 0 { fsync(dfd); close(dfd) }
    }
}

extension BackupFile {
    /// Writes a backup as its items arrive, in the layout `seal` makes, so that an export's
    /// memory does not grow with the store (at a million items, the whole payload and its sealed
    /// copy took hundreds of MiB). Chunks are sealed and written as they fill; the first,
    /// which holds the payload's item count, is kept until `finish`, then written in its place.
    /// Like `write`, it goes through a temporary file renamed over `path` (mode 0600), so an
    /// existing file is replaced only by a complete backup; a writer dropped before `finish`
    /// removes its temporary file. Not `replacing`, `finish` puts it in place only where no
    /// file is (`fileExists` otherwise, the file left as it was), whatever appeared meanwhile.
    package final class Writer {
        private let path: String, temp: String, directory: String
        private let replacing: Bool
        private let fd: Int32
        private let header: [UInt8]
        private let keys: Keys
        private let chunkBytes: Int
        /// The first chunk's plaintext (count first), then the current one's; both locked.
        private let first = SecureBytes(count: 8), current = SecureBytes()
        private var sealedChunks = 0   // written so far, after the first
        package private(set) var count = 0
        private var finished = false

        package init(path: String, passphrase: SecureBytes, scrypt: ScryptParameters = .default,
                    chunkBytes: Int = defaultChunkBytes, replacing: Bool = true) throws {
            guard isAcceptable(scrypt) else { throw KeychainError.invalidInput("scrypt cost must be from 10 to 22") }
            precondition(chunkBytes >= 16 && chunkBytes <= maxChunkBytes)
            var header = magic
            header += be(UInt64(formatVersion), 2) + [scrypt.logN] + be(UInt64(scrypt.r), 4) + be(UInt64(scrypt.p), 4)
            header += SecureRandom.array(16) + be(UInt64(chunkBytes), 4)
            keys = try Keys(passphrase: passphrase, header: header)
            header += HMACSHA256.authenticate(header, key: keys.check)
            self.header = header
            self.chunkBytes = chunkBytes
            self.path = path
            self.replacing = replacing
            directory = PathText.parent(KeychainLocations.absolute(path))
            temp = directory + "/.\(PathText.lastComponent(path)).\(getpid()).tmp"
            fd = Glibc.open(temp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw Self.failure("write", path) }
        }

        deinit {
            if !finished { close(fd); unlink(temp) }
        }

        /// Adds the items of `payload` (its count and bytes), in order.
        package func append(_ payload: BackupPayload) throws {
            try payload.buffer.withUnsafeBytes { raw in try add(UnsafeRawBufferPointer(rebasing: raw[8...])) }
            count += payload.count
        }

        /// Seals the last chunks, writes the first with the item count, syncs and renames. A
        /// backup that is not `complete` (items left out as damaged) never replaces a file, even
        /// `replacing`: the one there may be the only copy of what this one lacks.
        package func finish(complete: Bool = true) throws {
            first.withUnsafeMutableBytes { b in
                for i in 0..<8 { b[i] = UInt8(truncatingIfNeeded: UInt64(count) >> UInt64(56 - 8 * i)) }
            }
            // The first chunk is the last when nothing followed it.
            let onlyChunk = sealedChunks == 0 && current.count == 0
            if !onlyChunk {
                try current.withUnsafeBytes { try seal($0, index: sealedChunks + 1, last: true) }
                current.resize(to: 0)
            }
            try first.withUnsafeBytes { try seal($0, index: 0, last: onlyChunk) }
            guard fsync(fd) == 0 else { throw Self.failure("write", path) }
            close(fd)
            finished = true
            guard replacing && complete ? rename(temp, path) == 0 : Self.renameNoReplace(temp, path) else {
                let code = errno
                unlink(temp)
                if code == EEXIST { throw Self.exists(path) }
                errno = code
                throw Self.failure("replace", path)
            }
            let dfd = Glibc.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            if dfd >= 0 { fsync(dfd); close(dfd) }
        }

        /// The refusal of a backup over an existing file.
        package static func exists(_ path: String) -> KeychainError {
            .fileExists("\(path) exists; give --force to replace it (or choose another file name); nothing was written")
        }

        /// Puts `from` at `to` only if nothing is there (EEXIST otherwise): a hard link, which
        /// never replaces, then the temporary name removed. A file system without hard links
        /// (FAT) gets a rename after a look, which a file made in between would lose to.
        private static func renameNoReplace(_ from: String, _ to: String) -> Bool {
            if link(from, to) == 0 { unlink(from); return true }
            guard errno == EPERM || errno == EOPNOTSUPP || errno == ENOSYS else { return false }
            var st = stat()
            guard lstat(to, &st) != 0, errno == ENOENT else { errno = EEXIST; return false }
            return rename(from, to) == 0
        }

        private func add(_ bytes: UnsafeRawBufferPointer) throws {
            var rest = bytes
            if first.count < chunkBytes {
                let n = min(chunkBytes - first.count, rest.count)
                first.append(UnsafeRawBufferPointer(rebasing: rest[..<n]))
                rest = UnsafeRawBufferPointer(rebasing: rest[n...])
            }
            while !rest.isEmpty {
                // A full chunk is sealed only once a byte follows it: until then it may be the last.
                if current.count == chunkBytes {
                    try current.withUnsafeBytes { try seal($0, index: sealedChunks + 1, last: false) }
                    sealedChunks += 1
                    current.resize(to: 0)
                }
                let n = min(chunkBytes - current.count, rest.count)
                current.append(UnsafeRawBufferPointer(rebasing: rest[..<n]))
                rest = UnsafeRawBufferPointer(rebasing: rest[n...])
            }
        }

        private func seal(_ plaintext: UnsafeRawBufferPointer, index: Int, last: Bool) throws {
            let sealed = try AESGCM.seal(plaintext, key: keys.seal, aad: chunkAAD(header, index: index, last: last))
            // Index 0 (the header before it) goes at the start; the others follow in order.
            let offset = index == 0 ? 0 : headerBytes + index * (chunkBytes + chunkOverhead)
            let bytes = index == 0 ? header + sealed : sealed
            var done = 0
            while done < bytes.count {
                let n = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress! + done, $0.count - done, off_t(offset + done)) }
                if n < 0 {
                    if errno == EINTR { continue }
                    throw Self.failure("write", path)
                }
                done += n
            }
        }

        private static func failure(_ what: String, _ path: String) -> KeychainError {
            let code = errno
            return code == ENOSPC ? .diskFull : .io("cannot \(what) \(path): \(String(cString: strerror(code)))")
        }
    }
}
