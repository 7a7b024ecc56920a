// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif
import KeychainBatch
import KeychainControlProtocol
import KeychainCrypto
import KeychainModel
import Synchronization

/// The keychain service of a running daemon, over its control socket. Each call is one
/// connection carrying one request and its reply.
package final class RemoteKeychainService: KeychainService {
    package let socketPath: String
    /// The connection that found the daemon (`DaemonLocator`), kept for the first call: a
    /// command that makes one call connects once. Nil once taken.
    private let found: Mutex<(fd: Int32, usableUntil: Deadline)?>
    /// The daemon drops a connection whose request has not arrived 5 s after it connected
    /// (`ControlServer.requestDeadline`); a found connection older than this (the command read
    /// a secret from the terminal meanwhile, say) is replaced by a new one.
    static let foundConnectionLifetime: Double = 2
    /// Long enough for an unlock's key derivation behind other unlocks, and a large dump; a
    /// daemon that has not answered by then is treated as gone.
    static let replyTimeout: Double = 120

    package init(socketPath: String) {
        self.socketPath = socketPath
        found = Mutex(nil)
    }

    /// Over `connection`, already connected to `socketPath` and checked (`connect`), for the
    /// first call; this instance closes it.
    init(socketPath: String, connection: Int32) {
        self.socketPath = socketPath
        found = Mutex((connection, .after(seconds: Self.foundConnectionLifetime)))
    }

    deinit {
        if let (fd, _) = found.withLock({ $0.take() }) { close(fd) }
    }

    /// The found connection if it is still fresh and the daemon has not closed it, else a new one.
    private func connection() throws -> Int32? {
        if let (fd, usableUntil) = found.withLock({ $0.take() }) {
            // Nothing is due from the daemon before the request: anything readable is its close.
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if !usableUntil.hasPassed && poll(&p, 1, 0) == 0 { return fd }
            close(fd)
        }
        return try Self.connect(socketPath, deadline: .after(seconds: 5))
    }

    /// A connection to the daemon, checked to be of this user: passphrases and secrets go to
    /// no one else. Nil when nothing listens, or when the socket's directory is not trusted.
    static func connect(_ socketPath: String, deadline: Deadline) throws -> Int32? {
        guard PrivateFile.isPrivateDirectory(PathText.parent(socketPath)),
              let fd = try UnixSocket.connect(path: socketPath, deadline: deadline) else { return nil }
        guard UnixSocket.peerUID(fd) == getuid() else {
            close(fd)
            throw KeychainError.storeBusy("the process on \(socketPath) belongs to another user; refusing to talk to it")
        }
        do { try awaitIdentified(fd, deadline: deadline) } catch {
            close(fd)
            throw error
        }
        return fd
    }

    /// The daemon identifies each client when it accepts the connection (its executable, for
    /// per-program access), while the client is still dumpable; it then sends `identified`.
    /// Only after it may the client make itself non-dumpable (`call`), which hides its /proc
    /// entries from the daemon. A daemon that answers with something else is older than this
    /// handshake; one that says nothing before the deadline is stopped or overloaded (`silent`).
    package static func awaitIdentified(_ fd: Int32, deadline: Deadline) throws {
        let received: (ControlFrame.Header, SecureBytes)?
        let limit = min(deadline, .after(seconds: handshakeTimeout))
        do { received = try ControlFrame.receive(from: fd, deadline: limit) } catch let e as KeychainError {
            if case .daemonVersionMismatch = e { throw e }
            // Silence is a stopped or overloaded daemon (the kernel accepts for it), not an
            // older one: that one answers the first request, just not with `identified`.
            if limit.hasPassed { throw silent }
            throw KeychainError.daemonVersionMismatch(running: "one that does not identify its clients (\(e.description))")
        }
        guard let (header, payload) = received else { throw KeychainError.io("the daemon closed the connection before identifying it") }
        let reply = try ControlReply(kind: header.kind, payload: payload)
        switch reply {
        case .identified: return
        case .failed(let error): throw error
        default: throw unexpected(reply)
        }
    }

    static let handshakeTimeout: Double = 5

    /// A daemon that accepted the connection and said nothing before the deadline.
    package static let silent = KeychainError.storeBusy("the daemon accepted the connection but did not answer in time")

    /// Sends `request` and reads the replies up to the last one: the single reply, or the
    /// `end` of a stream of items or deleted records, each of which goes to `onItem` or
    /// `onDeleted`, or the `exportEnd` of a stream of parts of an export page, each of which
    /// goes to `onBatch`.
    private func call(_ request: ControlRequest, onItem: (FoundItem) throws -> Void = { _ in },
                      onDeleted: (ItemRecord) throws -> Void = { _ in },
                      onBatch: (ItemBatch) throws -> Void = { _ in }) throws -> ControlReply {
        // Encoded before connecting: a request too large for one frame fails without a connection.
        let frame = try request.frame()
        let deadline = Deadline.after(seconds: Self.replyTimeout)
        guard let fd = try connection() else {
            throw KeychainError.notMounted("no daemon answers on \(socketPath)")
        }
        // A reply may carry secrets (find -w/-g, dump-keychain -d, export) and a request a
        // passphrase: from here on, none of the user's other processes may read this one's
        // memory. Not before the connection: the daemon identifies this process as it accepts
        // it, which a non-dumpable process hides from it (`awaitIdentified`).
        ProcessProtection.makeNotDumpable()
        defer { close(fd) }
        try ControlFrame.send(frame, to: fd, deadline: deadline)
        while true {
            guard let (header, payload) = try ControlFrame.receive(from: fd, deadline: deadline) else {
                throw KeychainError.io("the daemon closed the connection without replying")
            }
            let reply = try ControlReply(kind: header.kind, payload: payload)
            switch reply {
            case .item(let item): try onItem(item)
            case .deleted(let record): try onDeleted(record)
            case .exported(let batch): try onBatch(batch)
            case .failed(let error): throw error
            default: return reply
            }
        }
    }

    private static func unexpected(_ r: ControlReply) -> KeychainError {
        KeychainError.io("the daemon sent a reply of the wrong kind (\(r.kind))")
    }

    package func save(key: ItemKey, secret: SecureBytes, extras: SecureBytes?, changes: AttributeChanges,
                     updateExisting: Bool) throws -> ItemRecord {
        let r = try call(.save(key: key, secret: secret, extras: extras, changes: changes, updateExisting: updateExisting))
        guard case .saved(let record) = r else { throw Self.unexpected(r) }
        return record
    }

    package func setAccess(key: ItemKey, list: AccessList, repin: [AccessProgram], passphrase: SecureBytes) throws -> ItemRecord {
        let r = try call(.setAccess(key: key, list: list, repin: repin, passphrase: passphrase))
        guard case .saved(let record) = r else { throw Self.unexpected(r) }
        return record
    }

    private func items(_ request: ControlRequest) throws -> [FoundItem] {
        var items: [FoundItem] = []
        let r = try call(request) { items.append($0) }
        guard case .end(let count) = r else { throw Self.unexpected(r) }
        guard count == items.count else {
            throw KeychainError.io("the daemon announced \(count) items and sent \(items.count)")
        }
        return items
    }

    package func find(query: ItemQuery, withSecrets: Bool, limit: Int?) throws -> [FoundItem] {
        try items(.find(query: query, withSecrets: withSecrets, limit: limit))
    }

    package func delete(query: ItemQuery, all: Bool) throws -> [ItemRecord] {
        var records: [ItemRecord] = []
        let r = try call(.delete(query: query, all: all), onDeleted: { records.append($0) })
        guard case .end(let count) = r else { throw Self.unexpected(r) }
        guard count == records.count else {
            throw KeychainError.io("the daemon announced \(count) deleted items and sent \(records.count)")
        }
        return records
    }

    package func dump(withSecrets: Bool) throws -> [FoundItem] {
        try items(.dump(withSecrets: withSecrets))
    }

    package func verify() throws -> VerifyReport {
        let r = try call(.verify)
        guard case .verified(let report) = r else { throw Self.unexpected(r) }
        return report
    }

    package func status() throws -> KeychainStatus {
        let r = try call(.status)
        guard case .status(let status) = r else { throw Self.unexpected(r) }
        return status
    }

    package func sync(_ action: SyncAction, folder: String?, passphrase: SecureBytes?, scryptLogN: UInt8?) throws -> SyncOutcome {
        let r = try call(.sync(action: action, folder: folder, passphrase: passphrase, scryptLogN: scryptLogN))
        guard case .synced(let outcome) = r else { throw Self.unexpected(r) }
        return outcome
    }

    /// A batch too large for one frame is sent in halves, each its own transaction.
    package func importItems(_ batch: ItemBatch, overwrite: Bool) throws -> ImportReport {
        let r: ControlReply
        do {
            r = try call(.importItems(batch: batch, overwrite: overwrite))
        } catch let e as KeychainError where batch.count > 1 && ControlFrame.isTooLarge(e) {
            let half = batch.count / 2
            var report = try importItems(batch.slice(0..<half), overwrite: overwrite)
            report.add(try importItems(batch.slice(half..<batch.count), overwrite: overwrite))
            return report
        }
        guard case .imported(let report) = r else { throw Self.unexpected(r) }
        return report
    }

    package func exportItems(afterID: Int64, limit: Int) throws -> ExportPage {
        var batch = ItemBatch()
        let r = try call(.exportItems(afterID: afterID, limit: limit), onBatch: { part in
            for entry in part.entries {
                part.withSecretAndExtras(entry) { batch.append(entry.record, secret: $0, extras: $1) }
            }
        })
        guard case .exportEnd(let count, let damaged, let next) = r else { throw Self.unexpected(r) }
        guard count == batch.count else {
            throw KeychainError.io("the daemon announced \(count) items and sent \(batch.count)")
        }
        return ExportPage(batch: batch, damaged: damaged, next: next)
    }

    package func lock() throws { try expectDone(.lock) }
    package func unlock(passphrase: SecureBytes?) throws { try expectDone(.unlock(passphrase: passphrase)) }
    package func unmount() throws { try expectDone(.unmount) }
    package func setLockAfter(_ seconds: Int?) throws { try expectDone(.setLockAfter(seconds: seconds)) }

    private func expectDone(_ request: ControlRequest) throws {
        let r = try call(request)
        guard case .done = r else { throw Self.unexpected(r) }
    }
}
