import Foundation
import KeychainCrypto
import KeychainStore
import Synchronization

/// The daemon's end of the control socket: accepts connections from processes of the same
/// uid and answers each request through a `KeychainService`.
///
/// Bind the server before writing the `MountRecord`, so that a record always names a socket
/// that already listens.
public final class ControlServer: @unchecked Sendable {
    public let socketPath: String
    private let service: KeychainService
    private let listenFD: Int32
    private let running = Atomic<Bool>(true)
    private let started = Atomic<Bool>(false)
    /// Connections being answered; `stop` waits for them so that a reply (to `unmount`, say)
    /// is not cut off by the process exiting.
    private let inFlight = Mutex<Int>(0)
    /// A client that sends nothing for this long is dropped, so it cannot hold a thread.
    static let idleTimeout = 30

    /// Binds `socketPath` (its directory is created 0700); `storeBusy` if a daemon already listens there.
    public init(socketPath: String, service: KeychainService) throws {
        try KeychainLocations.makeDirectory((socketPath as NSString).deletingLastPathComponent)
        self.socketPath = socketPath
        self.service = service
        listenFD = try UnixSocket.listen(path: socketPath)
    }

    /// Starts the accept loop on its own thread.
    public func start() {
        guard !started.exchange(true, ordering: .sequentiallyConsistent) else { return }
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "keychainfs-control"
        thread.start()
    }

    /// Stops accepting, removes the socket, and waits up to two seconds for replies in progress
    /// (other than the caller's own, when called from a request handler).
    public func stop() {
        guard running.exchange(false, ordering: .sequentiallyConsistent) else { return }
        unlink(socketPath)
        // shutdown wakes the thread blocked in accept() (close alone would not); that thread
        // closes the descriptor, so it never calls accept() on a number reused meanwhile.
        shutdown(listenFD, Int32(SHUT_RDWR))
        if !started.exchange(true, ordering: .sequentiallyConsistent) { close(listenFD) }
        let own = Thread.current.threadDictionary[Self.handlerMarker] != nil ? 1 : 0
        let deadline = Date().addingTimeInterval(2)
        while inFlight.withLock({ $0 }) > own && Date() < deadline { usleep(10_000) }
    }

    private static let handlerMarker = "keychainfs.control-handler"

    private func acceptLoop() {
        defer { close(listenFD) }
        while running.load(ordering: .sequentiallyConsistent) {
            let fd = accept(listenFD, nil, nil)
            if fd < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                if !running.load(ordering: .sequentiallyConsistent) { return }
                // EMFILE and the like: back off rather than spin.
                usleep(100_000)
                continue
            }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            guard UnixSocket.peerUID(fd) == getuid() else {
                close(fd)
                continue
            }
            inFlight.withLock { $0 += 1 }
            let thread = Thread { [self] in
                Thread.current.threadDictionary[Self.handlerMarker] = true
                serve(fd)
                close(fd)
                inFlight.withLock { $0 -= 1 }
            }
            thread.name = "keychainfs-control-client"
            thread.start()
        }
    }

    private func serve(_ fd: Int32) {
        UnixSocket.setTimeout(fd, seconds: Self.idleTimeout)
        while true {
            let response: ControlResponse
            do {
                guard let request = try ControlFrame.receive(ControlRequest.self, from: fd) else { return }
                response = answer(request)
            } catch {
                // The connection itself failed (timeout, garbage): nothing sensible to reply on.
                return
            }
            do { try ControlFrame.send(response, to: fd) } catch { return }
        }
    }

    private func answer(_ request: ControlRequest) -> ControlResponse {
        do {
            switch request {
            case .save(let key, let secret, let extras, let changes, let updateExisting):
                return .saved(try service.save(key: key, secret: SecureBytes(copying: secret),
                                               extras: extras.map { SecureBytes(copying: $0) }, changes: changes,
                                               updateExisting: updateExisting))
            case .find(let query, let withSecrets, let limit):
                return .found(try service.find(query: query, withSecrets: withSecrets, limit: limit).map(WireItem.init))
            case .delete(let query):
                return .deleted(count: try service.delete(query: query))
            case .dump(let withSecrets):
                return .found(try service.dump(withSecrets: withSecrets).map(WireItem.init))
            case .verify:
                return .verified(try service.verify())
            case .status:
                return .status(try service.status())
            case .lock:
                try service.lock()
            case .unlock(let passphrase):
                try service.unlock(passphrase: passphrase.map { SecureBytes(copying: $0) })
            case .unmount:
                try service.unmount()
            }
            return .done
        } catch let error as KeychainError {
            return .failed(error)
        } catch {
            return .failed(.io("\(error)"))
        }
    }
}
