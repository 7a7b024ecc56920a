import CSDBusShim
import CSystemd
import Glibc
import Synchronization

/// One member of an interface, for its vtable and its introspection.
package struct BusMember: Sendable {
    package enum Kind: Sendable { case method, property, writableProperty, signal }
    package var kind: Kind
    package var name: String
    /// Methods: the arguments' signature; properties: the value's; signals: the arguments'.
    package var signature: String
    /// Methods: the result's signature.
    package var result: String
    /// Argument names (inputs then outputs), shown by introspection.
    package var names: [String]

    package static func method(_ name: String, _ signature: String, _ result: String, _ names: [String]) -> BusMember {
        BusMember(kind: .method, name: name, signature: signature, result: result, names: names)
    }
    package static func property(_ name: String, _ signature: String, writable: Bool = false) -> BusMember {
        BusMember(kind: writable ? .writableProperty : .property, name: name, signature: signature, result: "", names: [])
    }
    package static func signal(_ name: String, _ signature: String, _ names: [String]) -> BusMember {
        BusMember(kind: .signal, name: name, signature: signature, result: "", names: names)
    }
}

/// An interface served at one object path or under a prefix (a fallback: every path below it
/// that `exists` accepts). Called only on the bus's thread.
package protocol BusInterface: AnyObject {
    var name: String { get }
    var members: [BusMember] { get }
    /// Whether an object with this interface is at `path` (for a prefix registration).
    func exists(_ path: String) -> Bool
    /// Answers a method call by appending its results to `reply`.
    func call(_ member: String, path: String, message: BusMessage, reply: BusMessage) throws
    /// Appends the property's value (inside the variant sd-bus has opened).
    func get(_ property: String, path: String, into reply: BusMessage) throws
    /// Sets a writable property from `value` (positioned inside its variant).
    func set(_ property: String, path: String, from value: BusMessage) throws
    /// The full paths of the objects below the registered prefix `path`, for introspection
    /// (sd-bus keeps the direct children).
    func children(of path: String) -> [String]
}

extension BusInterface {
    package func exists(_ path: String) -> Bool { true }
    package func set(_ property: String, path: String, from value: BusMessage) throws {
        throw BusError("org.freedesktop.DBus.Error.PropertyReadOnly", "\(property) is read-only")
    }
    package func children(of path: String) -> [String] { [] }
}

/// A connection to a bus through sd-bus, with the one thread that uses it. sd-bus is not
/// thread-safe, so everything that touches the connection runs on that thread: other threads
/// `post` work to it (a signal to emit), which wakes its poll through an eventfd.
package final class BusConnection: @unchecked Sendable {
    private let bus: OpaquePointer
    /// A pipe whose read end the run loop polls beside the bus: a byte written wakes it.
    private let wake: (read: Int32, write: Int32)
    /// Work posted from other threads; a leaf lock, held only to swap the queue.
    private let posted = Mutex<[@Sendable (BusConnection) -> Void]>([])
    private let stopping = Atomic<Bool>(false)
    /// The registered interfaces, kept alive for as long as the bus may call them.
    private var boxes: [Unmanaged<InterfaceBox>] = []

    /// Connects to the session bus of this user (`DBUS_SESSION_BUS_ADDRESS`).
    package static func session() throws -> BusConnection {
        var bus: OpaquePointer?
        let r = sd_bus_open_user(&bus)
        guard r >= 0, let bus else {
            throw BusError.failed("cannot connect to the session bus: \(String(cString: strerror(-r)))")
        }
        return BusConnection(bus)
    }

    private init(_ bus: OpaquePointer) {
        self.bus = bus
        var fds: [Int32] = [-1, -1]
        precondition(pipe(&fds) == 0, "pipe: \(errno)")
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, O_NONBLOCK)
        }
        wake = (fds[0], fds[1])
    }

    deinit {
        sd_bus_flush_close_unref(bus)
        close(wake.read)
        close(wake.write)
        for b in boxes { b.release() }
    }

    package var uniqueName: String? {
        var p: UnsafePointer<CChar>?
        return sd_bus_get_unique_name(bus, &p) >= 0 ? p.map { String(cString: $0) } : nil
    }

    /// Who owns a well-known name now: its unique name, pid and command, when the bus says.
    package func owner(of name: String) -> (unique: String, pid: pid_t?, command: String?)? {
        var creds: OpaquePointer?
        let mask = UInt64(SD_BUS_CREDS_UNIQUE_NAME) | UInt64(SD_BUS_CREDS_PID) | UInt64(SD_BUS_CREDS_AUGMENT)
            | UInt64(SD_BUS_CREDS_COMM) | UInt64(SD_BUS_CREDS_EXE)
        guard sd_bus_get_name_creds(bus, name, mask, &creds) >= 0, let creds else { return nil }
        defer { sd_bus_creds_unref(creds) }
        var unique: UnsafePointer<CChar>?
        _ = sd_bus_creds_get_unique_name(creds, &unique)
        var pid: pid_t = 0
        let hasPID = sd_bus_creds_get_pid(creds, &pid) >= 0
        var exe: UnsafePointer<CChar>?
        var comm: UnsafePointer<CChar>?
        let command: String? = if sd_bus_creds_get_exe(creds, &exe) >= 0, let exe { String(cString: exe) }
            else if sd_bus_creds_get_comm(creds, &comm) >= 0, let comm { String(cString: comm) } else { nil }
        return (unique.map { String(cString: $0) } ?? "?", hasPID ? pid : nil, command)
    }

    /// Takes `name` only if nobody has it: never replaces its owner, never queues behind it.
    /// False when another connection owns it.
    package func requestName(_ name: String) throws -> Bool {
        let r = sd_bus_request_name(bus, name, 0)
        if r == -EALREADY { return true }
        if r == -EEXIST { return false }
        if r < 0 { throw BusError.failed("cannot request \(name): \(String(cString: strerror(-r)))") }
        return true
    }

    // MARK: objects

    /// Serves `interface` at `path`, or at every path below it with `prefix`.
    package func add(_ interface: BusInterface, at path: String, prefix: Bool = false) throws {
        let box = Unmanaged.passRetained(InterfaceBox(interface))
        boxes.append(box)
        var names: [UnsafeMutablePointer<CChar>] = []
        defer { names.forEach { free($0) } }
        func c(_ s: String) -> UnsafePointer<CChar> {
            let p = strdup(s)!
            names.append(p)
            return UnsafePointer(p)
        }
        func joined(_ list: [String]) -> UnsafePointer<CChar> {
            var bytes: [UInt8] = []
            for n in list { bytes += Array(n.utf8) + [0] }
            bytes += [0, 0]
            let p = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count)
            for (i, b) in bytes.enumerated() { p[i] = CChar(bitPattern: b) }
            names.append(p)
            return UnsafePointer(p)
        }
        let members: [kfs_member] = interface.members.map { m in
            let kind: Int32 = switch m.kind {
            case .method: Int32(KFS_METHOD.rawValue)
            case .property: Int32(KFS_PROPERTY.rawValue)
            case .writableProperty: Int32(KFS_WRITABLE_PROPERTY.rawValue)
            case .signal: Int32(KFS_SIGNAL.rawValue)
            }
            // Properties change only with a signal of their own (or none): clients read them again.
            let flags: UInt64 = m.kind == .method ? 0 : (m.kind == .signal ? 0 : UInt64(SD_BUS_VTABLE_PROPERTY_EMITS_INVALIDATION))
            return kfs_member(kind: kind, name: c(m.name), signature: c(m.signature), result: c(m.result),
                              names: joined(m.names), flags: flags)
        }
        let vtable = members.withUnsafeBufferPointer { b in
            kfs_vtable_build(b.baseAddress, b.count, methodTrampoline, getTrampoline, setTrampoline)
        }
        let userdata = box.toOpaque()
        let r: Int32 = if prefix {
            sd_bus_add_fallback_vtable(bus, nil, path, interface.name, vtable, findTrampoline, userdata)
        } else {
            sd_bus_add_object_vtable(bus, nil, path, interface.name, vtable, userdata)
        }
        if r < 0 { throw BusError.failed("cannot serve \(interface.name) at \(path): \(String(cString: strerror(-r)))") }
        if prefix {
            _ = sd_bus_add_node_enumerator(bus, nil, path, enumerateTrampoline, userdata)
        }
    }

    /// Calls `handler` with the unique name of each connection that leaves the bus, so that
    /// what it opened (sessions, prompts) goes with it.
    package func onDisconnect(_ handler: @escaping (String) -> Void) throws {
        let box = Unmanaged.passRetained(DisconnectBox(handler))
        let r = sd_bus_match_signal(bus, nil, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                    "NameOwnerChanged", disconnectTrampoline, box.toOpaque())
        if r < 0 {
            box.release()
            throw BusError.failed("cannot watch disconnects: \(String(cString: strerror(-r)))")
        }
    }

    /// `refuse` sees each method call before any object does; the error it returns is the
    /// answer (the specification wants its own error for an unknown object path, where sd-bus
    /// would answer `UnknownObject`).
    package func filterCalls(_ refuse: @escaping (BusMessage) -> BusError?) throws {
        let box = Unmanaged.passRetained(FilterBox(refuse))
        let r = sd_bus_add_filter(bus, nil, filterTrampoline, box.toOpaque())
        if r < 0 {
            box.release()
            throw BusError.failed("cannot filter calls: \(String(cString: strerror(-r)))")
        }
    }

    // MARK: signals

    /// Emits a signal; `body` appends its arguments. On the bus's thread only (see `post`).
    package func emit(path: String, interface: String, member: String,
                      _ body: (BusMessage) throws -> Void) {
        var m: OpaquePointer?
        guard sd_bus_message_new_signal(bus, &m, path, interface, member) >= 0, let m else { return }
        defer { sd_bus_message_unref(m) }
        do { try body(BusMessage(m)) } catch { return }
        _ = sd_bus_send(bus, m, nil)
    }

    /// Emits PropertiesChanged for `properties` of `interface` at `path`, as invalidated.
    package func emitPropertiesChanged(path: String, interface: String, _ properties: [String]) {
        var strings = properties.map { strdup($0) } + [nil]
        defer { strings.forEach { free($0) } }
        _ = strings.withUnsafeMutableBufferPointer { b in
            sd_bus_emit_properties_changed_strv(bus, path, interface, b.baseAddress)
        }
    }

    // MARK: answering later

    /// Answers a call kept by `DeferredReply`, from any thread: `body` appends the results (or
    /// throws the error to answer with) on the bus's thread.
    package func answer(_ call: DeferredReply, _ body: @escaping @Sendable (BusMessage) throws -> Void) {
        post { _ in call.send(body) }
    }

    // MARK: running

    /// Runs `work` on the bus's thread, soon.
    package func post(_ work: @escaping @Sendable (BusConnection) -> Void) {
        posted.withLock { $0.append(work) }
        var one: UInt8 = 1
        _ = write(wake.write, &one, 1)
    }

    /// Ends `run` at its next turn.
    package func stop() {
        stopping.store(true, ordering: .relaxed)
        post { _ in }
    }

    /// Serves until `stop`: the one thread that uses this connection.
    package func run() {
        while !stopping.load(ordering: .relaxed) {
            var work: [@Sendable (BusConnection) -> Void] = []
            var drained = [UInt8](repeating: 0, count: 64)
            while read(wake.read, &drained, 64) > 0 {}
            posted.withLock { swap(&work, &$0) }
            for w in work { w(self) }
            // Process every queued message before waiting.
            let r = sd_bus_process(bus, nil)
            if r < 0 {
                if r == -ECONNRESET || r == -ENOTCONN { return }
                continue
            }
            if r > 0 { continue }
            var fds = [pollfd(fd: sd_bus_get_fd(bus), events: Int16(sd_bus_get_events(bus)), revents: 0),
                       pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0)]
            var usec: UInt64 = 0
            var timeout: Int32 = -1
            if sd_bus_get_timeout(bus, &usec) > 0, usec != UInt64.max {
                var now = timespec()
                clock_gettime(CLOCK_MONOTONIC, &now)
                let nowUsec = UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
                timeout = usec <= nowUsec ? 0 : Int32(min((usec - nowUsec + 999) / 1000, 60_000))
            }
            _ = poll(&fds, 2, timeout)
        }
    }
}

private final class DisconnectBox {
    let handler: (String) -> Void
    init(_ handler: @escaping (String) -> Void) { self.handler = handler }
}

private let disconnectTrampoline: sd_bus_message_handler_t = { m, userdata, _ in
    guard let m, let userdata else { return 0 }
    let message = BusMessage(m)
    guard let name = try? message.readString(), let _ = try? message.readString(), let new = try? message.readString(),
          name.hasPrefix(":"), new.isEmpty else { return 0 }
    Unmanaged<DisconnectBox>.fromOpaque(userdata).takeUnretainedValue().handler(name)
    return 0
}

private final class FilterBox {
    let refuse: (BusMessage) -> BusError?
    init(_ refuse: @escaping (BusMessage) -> BusError?) { self.refuse = refuse }
}

private let filterTrampoline: sd_bus_message_handler_t = { m, userdata, _ in
    // Every incoming message, first: a call refused here, or one sd-bus itself answers with an
    // error (a wrong signature, an unknown member), never reaches `methodTrampoline`.
    if let m { _ = sd_bus_message_sensitive(m) }
    guard let m, let userdata, sd_bus_message_is_method_call(m, nil, nil) > 0 else { return 0 }
    guard let error = Unmanaged<FilterBox>.fromOpaque(userdata).takeUnretainedValue().refuse(BusMessage(m)) else { return 0 }
    var e = sd_bus_error()
    sd_bus_error_set(&e, error.name, error.message)
    defer { sd_bus_error_free(&e) }
    _ = sd_bus_reply_method_error(m, &e)
    return 1
}

/// What the C callbacks get as their userdata.
private final class InterfaceBox {
    let interface: BusInterface
    init(_ interface: BusInterface) { self.interface = interface }
}

private func box(_ userdata: UnsafeMutableRawPointer?) -> BusInterface {
    Unmanaged<InterfaceBox>.fromOpaque(userdata!).takeUnretainedValue().interface
}

private func setError(_ error: any Error, _ ret: UnsafeMutablePointer<sd_bus_error>?) -> Int32 {
    let e = error as? BusError ?? BusError.failed("\(error)")
    return sd_bus_error_set(ret, e.name, e.message)
}

private let methodTrampoline: sd_bus_message_handler_t = { m, userdata, ret in
    guard let m else { return -EINVAL }
    // Any call may carry a secret (SetSecret, CreateItem) or be answered with one (GetSecret):
    // sd-bus then zeroes the call's buffers when it frees them, and its reply's, which it marks
    // so too. Unmarked, both were left in freed heap, past a lock. (The filter, where there is
    // one, has marked it already; marking again is nothing.)
    _ = sd_bus_message_sensitive(m)
    let message = BusMessage(m)
    var reply: OpaquePointer?
    let r = sd_bus_message_new_method_return(m, &reply)
    guard r >= 0, let reply else { return r }
    defer { sd_bus_message_unref(reply) }
    do {
        try box(userdata).call(message.member ?? "", path: message.path ?? "", message: message, reply: BusMessage(reply))
    } catch is BusReplyDeferred {
        // The handler kept the call (`DeferredReply`) and answers it later.
        return 1
    } catch {
        return setError(error, ret)
    }
    let s = sd_bus_send(nil, reply, nil)
    return s < 0 ? s : 1
}

private let getTrampoline: sd_bus_property_get_t = { _, path, _, property, reply, userdata, ret in
    guard let path, let property, let reply else { return -EINVAL }
    do {
        try box(userdata).get(String(cString: property), path: String(cString: path), into: BusMessage(reply))
    } catch {
        return setError(error, ret)
    }
    return 1
}

private let setTrampoline: sd_bus_property_set_t = { _, path, _, property, value, userdata, ret in
    guard let path, let property, let value else { return -EINVAL }
    do {
        try box(userdata).set(String(cString: property), path: String(cString: path), from: BusMessage(value))
    } catch {
        return setError(error, ret)
    }
    return 1
}

private let findTrampoline: sd_bus_object_find_t = { _, path, _, userdata, found, _ in
    guard let path else { return 0 }
    guard box(userdata).exists(String(cString: path)) else { return 0 }
    found?.pointee = userdata
    return 1
}

private let enumerateTrampoline: sd_bus_node_enumerator_t = { _, prefix, userdata, nodes, _ in
    guard let prefix, let nodes else { return 0 }
    let parent = String(cString: prefix)
    let children = box(userdata).children(of: parent)
    let list = UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>.allocate(capacity: children.count + 1)
    for (i, c) in children.enumerated() { list[i] = strdup(c) }
    list[children.count] = nil
    // sd-bus frees the list with free(): allocate it with malloc.
    let out = malloc(MemoryLayout<UnsafeMutablePointer<CChar>?>.stride * (children.count + 1))!
        .bindMemory(to: UnsafeMutablePointer<CChar>?.self, capacity: children.count + 1)
    out.update(from: list, count: children.count + 1)
    list.deallocate()
    nodes.pointee = out
    return 0
}

/// Thrown by a method handler that answers later, through `BusConnection.answer`, so that the
/// bus's one thread goes on serving every other client meanwhile (a caller waiting for the
/// user's answer to a prompt).
package struct BusReplyDeferred: Error {
    package init() {}
}

/// A method call kept to be answered later (once, on the bus's thread).
// @unchecked Sendable: the message is only touched on the bus's thread (in init and `send`).
package final class DeferredReply: @unchecked Sendable {
    /// Released in `send`, on the bus's thread (sd-bus's reference counts are not atomic).
    private var call: OpaquePointer?

    /// On the bus's thread, in the handler of `message`.
    package init(_ message: BusMessage) {
        call = sd_bus_message_ref(message.raw)
    }

    deinit { if let call { sd_bus_message_unref(call) } }

    fileprivate func send(_ body: (BusMessage) throws -> Void) {
        guard let call else { return }
        defer {
            sd_bus_message_unref(call)
            self.call = nil
        }
        var reply: OpaquePointer?
        guard sd_bus_message_new_method_return(call, &reply) >= 0, let reply else { return }
        defer { sd_bus_message_unref(reply) }
        do {
            try body(BusMessage(reply))
            _ = sd_bus_send(nil, reply, nil)
        } catch {
            let e = error as? BusError ?? BusError.failed("\(error)")
            var err = sd_bus_error()
            sd_bus_error_set(&err, e.name, e.message)
            defer { sd_bus_error_free(&err) }
            _ = sd_bus_reply_method_error(call, &err)
        }
    }
}
