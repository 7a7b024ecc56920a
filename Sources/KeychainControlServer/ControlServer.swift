import Foundation
import KeychainAccess
import KeychainControlProtocol
import KeychainCrypto
import KeychainModel
import Logging
import Synchronization

/// The daemon's end of the control socket: accepts connections from processes of the same
/// uid and answers each one's request through a `KeychainService`.
///
/// Bounded whatever clients do:
/// - One thread reads every connection's request, without blocking, so an idle connection costs
///   a descriptor and no thread. At most `maxPendingConnections` wait for their request; a new
///   one pushes out the oldest, so a fresh `lock` always gets in.
/// - Each request must arrive whole within `requestDeadline` of the connection, however it
///   trickles in, or the connection is dropped; each reply must be taken within `replyDeadline`.
/// - A frame is at most `ControlFrame.maxPayload` bytes; a larger one is refused from its header.
/// - `workerThreads` threads answer requests, at most `maxQueuedRequests` wait for them; `lock`
///   and `unmount` have a thread of their own, so they never wait behind slow requests.
///
/// Bind the server before writing the `MountRecord`, so that a record always names a socket
/// that already listens.
package final class ControlServer: Sendable {
    package let socketPath: String
    /// The service that answers a connection's request, for the caller identified at accept.
    private let service: @Sendable (AccessCaller) -> any KeychainService
    /// Identifies a fresh connection's peer (per-program access), before it may harden.
    private let identify: @Sendable (Int32) -> AccessCaller
    private let listenFD: Int32
    /// Written to wake the reading thread when the server stops.
    private let wakeFDs: (read: Int32, write: Int32)
    private let running = Atomic<Bool>(true)
    private let started = Atomic<Bool>(false)
    /// Requests taken from the reading thread and not yet answered; `stop` waits for them so
    /// that a reply (to `unmount`, say) is not cut off by the process exiting.
    private let inFlight = Mutex<Int>(0)
    private let requests = RequestQueue()
    /// Connections identified off the reading thread, for it to take; `open` until it stops.
    private let identified = Mutex<(open: Bool, ready: [Pending])>((true, []))
    private let identifyingSlots = HolderLimit(max: ControlServer.maxIdentifying)
    private let urgentRequests = RequestQueue()

    private static let log = Logger(label: "keychainfs.control")

    package static let maxPendingConnections = 64
    /// Connections identified at once, each on a thread of its own; past it, a new connection
    /// is served unidentified (refused by every item with an access list).
    package static let maxIdentifying = 16
    /// More than `CallerWaits.max`: callers that make their identification slow hold that many
    /// at most, and the rest serve everyone else.
    package static let workerThreads = 6
    package static let maxQueuedRequests = 32
    package static let requestDeadline: Double = 5
    package static let replyDeadline: Double = 30

    /// Binds `socketPath`; a socket in the runtime directory gets that directory made (0700,
    /// this user's). `storeBusy` if a daemon already listens there.
    package convenience init(socketPath: String, service: any KeychainService) throws {
        try self.init(socketPath: socketPath, serving: { _ in service }, identify: { _ in .unidentified("no access control") })
    }

    /// `identify` runs on the reading thread as each connection is accepted, before the
    /// `identified` frame that lets the client harden; `serving` gives the service for a
    /// request's caller.
    package init(socketPath: String, serving: @escaping @Sendable (AccessCaller) -> any KeychainService,
                 identify: @escaping @Sendable (Int32) -> AccessCaller) throws {
        let directory = PathText.parent(socketPath)
        if directory == KeychainLocations.runtimeDirectory { try KeychainLocations.makeDirectory(directory) }
        guard PrivateFile.isPrivateDirectory(directory) else {
            throw KeychainError.io("\(directory) is not a directory of this user that only it can write; refusing to listen there")
        }
        self.socketPath = socketPath
        self.service = serving
        self.identify = identify
        // A peer that hangs up must never end the serving process: every send here passes
        // MSG_NOSIGNAL, and this covers a write that does not (a library's, or the wake pipe's).
        signal(SIGPIPE, SIG_IGN)
        listenFD = try UnixSocket.listen(path: socketPath)
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else {
            close(listenFD)
            throw KeychainError.io("pipe: \(String(cString: strerror(errno)))")
        }
        for fd in fds { Self.configure(fd) }
        wakeFDs = (fds[0], fds[1])
    }

    deinit {
        close(wakeFDs.read)
        close(wakeFDs.write)
    }

    private static func configure(_ fd: Int32) {
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    }

    /// Starts the reading thread and the threads that answer.
    package func start() {
        guard !started.exchange(true, ordering: .sequentiallyConsistent) else { return }
        spawn("keychainfs-control") { [self] in readLoop() }
        for i in 0..<Self.workerThreads {
            spawn("keychainfs-control-\(i)") { [self] in answerLoop(requests) }
        }
        spawn("keychainfs-control-urgent") { [self] in answerLoop(urgentRequests) }
    }

    private func spawn(_ name: String, _ body: @escaping @Sendable () -> Void) {
        let thread = Thread {
            Thread.current.threadDictionary[Self.handlerMarker] = true
            body()
        }
        thread.name = name
        thread.start()
    }

    /// Stops accepting, removes the socket, and waits up to two seconds for replies in progress
    /// (other than the caller's own, when called from a request handler).
    package func stop() {
        guard running.exchange(false, ordering: .sequentiallyConsistent) else { return }
        unlink(socketPath)
        _ = write(wakeFDs.write, "x", 1)
        for dropped in requests.close() + urgentRequests.close() {
            close(dropped.fd)
            inFlight.withLock { $0 -= 1 }
        }
        if !started.exchange(true, ordering: .sequentiallyConsistent) { close(listenFD) }
        let own = Thread.current.threadDictionary[Self.handlerMarker] != nil ? 1 : 0
        let deadline = Deadline.after(seconds: 2)
        // Short steps: an unmount waits for this, and the reply in flight is usually its own.
        while inFlight.withLock({ $0 }) > own && !deadline.hasPassed { usleep(500) }
    }

    private static let handlerMarker = "keychainfs.control-handler"

    // MARK: Reading requests

    /// A connection whose request is still arriving.
    // @unchecked Sendable: made on an identifying thread, then used by the reading thread alone.
    private final class Pending: @unchecked Sendable {
        let fd: Int32
        let caller: AccessCaller
        /// The process that connected (SO_PEERCRED), whom `caller` identifies.
        let connector: pid_t?
        /// A process other than the connector that wrote part of the request, if any.
        var otherWriter: pid_t?
        /// Part of the request was written before the connector was identified.
        let writtenBefore: Bool
        let deadline: Deadline
        var header: [UInt8] = []
        var parsed: ControlFrame.Header?
        /// Grows with what arrives, up to the length the header announced.
        var payload = SecureBytes()
        var received = 0

        init(fd: Int32, caller: AccessCaller, connector: pid_t?, writtenBefore: Bool) {
            self.fd = fd
            self.caller = caller
            self.connector = connector
            self.writtenBefore = writtenBefore
            deadline = .after(seconds: ControlServer.requestDeadline)
        }

        func noteWriter(_ writer: pid_t) {
            if writer != connector, otherWriter == nil { otherWriter = writer }
        }

        /// Who the request is answered as: the identified peer only if it wrote the request
        /// itself, after it was identified. A connection handed to another process (a child
        /// that inherits it, while the connector execs a listed program), or a request written
        /// before the connector exec'd the program identified, is answered as no one.
        var requestCaller: AccessCaller {
            if writtenBefore { return .unidentified("the request was written before the daemon identified its sender") }
            guard let writer = otherWriter else { return caller }
            return .unidentified("the request was written by process \(writer), not the process that connected (\(connector.map(String.init) ?? "unknown"))")
        }
    }

    private enum Progress { case waiting, complete, closed }

    private func readLoop() {
        var pending: [Pending] = []
        defer {
            for p in pending { close(p.fd) }
            close(listenFD)
        }
        defer {
            for p in identified.withLock({ h in h.open = false; return h.ready }) { close(p.fd) }
        }
        while running.load(ordering: .sequentiallyConsistent) {
            var fds = [pollfd(fd: wakeFDs.read, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0)]
            fds += pending.map { pollfd(fd: $0.fd, events: Int16(POLLIN), revents: 0) }
            let timeout = pending.map(\.deadline).min()?.remainingMilliseconds ?? -1
            if poll(&fds, nfds_t(fds.count), timeout) < 0 && errno != EINTR { usleep(10_000) }
            guard running.load(ordering: .sequentiallyConsistent) else { return }

            var keep: [Pending] = []
            for (i, p) in pending.enumerated() {
                let ready = fds[i + 2].revents != 0
                switch ready ? read(p) : .waiting {
                case .closed:
                    close(p.fd)
                case .complete:
                    dispatch(p)
                case .waiting:
                    // The deadline covers the whole request, not each read.
                    if p.deadline.hasPassed { close(p.fd) } else { keep.append(p) }
                }
            }
            pending = keep
            if fds[0].revents != 0 {
                var drain = [UInt8](repeating: 0, count: 64)
                while Glibc.read(wakeFDs.read, &drain, drain.count) > 0 {}
                pending += identified.withLock { h in defer { h.ready.removeAll() }; return h.ready }
                // As at accept: the oldest waiting connections make room.
                let excess = pending.count - Self.maxPendingConnections
                if excess > 0 {
                    for p in pending.prefix(excess) { close(p.fd) }
                    pending.removeFirst(excess)
                }
            }
            if fds[1].revents != 0 { accept(into: &pending) }
        }
    }

    private func accept(into pending: inout [Pending]) {
        while true {
            let fd = Glibc.accept(listenFD, nil, nil)
            if fd < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                // EAGAIN: all taken. EMFILE and the like: the next poll retries.
                return
            }
            Self.configure(fd)
            // Before any read: each read then says who wrote what it returns (SocketSender).
            guard SocketSender.passCredentials(fd) else {
                close(fd)
                continue
            }
            let peer = UnixSocket.peerUID(fd)
            guard peer == getuid() else {
                Self.log.warning("refused a control connection from uid \(peer.map(String.init) ?? "unknown")")
                close(fd)
                continue
            }
            if pending.count >= Self.maxPendingConnections {
                // The oldest waiting connection is the likeliest to be idle; a fresh one (a
                // `lock`, say) sends its request at once.
                close(pending.removeFirst().fd)
            }
            // Identified on a thread of its own, while the client waits for `identified` and is
            // still dumpable: identifying reads the client's /proc files and stats its
            // executable, which the client can make slow (an executable on a file system that
            // does not answer); only that client waits, this thread reads everyone's requests.
            guard let slot = identifyingSlots.enter() else {
                Self.log.warning("a control connection is not identified: \(Self.maxIdentifying) others are being identified already")
                if let p = greet(fd, as: .unidentified("\(Self.maxIdentifying) other connections were being identified already (slow clients?)")) {
                    pending.append(p)
                }
                continue
            }
            Thread.detachNewThread { [self] in
                let p = greet(fd, as: identify(fd))
                slot.end()
                handOver(p)
            }
        }
    }

    /// Sends `identified` to a fresh connection identified as `caller`; nil (and closed) if
    /// it cannot be sent.
    private func greet(_ fd: Int32, as caller: AccessCaller) -> Pending? {
        let writtenBefore = SocketSender.hasWaitingBytes(fd)
        // A fresh connection's send buffer takes this small frame whole.
        guard let frame = try? ControlReply.identified.frame(),
              frame.withUnsafeBytes({ Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }) == frame.count else {
            close(fd)
            return nil
        }
        return Pending(fd: fd, caller: caller, connector: SocketSender.connector(fd), writtenBefore: writtenBefore)
    }

    /// A connection identified off the reading thread, passed to it (woken through the wake
    /// pipe); closed if the server has stopped reading.
    private func handOver(_ p: Pending?) {
        guard let p else { return }
        let taken = identified.withLock { h in
            guard h.open else { return false }
            h.ready.append(p)
            return true
        }
        if taken { _ = write(wakeFDs.write, "i", 1) } else { close(p.fd) }
    }

    /// Reads what has arrived on `p`; replies to a bad header and closes.
    private func read(_ p: Pending) -> Progress {
        while true {
            if p.parsed == nil {
                var chunk = [UInt8](repeating: 0, count: ControlFrame.headerSize - p.header.count)
                let (n, writer) = chunk.withUnsafeMutableBytes { SocketSender.receive(p.fd, into: $0) }
                if n == 0 { return .closed }
                if n < 0 { return errno == EAGAIN || errno == EINTR ? .waiting : .closed }
                p.noteWriter(writer)
                p.header += chunk[0..<n]
                guard p.header.count == ControlFrame.headerSize else { continue }
                let header: ControlFrame.Header
                do { header = try ControlFrame.Header(parsing: p.header) } catch {
                    replyAndClose(p.fd, (error as? KeychainError).map(ControlReply.failed))
                    return .closed
                }
                guard header.version == ControlProtocol.version else {
                    replyAndClose(p.fd, frame: ControlFrame.versionMismatch())
                    return .closed
                }
                guard ControlRequest.Kind(rawValue: header.kind) != nil else {
                    replyAndClose(p.fd, .failed(.io("unknown control request kind \(header.kind)")))
                    return .closed
                }
                p.parsed = header
                p.payload = SecureBytes(count: min(header.length, 64 << 10))
            }
            guard let header = p.parsed else { return .closed }
            if p.received == header.length { return .complete }
            if p.received == p.payload.count { p.payload.resize(to: min(header.length, p.payload.count * 2)) }
            let (n, writer) = p.payload.withUnsafeMutableBytes { raw in
                SocketSender.receive(p.fd, into: UnsafeMutableRawBufferPointer(rebasing: raw[p.received...]))
            }
            if n == 0 { return .closed }
            if n < 0 { return errno == EAGAIN || errno == EINTR ? .waiting : .closed }
            p.noteWriter(writer)
            p.received += n
        }
    }

    private func dispatch(_ p: Pending) {
        guard let header = p.parsed, let kind = ControlRequest.Kind(rawValue: header.kind) else {
            close(p.fd)
            return
        }
        let request = ReceivedRequest(fd: p.fd, kind: header.kind, payload: p.payload, caller: p.requestCaller)
        let urgent = kind == .lock || kind == .unmount
        inFlight.withLock { $0 += 1 }
        guard (urgent ? urgentRequests : requests).push(request, limit: Self.maxQueuedRequests) else {
            inFlight.withLock { $0 -= 1 }
            replyAndClose(p.fd, .failed(.storeBusy("the daemon is busy with \(Self.maxQueuedRequests) requests; try again")))
            return
        }
    }

    /// A short reply from the reading thread, which must not block: a fresh connection's send
    /// buffer takes it whole, and if it does not, the client goes without it.
    private func replyAndClose(_ fd: Int32, _ reply: ControlReply?) {
        if let reply, let frame = try? reply.frame() { replyAndClose(fd, frame: frame) } else { close(fd) }
    }

    private func replyAndClose(_ fd: Int32, frame: SecureBytes) {
        _ = frame.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
        close(fd)
    }

    // MARK: Answering

    private func answerLoop(_ queue: RequestQueue) {
        while let request = queue.pop() {
            answer(request)
            close(request.fd)
            inFlight.withLock { $0 -= 1 }
        }
    }

    private func answer(_ received: ReceivedRequest) {
        let service = self.service(received.caller)
        let deadline = Deadline.after(seconds: Self.replyDeadline)
        func send(_ reply: ControlReply) throws { try ControlFrame.send(try reply.frame(), to: received.fd, deadline: deadline) }
        do {
            let request = try ControlRequest(kind: received.kind, payload: received.payload)
            received.payload.wipe()
            switch request {
            case .save(let key, let secret, let extras, let changes, let updateExisting):
                try send(.saved(try service.save(key: key, secret: secret, extras: extras, changes: changes,
                                                 updateExisting: updateExisting)))
            case .find(let query, let withSecrets, let limit):
                try stream(try service.find(query: query, withSecrets: withSecrets, limit: limit), send)
            case .delete(let query, let all):
                let deleted = try service.delete(query: query, all: all)
                for record in deleted { try send(.deleted(record)) }
                try send(.end(count: deleted.count))
            case .dump(let withSecrets):
                try stream(try service.dump(withSecrets: withSecrets), send)
            case .verify:
                try send(.verified(try service.verify()))
            case .status:
                try send(.status(try service.status()))
            case .lock:
                try service.lock()
                try send(.done)
            case .unlock(let passphrase):
                try service.unlock(passphrase: passphrase)
                try send(.done)
            case .unmount:
                try service.unmount()
                try send(.done)
            case .setLockAfter(let seconds):
                try service.setLockAfter(seconds)
                try send(.done)
            case .importItems(let batch, let overwrite):
                try send(.imported(try service.importItems(batch, overwrite: overwrite)))
            case .sync(let action, let folder, let passphrase, let scryptLogN):
                defer { passphrase?.wipe() }
                try send(.synced(try service.sync(action, folder: folder, passphrase: passphrase, scryptLogN: scryptLogN)))
            case .setAccess(let key, let list, let repin, let passphrase):
                try send(.saved(try service.setAccess(key: key, list: list, repin: repin, passphrase: passphrase)))
            case .exportItems(let afterID, let limit):
                let page = try service.exportItems(afterID: afterID, limit: limit)
                for part in page.batch.slices(maxItems: Self.exportFrameItems, maxSecretBytes: Self.exportFrameSecretBytes) {
                    try send(.exported(part))
                }
                try send(.exportEnd(count: page.batch.count, damaged: page.damaged, next: page.next))
            }
        } catch let error as KeychainError {
            try? send(.failed(error))
        } catch {
            try? send(.failed(.io("\(error)")))
        }
    }

    /// An export page goes in frames of at most this many items and (unless one item is larger
    /// on its own) this many bytes of secrets, well under `ControlFrame.maxPayload`.
    static let exportFrameItems = 500
    static let exportFrameSecretBytes = 1 << 20

    /// One frame per item, then the count.
    private func stream(_ items: [FoundItem], _ send: (ControlReply) throws -> Void) throws {
        for item in items { try send(.item(item)) }
        try send(.end(count: items.count))
    }
}

/// A request read whole, waiting for a thread to answer it.
private struct ReceivedRequest: Sendable {
    let fd: Int32
    let kind: UInt16
    let payload: SecureBytes
    let caller: AccessCaller
}

/// A bounded queue of requests for the answering threads.
private final class RequestQueue: Sendable {
    private let state = Mutex<(items: [ReceivedRequest], closed: Bool)>(([], false))
    private let available = DispatchSemaphore(value: 0)

    /// False when `limit` requests already wait, or the queue is closed.
    func push(_ request: ReceivedRequest, limit: Int) -> Bool {
        let taken = state.withLock { s -> Bool in
            guard !s.closed, s.items.count < limit else { return false }
            s.items.append(request)
            return true
        }
        if taken { available.signal() }
        return taken
    }

    /// The next request; nil once the queue is closed.
    func pop() -> ReceivedRequest? {
        while true {
            available.wait()
            let next = state.withLock { s -> (ReceivedRequest?, Bool) in
                (s.items.isEmpty ? nil : s.items.removeFirst(), s.closed)
            }
            if let request = next.0 { return request }
            if next.1 {
                // Pass the wake-up on to the next waiting thread.
                available.signal()
                return nil
            }
        }
    }

    /// Ends the queue; returns the requests that were still waiting.
    func close() -> [ReceivedRequest] {
        let dropped = state.withLock { s -> [ReceivedRequest] in
            s.closed = true
            defer { s.items.removeAll() }
            return s.items
        }
        available.signal()
        return dropped
    }
}
