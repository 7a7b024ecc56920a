import Foundation
import KeychainBackup
import KeychainBatch
import KeychainCrypto
import KeychainModel
import Synchronization

/// The keys of a sync folder, each derived (HKDF-SHA256) from the one sync key that the
/// folder's envelope holds under the passphrase.
package struct SyncKeys: @unchecked Sendable {
    private let master: SecureBytes
    /// Seals item files (AES-256-GCM).
    let seal: SecureBytes
    /// Names items: a file name is the MAC of the item's identity, never its service or account.
    let names: SecureBytes
    /// Tells whether an item changed since it was last synced, without keeping its value.
    let digest: SecureBytes

    package init(syncKey: SecureBytes) throws {
        guard syncKey.count == 32 else { throw KeychainError.integrityFailure("the sync key is not 32 bytes") }
        master = syncKey.copy()
        seal = try HKDF.deriveKey(from: syncKey, info: "keychainfs sync v1 seal")
        names = try HKDF.deriveKey(from: syncKey, info: "keychainfs sync v1 names")
        digest = try HKDF.deriveKey(from: syncKey, info: "keychainfs sync v1 digest")
    }

    package func itemID(_ key: ItemKey) -> SyncItemID {
        try! SyncItemID(hex: SyncHex.encode(HMACSHA256.authenticate(key.canonicalBytes, key: names)))
    }

    /// The key a device's manifest is authenticated under: derived per device from the shared
    /// key (a MAC, not a signature: any holder of the passphrase could make one).
    func manifestKey(_ device: DeviceID) throws -> SecureBytes {
        try HKDF.deriveKey(from: master, info: "keychainfs sync v1 manifest \(device.hex)")
    }

    func digest(of payload: SecureBytes) -> String {
        payload.withUnsafeBytes { SyncHex.encode(HMACSHA256.authenticate(raw: $0, key: digest)) }
    }
}

/// A sync folder on disk:
///
///     DIR/sync.key                         the key envelope (a backup file of one item: the sync key)
///     DIR/devices/<device>/state           the device's manifest: HMAC-SHA256 (32 bytes) ‖ JSON
///     DIR/devices/<device>/items/<item>.<lamport>  one sealed file per item version or tombstone
///
/// A device writes only under its own directory, so an engine never sees two devices write
/// one file. Files are written to a dot-named temporary file and renamed; the manifest last.
/// A file is named by its version and never written again: the file a manifest names keeps
/// its bytes until a later manifest stops naming it and the writer removes it, so a reader
/// holding the older manifest finds it unchanged or gone (in flight), never different.
package struct SyncFolder: Sendable {
    package let path: String

    package init(path: String) { self.path = KeychainLocations.absolute(path) }

    /// The sync key's envelope, at the folder's top.
    package static let envelopeName = "sync.key"
    package var envelopePath: String { path + "/" + Self.envelopeName }
    package var devicesPath: String { path + "/devices" }
    package func devicePath(_ d: DeviceID) -> String { devicesPath + "/" + d.hex }
    package func manifestPath(_ d: DeviceID) -> String { devicePath(d) + "/state" }
    package func itemsPath(_ d: DeviceID) -> String { devicePath(d) + "/items" }
    /// The file of one version: the writer's Lamport time is unique per version it publishes.
    package func itemPath(_ e: SyncEntry) -> String {
        itemsPath(e.version.device) + "/" + e.item.hex + "." + String(e.version.lamport)
    }

    /// The devices with a directory in the folder (names that are not device ids are ignored).
    package func devices() -> [DeviceID] {
        ((try? FileManager.default.contentsOfDirectory(atPath: devicesPath)) ?? []).compactMap { try? DeviceID(hex: $0) }.sorted()
    }

    // MARK: the key envelope

    static let envelopeService = "keychainfs-sync"

    /// Makes the folder with a new sync key sealed under `passphrase`, as backups are (scrypt,
    /// the backup file's format and checks); returns the key and the folder's id. Refuses a
    /// folder that has an envelope already (`storeExists`, exit 48).
    package func create(passphrase: SecureBytes, scrypt: ScryptParameters = .default) throws -> (key: SecureBytes, folderID: String) {
        if FileManager.default.fileExists(atPath: envelopePath) {
            throw KeychainError.storeExists(envelopePath)
        }
        // Private when made here (an existing directory is the user's choice): in a directory
        // others may write, they could rename `devices/` away and plant their own.
        try KeychainLocations.makeDirectories(path, lastMode: 0o700)
        try makePrivateDirectories(devicesPath)
        let folderID = SyncHex.encode(SyncRandom.bytes(16))
        let key = SecureRandom.bytes(32)
        var payload = BackupPayload()
        payload.append(ItemRecord(key: .generic(try GenericPasswordKey(service: Self.envelopeService, account: folderID)),
                                  attributes: ItemAttributes()), secret: key)
        try BackupFile.write(try BackupFile.seal(payload, passphrase: passphrase, scrypt: scrypt), to: envelopePath)
        return (key, folderID)
    }

    /// The sync key and folder id from the envelope; a wrong passphrase is `wrongPassphrase` (exit 51).
    package func openEnvelope(passphrase: SecureBytes) throws -> (key: SecureBytes, folderID: String) {
        // Read as every file of the folder is: a remote could serve a link to /dev/zero here.
        guard let sealed = try SyncFiles.read(envelopePath, inside: self, limit: 1 << 20) else {
            throw KeychainError.invalidInput("\(path) is not a sync folder (no sync.key; make one with 'keychainfs sync init')")
        }
        let batch = try BackupFile.open(sealed, named: envelopePath, passphrase: passphrase)
        guard batch.count == 1, let entry = batch.entries.first, case .generic(let g) = entry.record.key,
              g.service == Self.envelopeService, entry.secret.count == 32 else {
            throw KeychainError.integrityFailure("\(envelopePath) does not hold a sync key")
        }
        let key = batch.secrets.withUnsafeBytes { SecureBytes(copying: UnsafeRawBufferPointer(rebasing: $0[entry.secret])) }
        return (key, g.account)
    }

    // MARK: item files

    static let magic = Array("KCFSSYNC".utf8)
    static let fileVersion: UInt16 = 1

    /// What a file's seal binds besides its bytes: the writer, the item, the version and
    /// whether it is a tombstone. A file moved to another device's directory or item name, or
    /// an older file put back under a newer manifest entry, fails to open.
    static func aad(_ e: SyncEntry) -> [UInt8] {
        var out = magic + [UInt8(fileVersion >> 8), UInt8(fileVersion & 0xff)]
        out += Array(e.version.device.hex.utf8) + Array(e.item.hex.utf8)
        for v in [e.version.lamport, e.vector[e.version.device]] {
            out += (0..<8).map { UInt8(truncatingIfNeeded: v >> UInt64(56 - 8 * $0)) }
        }
        out.append(e.isTombstone ? 1 : 0)
        return out
    }

    /// A directory inside the folder, and any of its parents missing, made 0700 from their
    /// creation: a device's directory made as the parent of its `items/` was 0755 (the umask's
    /// mode), and Syncthing carries the mode to the other devices.
    private func makePrivateDirectories(_ directory: String) throws {
        try KeychainLocations.makeDirectories(directory, lastMode: 0o700, parentMode: 0o700)
    }

    /// `makePrivateDirectories` for a directory this device writes in, once the deepest part
    /// of it that exists is known to be reached through no symbolic link: a remote that made a
    /// device's directory a link had its `items/` made wherever the link led, outside the folder.
    private func makeInside(_ directory: String) throws {
        var existing = directory
        var st = stat()
        while existing.utf8.count > path.utf8.count && lstat(existing, &st) != 0 { existing = PathText.parent(existing) }
        if (st.st_mode & S_IFMT) == S_IFLNK { throw KeychainError.integrityFailure("\(existing) is a symbolic link; refused") }
        try SyncFiles.requireInside(existing, folder: self)
        try makePrivateDirectories(directory)
        try SyncFiles.requireInside(directory, folder: self)
    }

    /// Seals `payload` (one item, `BackupPayload`'s layout; empty for a tombstone) for `entry`
    /// and writes it under the writer's directory; returns the file's SHA-256 for the manifest.
    package func writeItem(_ entry: SyncEntry, payload: SecureBytes, keys: SyncKeys) throws -> String {
        let (sealed, digest) = try Self.seal(entry, payload: payload, keys: keys)
        try makeInside(devicePath(entry.version.device))
        try makeInside(itemsPath(entry.version.device))
        try SyncFiles.write(sealed, to: itemPath(entry))
        return digest
    }

    /// The bytes of the entry's file and their SHA-256 (the manifest's digest); nothing written.
    static func seal(_ entry: SyncEntry, payload: SecureBytes, keys: SyncKeys) throws -> (bytes: [UInt8], digest: String) {
        let sealed = Self.magic + [UInt8(Self.fileVersion >> 8), UInt8(Self.fileVersion & 0xff)]
            + (try AESGCM.seal(payload, key: keys.seal, aad: Self.aad(entry)))
        return (sealed, SyncHex.encode(SHA256Digest.hash(sealed)))
    }

    /// Writes sealed item files of `device` as one batch (`SyncFiles.writeBatch`): a first
    /// sync of thousands of items costs one flush, not one per file.
    package func writeItems(_ files: [(entry: SyncEntry, bytes: [UInt8])], device: DeviceID) throws {
        guard !files.isEmpty else { return }
        try makeInside(itemsPath(device))
        try SyncFiles.writeBatch(files.map { (itemPath($0.entry), $0.bytes) })
    }

    /// Whether the entry's file is there with the bytes the manifest names (its SHA-256): this
    /// device's own files, checked at every exchange, need no decryption.
    package func itemMatches(_ entry: SyncEntry) -> Bool {
        guard let bytes = try? SyncFiles.read(itemPath(entry), inside: self, limit: SyncFiles.itemLimit)
        else { return false }
        return SyncHex.encode(SHA256Digest.hash(bytes)) == entry.fileDigest
    }

    /// The payload of the entry's file, once its bytes match the manifest's digest and its
    /// seal opens with the entry's associated data; `integrityFailure` otherwise. Nil when the
    /// file is gone: its writer has published a later manifest and removed the files the one
    /// read here named (or an engine delivered the removal first), so it is read again at the
    /// next exchange, from the newer manifest. A file that is there is never rewritten, so one
    /// that differs from its digest was altered, whatever the timing.
    package func readItem(_ entry: SyncEntry, keys: SyncKeys) throws -> SecureBytes? {
        let path = itemPath(entry)
        guard let bytes = try SyncFiles.read(path, inside: self, limit: SyncFiles.itemLimit) else { return nil }
        guard SyncHex.encode(SHA256Digest.hash(bytes)) == entry.fileDigest else {
            throw KeychainError.integrityFailure("device \(entry.version.device.short): item file \(entry.item.hex.prefix(12))… does not match its manifest (tampered, truncated or replayed)")
        }
        let header = Self.magic.count + 2
        guard bytes.count > header, Array(bytes[0..<Self.magic.count]) == Self.magic else {
            throw KeychainError.integrityFailure("device \(entry.version.device.short): item file \(entry.item.hex.prefix(12))… is not a sync file")
        }
        do { return try AESGCM.open(Array(bytes[header...]), key: keys.seal, aad: Self.aad(entry)) } catch {
            throw KeychainError.integrityFailure("device \(entry.version.device.short): item file \(entry.item.hex.prefix(12))… fails authentication")
        }
    }

    /// Removes the device's item files that `manifest` (just written) does not name: older
    /// versions, versions written over or expired, leftovers of a writer killed before its
    /// manifest. Only after the manifest that stops naming them, so a reader of the previous
    /// one finds each file it names unchanged or gone. What is deleted is gone from the folder.
    /// Only names of the item files' form are touched (an engine's own files start with `.` or `~`).
    package func removeUnnamedItems(_ manifest: SyncManifest) {
        let dir = itemsPath(manifest.device)
        guard (try? SyncFiles.requireInside(dir, folder: self)) != nil else { return }
        let named = Set(manifest.entries.map { itemPath($0) })
        for name in (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [] where Self.isItemFileName(name) {
            let path = dir + "/" + name
            if !named.contains(path) { unlink(path) }
        }
    }

    /// `<64 lowercase hex>.<decimal>` (format 2) or `<64 lowercase hex>` (format 1).
    static func isItemFileName(_ name: String) -> Bool {
        // ASCII bytes only: `Character.isHexDigit` takes fullwidth digits too.
        let parts = name.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count <= 2, let id = parts.first, id.count == 64,
              id.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) }) else { return false }
        return parts.count == 1 || (!parts[1].isEmpty && parts[1].allSatisfy { (48...57).contains($0) })
    }

    /// Removes the temporary files that a writer killed mid-write left in a device's own
    /// directory: each holds a sealed value that would outlive its item's delete, and travel
    /// with an engine that does not ignore them. Only under the exchange lock, when nothing
    /// else writes that directory.
    package func removeTemporaries(_ d: DeviceID) {
        for dir in [devicePath(d), itemsPath(d)] {
            guard (try? SyncFiles.requireInside(dir, folder: self)) != nil else { continue }
            for name in (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
            where name.hasPrefix(".") && name.contains(".tmp-") {
                unlink(dir + "/" + name)
            }
        }
    }

    // MARK: manifests

    /// Writes the device's manifest, authenticated under its device key, after its item files.
    /// `announce` is given the SHA-256 of its bytes (as `readManifest` returns it) before
    /// anything is written. Returns that SHA-256.
    package func writeManifest(_ m: SyncManifest, keys: SyncKeys, announce: (String) throws -> Void) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let body = [UInt8](try encoder.encode(m))
        let mac = HMACSHA256.authenticate(body, key: try keys.manifestKey(m.device))
        let digest = SHA256Digest.hash(mac + body)
        try announce(SyncHex.encode(digest))
        try makeInside(devicePath(m.device))
        try SyncFiles.write(mac + body, to: manifestPath(m.device))
        // What this device wrote is what its next exchange reads back (to find a rollback).
        Self.authenticated.withLock { $0[manifestPath(m.device) + "\n" + m.folder] = (digest, m) }
        return SyncHex.encode(digest)
    }

    /// The device's manifest, if it has one; `integrityFailure` if it fails authentication or
    /// names another device or folder. Also returns the SHA-256 of its bytes.
    package func readManifest(_ d: DeviceID, folderID: String, keys: SyncKeys) throws -> (SyncManifest, digest: String)? {
        guard let bytes = try SyncFiles.read(manifestPath(d), inside: self, limit: SyncFiles.manifestLimit) else { return nil }
        let digest = SHA256Digest.hash(bytes)
        let cacheKey = manifestPath(d) + "\n" + folderID
        if let known = Self.authenticated.withLock({ $0[cacheKey] }), known.digest == digest {
            return (known.manifest, SyncHex.encode(digest))
        }
        guard bytes.count > 32 else { throw KeychainError.integrityFailure("device \(d.short): its state file is truncated") }
        let body = Array(bytes[32...])
        let expected = SecureBytes(copying: HMACSHA256.authenticate(body, key: try keys.manifestKey(d)))
        guard expected.isEqual(to: SecureBytes(copying: bytes[0..<32])) else {
            throw KeychainError.integrityFailure("device \(d.short): its state file fails authentication (tampered, or not of this folder)")
        }
        let m: SyncManifest
        do { m = try JSONDecoder().decode(SyncManifest.self, from: Data(body)) } catch {
            throw KeychainError.integrityFailure("device \(d.short): its state file is malformed")
        }
        guard m.format == SyncManifest.currentFormat else {
            throw KeychainError.integrityFailure("device \(d.short): its state file is of folder format \(m.format), this keychainfs reads \(SyncManifest.currentFormat)")
        }
        guard m.device == d, m.folder == folderID else {
            throw KeychainError.integrityFailure("device \(d.short): its state file belongs to another device or folder")
        }
        guard m.entries.allSatisfy({ $0.version.device == d }) else {
            throw KeychainError.integrityFailure("device \(d.short): its state file lists versions of another device")
        }
        Self.authenticated.withLock { $0[cacheKey] = (digest, m) }
        return (m, SyncHex.encode(digest))
    }

    /// The last manifest that passed every check above, per file and folder id, by the SHA-256
    /// of its bytes: the same bytes pass again, so an exchange does not authenticate and decode
    /// again a manifest of thousands of entries that has not changed. A leaf lock.
    private static let authenticated = Mutex<[String: (digest: [UInt8], manifest: SyncManifest)]>([:])
}

/// What a device publishes about itself: its versions, and how far it has merged the others.
package struct SyncManifest: Codable, Sendable, Equatable {
    /// 2: item files named by version (`<item>.<lamport>`), never rewritten. No folder of
    /// format 1 was released, so format 1 is refused, not read.
    static let currentFormat = 2
    package var format = SyncManifest.currentFormat
    package var device: DeviceID
    package var folder: String
    /// Grows by one at every write of the manifest: an older one served again is a rollback.
    package var seq: UInt64
    /// Seconds since 1970 of this write (for `sync status`).
    package var written: Int64
    /// The sequence number of each other device's manifest this device has merged.
    package var seen: [String: UInt64]
    /// The SHA-256 of those manifests, for the devices merged at this write: a device finds a
    /// different manifest of its own merged at one of its states (put back from a backup, or
    /// a copy writing too). Optional: manifests written before it have none.
    package var seenDigests: [String: String]?
    package var entries: [SyncEntry]

    package init(device: DeviceID, folder: String, seq: UInt64, written: Int64, seen: [String: UInt64],
                 seenDigests: [String: String]? = nil, entries: [SyncEntry]) {
        self.device = device; self.folder = folder; self.seq = seq; self.written = written; self.seen = seen
        self.seenDigests = seenDigests; self.entries = entries
    }
}

/// syncfs(2): Glibc declares it only under _GNU_SOURCE, which Swift's Glibc module does not set.
@_silgen_name("syncfs") private func flushFileSystem(_ fd: Int32) -> Int32

/// Writes files of the folder and of the local state: private, through a dot-named temporary
/// file renamed into place, synced, so that a reader (an engine, another device) sees the old
/// file or the new one.
package enum SyncFiles {
    /// Larger files are refused unread: an engine or remote can deliver anything, and an
    /// exchange must not exhaust the daemon's memory.
    static let itemLimit = 64 << 20
    static let manifestLimit = 256 << 20

    /// The bytes of a regular file of `folder`, or nil if there is none. Whatever an engine
    /// or remote planted is refused (`integrityFailure`), never followed: a symbolic link
    /// (git carries them) on the way or at the end, which could lead out of the folder to a
    /// device, a FIFO (an exchange would block forever) or /dev/zero (read forever), any
    /// other non-regular file, or a file over `limit`.
    package static func read(_ path: String, inside folder: SyncFolder, limit: Int) throws -> [UInt8]? {
        let directory = PathText.parent(path)
        try requireInside(directory, folder: folder)
        func refused(_ why: String) -> KeychainError { .integrityFailure("\(path) \(why); refused") }
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
        if fd < 0 {
            switch errno {
            case ENOENT, ENOTDIR: return nil
            case ELOOP: throw refused("is a symbolic link")
            default: throw refused("cannot be read (\(String(cString: strerror(errno))))")
            }
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { throw refused("is not a regular file") }
        guard st.st_size <= limit else { throw refused("is larger than \(limit) bytes") }
        var bytes = [UInt8](repeating: 0, count: Int(st.st_size))
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + off, $0.count - off) }
            if n < 0 { if errno == EINTR { continue }; throw refused("cannot be read (\(String(cString: strerror(errno))))") }
            if n == 0 { break }
            off += n
        }
        return Array(bytes[0..<off])
    }

    /// Refuses a directory of the folder reached through a symbolic link: reads would follow
    /// it out of the folder, and writes (of this device's own directory) would land there.
    static func requireInside(_ directory: String, folder: SyncFolder) throws {
        // On bytes: a folder path ending in a prepending character is one Swift character with
        // the `/` after it, so counting characters would cut the rest of the path wrongly.
        let prefix = (folder.path + "/").utf8
        guard directory.utf8.starts(with: prefix) else { return }
        guard let root = realpath(folder.path, nil) else { return }
        defer { free(root) }
        guard let real = realpath(directory, nil) else { return }  // not there: nothing to read
        defer { free(real) }
        let expected = String(cString: root) + "/" + String(directory.utf8.dropFirst(prefix.count))!
        guard String(cString: real).isSame(as: expected) else {
            throw KeychainError.integrityFailure("\(directory) is reached through a symbolic link; refused")
        }
    }

    package static func write(_ bytes: [UInt8], to path: String) throws {
        let temp = temporaryPath(path)
        var ok = false
        defer { if !ok { unlink(temp) } }
        try writeTemporary(bytes, temp, for: path, sync: true)
        guard rename(temp, path) == 0 else { throw failure("replace", path) }
        ok = true
        syncDirectory(PathText.parent(path))
    }

    /// `write` for many files at once, with the same promise (a reader sees each old file or
    /// its new one, whole, also after a crash): every temporary file is written, then one
    /// `syncfs` makes them all durable, then each is renamed into place and each directory
    /// synced once. One fsync per file made a first sync of 10,000 items wait on 20,000 flushes.
    package static func writeBatch(_ files: [(path: String, bytes: [UInt8])]) throws {
        var temps: [String] = []
        var renamed = 0
        defer { for t in temps.dropFirst(renamed) { unlink(t) } }
        for (path, bytes) in files {
            let temp = temporaryPath(path)
            try writeTemporary(bytes, temp, for: path, sync: false)
            temps.append(temp)
        }
        if let first = files.first {
            let dfd = open(PathText.parent(first.path), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard dfd >= 0 else { throw failure("write", first.path) }
            let flushed = flushFileSystem(dfd) == 0
            close(dfd)
            guard flushed else { throw failure("write", first.path) }
        }
        var directories: Set<String> = []
        for (i, (path, _)) in files.enumerated() {
            guard rename(temps[i], path) == 0 else { throw failure("replace", path) }
            renamed = i + 1
            directories.insert(PathText.parent(path))
        }
        for d in directories { syncDirectory(d) }
    }

    private static func temporaryPath(_ path: String) -> String {
        PathText.parent(path) + "/.\(PathText.lastComponent(path)).tmp-\(getpid())"
    }

    private static func failure(_ what: String, _ path: String) -> KeychainError {
        let code = errno
        return code == ENOSPC ? .diskFull : .io("cannot \(what) \(path): \(String(cString: strerror(code)))")
    }

    private static func writeTemporary(_ bytes: [UInt8], _ temp: String, for path: String, sync: Bool) throws {
        unlink(temp)
        let fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw failure("write", path) }
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + off, $0.count - off) }
            if n < 0 {
                if errno == EINTR { continue }
                let e = failure("write", path); close(fd); unlink(temp); throw e
            }
            off += n
        }
        if sync && fsync(fd) != 0 { let e = failure("write", path); close(fd); unlink(temp); throw e }
        close(fd)
    }

    private static func syncDirectory(_ directory: String) {
        let dfd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dfd >= 0 { fsync(dfd); close(dfd) }
    }
}
