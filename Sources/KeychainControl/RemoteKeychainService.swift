import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStore

/// The keychain service of a running daemon, over its control socket. Each call is one
/// connection carrying one request and its reply.
public final class RemoteKeychainService: KeychainService {
    public let socketPath: String
    /// Long enough for an unlock's key derivation and a large dump; a daemon that says
    /// nothing for this long is treated as gone.
    static let replyTimeout = 120

    public init(socketPath: String) { self.socketPath = socketPath }

    private func call(_ request: ControlRequest) throws -> ControlResponse {
        guard let fd = try UnixSocket.connect(path: socketPath) else {
            throw KeychainError.notMounted("no daemon answers on \(socketPath)")
        }
        defer { close(fd) }
        // Passphrases and secrets go only to a daemon of our own uid.
        guard UnixSocket.peerUID(fd) == getuid() else {
            throw KeychainError.io("the process on \(socketPath) belongs to another user; refusing to talk to it")
        }
        UnixSocket.setTimeout(fd, seconds: Self.replyTimeout)
        try ControlFrame.send(request, to: fd)
        guard let response = try ControlFrame.receive(ControlResponse.self, from: fd) else {
            throw KeychainError.io("the daemon closed the connection without replying (was the caller's uid refused?)")
        }
        if case .failed(let error) = response { throw error }
        return response
    }

    private static func unexpected(_ r: ControlResponse) -> KeychainError {
        KeychainError.io("the daemon sent a reply of the wrong kind (\(String(describing: r).prefix(while: { $0 != "(" })))")
    }

    public func save(key: ItemKey, secret: SecureBytes, extras: SecureBytes?, changes: AttributeChanges,
                     updateExisting: Bool) throws -> ItemRecord {
        let r = try call(.save(key: key, secret: secret.wireData, extras: extras?.wireData, changes: changes,
                               updateExisting: updateExisting))
        guard case .saved(let record) = r else { throw Self.unexpected(r) }
        return record
    }

    public func find(query: ItemQuery, withSecrets: Bool, limit: Int?) throws -> [FoundItem] {
        let r = try call(.find(query: query, withSecrets: withSecrets, limit: limit))
        guard case .found(let items) = r else { throw Self.unexpected(r) }
        return items.map(\.foundItem)
    }

    public func delete(query: ItemQuery) throws -> Int {
        let r = try call(.delete(query: query))
        guard case .deleted(let count) = r else { throw Self.unexpected(r) }
        return count
    }

    public func dump(withSecrets: Bool) throws -> [FoundItem] {
        let r = try call(.dump(withSecrets: withSecrets))
        guard case .found(let items) = r else { throw Self.unexpected(r) }
        return items.map(\.foundItem)
    }

    public func verify() throws -> VerifyReport {
        let r = try call(.verify)
        guard case .verified(let report) = r else { throw Self.unexpected(r) }
        return report
    }

    public func status() throws -> KeychainStatus {
        let r = try call(.status)
        guard case .status(let status) = r else { throw Self.unexpected(r) }
        return status
    }

    public func lock() throws { try expectDone(.lock) }
    public func unlock(passphrase: SecureBytes?) throws { try expectDone(.unlock(passphrase: passphrase?.wireData)) }
    public func unmount() throws { try expectDone(.unmount) }

    private func expectDone(_ request: ControlRequest) throws {
        let r = try call(request)
        guard case .done = r else { throw Self.unexpected(r) }
    }
}
