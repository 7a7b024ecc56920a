import Foundation
import KeychainAccess
import KeychainCrypto
import KeychainFileSystem
import KeychainModel
import KeychainStore
import Logging
import SDBus

/// The Secret Service (freedesktop.org, version 0.2) over the keychain's owner, on the session
/// bus: the collections of `SecretCollections` (`login`, which the `default` alias names unless
/// set otherwise, holds every item not put in another), their items named by row id
/// (SecretItemMapping says how an item and its attributes meet). Which items a search or a
/// collection holds comes from the store's blind index, so locked items are listed too.
///
/// Everything here runs on the bus's one thread (`BusConnection`): sessions, prompts and
/// collections need no lock. Changes made elsewhere (the tree, the CLI) reach it as `ItemChange`s
/// posted to that thread, where they become signals.
package final class SecretService: @unchecked Sendable {
    package static let busName = "org.freedesktop.secrets"
    static let root = "/org/freedesktop/secrets"
    static let collectionPrefix = root + "/collection"
    static let aliasPrefix = root + "/aliases"
    static let sessionPrefix = root + "/session"
    static let promptPrefix = root + "/prompt"
    static func collectionPath(_ id: String) -> String { collectionPrefix + "/" + id }

    /// Bounds on what one client may hold or send.
    package struct Limits: Sendable {
        package var sessionsPerClient = 64
        package var sessions = 4096
        package var promptsPerClient = 16
        package var attributes = 64
        package var attributeBytes = 64 * 1024
        package var objectsPerCall = 100_000
        package init() {}
    }

    let owner: ServedKeychain
    let bus: BusConnection
    let limits: Limits
    /// Shows the unlock prompt; nil when none is configured (`[access] pinentry`).
    let pinentry: PinentryPassphrase?
    private let log = Logger(label: "keychainfs.secret-service")

    struct Session {
        let client: String
        let transfer: SecretTransfer
    }
    var sessions: [String: Session] = [:]
    private var nextSession = 1

    struct Prompt {
        let client: String
        /// What the prompt does when the client shows it (with the prompt's path): it ends with
        /// `completePrompt`, at once or later from another thread.
        let run: (SecretService, String) -> Void
    }
    var prompts: [String: Prompt] = [:]
    private var nextPrompt = 1

    /// The collections and aliases as stored; nil until the store could be read (its index
    /// key opens with the device key, or the passphrase where that is missing).
    private var stored: SecretCollections?
    var registry: SecretCollections {
        if stored == nil { stored = try? owner.sealedRecord(named: SecretCollections.recordName).map(SecretCollections.init(decoding:)) ?? SecretCollections() }
        return stored ?? SecretCollections()
    }

    /// Stores a changed registry; it counts only once stored.
    func save(_ new: SecretCollections) throws {
        try mapped { try owner.setSealedRecord(named: SecretCollections.recordName, to: new.encoded()) }
        stored = new
    }

    /// The paths of the items whose names the bus has read, by key, so that an item removed
    /// through the tree is still signalled by its path (one only listed is signalled by
    /// `CollectionChanged`: naming every listed item would decrypt every name).
    var knownPaths: [ItemKey: String] = [:]

    private init(owner: ServedKeychain, bus: BusConnection, limits: Limits, pinentry: PinentryPassphrase?) {
        self.owner = owner
        self.bus = bus
        self.limits = limits
        self.pinentry = pinentry
    }

    /// What `start` found when the name is taken: who has it, and how to switch.
    package struct NameTaken: Error, CustomStringConvertible {
        package var owner: String
        package var description: String {
            "\(SecretService.busName) is already served on the session bus by \(owner). keychainfs never takes it "
                + "from another service. To switch, stop that service first: for gnome-keyring, "
                + "'systemctl --user mask --now gnome-keyring-daemon.service gnome-keyring-daemon.socket' "
                + "(or remove 'secrets' from its --components), for KeePassXC turn off its Secret Service integration; "
                + "then mount again with --secret-service."
        }
    }

    /// Connects to the session bus, takes the name if nobody has it, and serves on a thread of
    /// its own until `stop`.
    package static func start(owner: ServedKeychain, pinentry: PinentryPassphrase? = nil,
                              limits: Limits = Limits()) throws -> SecretService {
        let bus = try BusConnection.session()
        let service = SecretService(owner: owner, bus: bus, limits: limits, pinentry: pinentry)
        try bus.add(ServiceInterface(service), at: root)
        try bus.add(CollectionInterface(service), at: collectionPrefix, prefix: true)
        try bus.add(CollectionInterface(service), at: aliasPrefix, prefix: true)
        try bus.add(ItemInterface(service), at: collectionPrefix, prefix: true)
        try bus.add(SessionInterface(service), at: sessionPrefix, prefix: true)
        try bus.add(PromptInterface(service), at: promptPrefix, prefix: true)
        try bus.onDisconnect { [unowned service] name in service.clientLeft(name) }
        try bus.filterCalls { [unowned service] m in
            guard let path = m.path, !service.isObject(path) else { return nil }
            return SecretError.noSuchObject(path)
        }
        guard try bus.requestName(busName) else {
            let who = bus.owner(of: busName).map { o in
                "\(o.command ?? "a program") (pid \(o.pid.map(String.init) ?? "?"), \(o.unique))"
            } ?? "another program"
            throw NameTaken(owner: who)
        }
        // Rows written before every row was indexed (a single read once none is left).
        do { try owner.completeAttributeIndex() } catch { service.log.warning("indexing attributes: \(error)") }
        owner.addObserver(ChangeForwarder(service: service))
        let thread = Thread { bus.run() }
        thread.name = "secret-service"
        thread.start()
        service.log.notice("serving \(busName) on the session bus as \(bus.uniqueName ?? "?")")
        return service
    }

    package func stop() { bus.stop() }

    // MARK: paths

    /// An item as the bus sees it: its row, collection and class, readable now or not, and the
    /// item itself when its name can be read.
    /// The item is read (its name decrypted) only when asked for: a listing or a search of
    /// thousands names them by path and class alone.
    final class Object {
        let id: Int64
        let collection: String
        let accessible: AccessibilityClass
        private unowned let service: SecretService
        init(id: Int64, collection: String, accessible: AccessibilityClass, service: SecretService) {
            self.id = id; self.collection = collection; self.accessible = accessible; self.service = service
        }
        var path: String { SecretService.collectionPath(collection) + "/" + String(id) }
        lazy var item: KeychainItem? = {
            let item = try? service.owner.item(id: id)
            if let item { service.knownPaths[item.key] = path }
            return item
        }()
    }

    func path(of item: KeychainItem) -> String {
        let path = Self.collectionPath(collectionOf(item.id)) + "/" + String(item.id)
        knownPaths[item.key] = path
        return path
    }

    /// The collection that holds row `id`: the one whose tag it has, else `login`.
    func collectionOf(_ id: Int64) -> String {
        let ids = registry.ids
        return ids.first { c in c != SecretCollections.login && (try? owner.item(id, isIn: c, others: ids)) == true }
            ?? SecretCollections.login
    }

    /// The collection a path names (directly or through an alias), or nil.
    func collection(at path: String) -> String? {
        if path.hasPrefix(Self.collectionPrefix + "/") {
            let id = String(path.dropFirst(Self.collectionPrefix.count + 1))
            return registry.collection(id)?.id
        }
        if path.hasPrefix(Self.aliasPrefix + "/") {
            let alias = String(path.dropFirst(Self.aliasPrefix.count + 1))
            return registry.aliases[alias.exact]
        }
        return nil
    }

    /// Whether a path names an object here, or a node above one (which introspection lists).
    func isObject(_ path: String) -> Bool {
        if path == Self.root || Self.root.hasPrefix(path == "/" ? "/" : path + "/") { return true }
        if [Self.collectionPrefix, Self.aliasPrefix, Self.sessionPrefix, Self.promptPrefix].contains(path) { return true }
        if collection(at: path) != nil || sessions[path] != nil || prompts[path] != nil { return true }
        return object(at: path) != nil
    }

    /// The row a path names: `COLLECTION/ID`, the row in that collection, readable now or not.
    func object(at path: String) -> Object? {
        guard path.hasPrefix(Self.collectionPrefix + "/") else { return nil }
        let parts = path.dropFirst(Self.collectionPrefix.count + 1).split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let id = Int64(parts[1]), id > 0, let c = registry.collection(String(parts[0])) else { return nil }
        return object(id: id, in: c.id)
    }

    func object(id: Int64, in collection: String) -> Object? {
        guard let accessible = try? owner.itemClass(id: id),
              (try? owner.item(id, isIn: collection, others: registry.ids)) == true else { return nil }
        return Object(id: id, collection: collection, accessible: accessible, service: self)
    }

    /// The object at `path`; NoSuchObject when there is none.
    func object(_ path: String) throws -> Object {
        guard let o = object(at: path) else { throw SecretError.noSuchObject(path) }
        return o
    }

    /// The item at `path`, readable: IsLocked when its name cannot be read now.
    func item(at path: String) throws -> KeychainItem {
        guard let item = try object(path).item else { throw SecretError.isLocked("the item") }
        return item
    }

    // MARK: what an item shows

    /// Its attributes; empty while they cannot be read (the map of an item made over D-Bus is
    /// sealed under its class, the natural attributes of any other follow its name).
    func attributes(of o: Object) -> [String: String] {
        guard let item = o.item else { return [:] }
        if item.sealed.extras == nil { return SecretItemMapping.attributes(of: item.key, stored: nil) }
        guard !isLocked(o) else { return [:] }
        return attributes(of: item)
    }

    func attributes(of item: KeychainItem) -> [String: String] {
        SecretItemMapping.attributes(of: item.key, stored: SecretItemMapping.decode(extras: try? owner.extras(of: item)).attributes)
    }

    func contentType(of item: KeychainItem) -> String {
        guard !isLocked(item) else { return SecretItemMapping.defaultContentType }
        return SecretItemMapping.decode(extras: try? owner.extras(of: item)).contentType ?? SecretItemMapping.defaultContentType
    }

    func isLocked(_ item: KeychainItem) -> Bool { !owner.isAvailable(item.accessible) }
    func isLocked(_ o: Object) -> Bool { !owner.isAvailable(o.accessible) }

    var keychainLocked: Bool { owner.lockState != .unlocked }

    // MARK: search

    /// Every item of `collection` (nil: of every collection) whose attributes include all of
    /// `query`'s, locked or not: the store's blind index answers, in O(matching items), without
    /// reading a name.
    func search(_ query: [String: String], in collection: String? = nil) throws -> [Object] {
        let ids = registry.ids
        var out: [Object] = []
        for c in collection.map({ [$0] }) ?? ids {
            let found = try mapped { try owner.itemIDs(matching: query, collection: c, others: ids) }
            guard out.count + found.count <= limits.objectsPerCall else { throw BusError.limitsExceeded("over \(limits.objectsPerCall) items match") }
            let classes = try mapped { try owner.itemClasses(found) }
            for id in found {
                guard let accessible = classes[id] else { continue }
                out.append(Object(id: id, collection: c, accessible: accessible, service: self))
            }
        }
        return out
    }

    // MARK: answering later

    /// Durable writes (a commit and its `fdatasync`, a 16 MiB seal) run in turn on a queue of
    /// their own, so the bus thread goes on serving every other client; the answer is sent from
    /// the bus thread once the write is done (`DeferredReply`). What the call needs of this
    /// service's state (sessions, collections) is read before, on the bus thread.
    private let writes = DispatchQueue(label: "keychainfs.secret-service.writes")

    /// Decides per-program access to `items` for the sender of `m` (asking the user on a thread
    /// of its own when a prompt is configured: `decide`), then runs `work` on the writes' queue,
    /// given each item's refusal (nil: allowed), and answers with `reply` on the bus thread.
    func answerLater<T>(_ m: BusMessage, deciding items: [KeychainItem], _ operation: AccessOperation,
                        _ work: @escaping (_ refusal: (KeychainItem) -> BusError?) throws -> T,
                        reply: @escaping (BusMessage, T) throws -> Void) throws {
        let pending = DeferredReply(m)
        let job = UncheckedBox((work, reply))
        let writes = self.writes, bus = self.bus
        @Sendable func write(_ refused: [Int64: BusError]) {
            writes.async {
                let result = UncheckedBox(Result { try mapped { try job.value.0 { refused[$0.id] } } })
                bus.answer(pending) { r in try job.value.1(r, result.value.get()) }
            }
        }
        if let refused = decide(m, items, operation, later: write) { write(refused) }
        throw BusReplyDeferred()
    }

    // MARK: sessions

    func openSession(client: String, transfer: SecretTransfer) throws -> String {
        guard sessions.count < limits.sessions,
              sessions.values.filter({ $0.client == client }).count < limits.sessionsPerClient else {
            throw BusError.limitsExceeded("too many open sessions")
        }
        let path = Self.sessionPrefix + "/s" + String(nextSession)
        nextSession += 1
        sessions[path] = Session(client: client, transfer: transfer)
        return path
    }

    /// The session a client named: its own, open.
    func session(_ path: String, client: String?) throws -> Session {
        guard let s = sessions[path], s.client == client else { throw SecretError.noSession(path) }
        return s
    }

    func clientLeft(_ client: String) {
        sessions = sessions.filter { $0.value.client != client }
        prompts = prompts.filter { $0.value.client != client }
    }

    // MARK: prompts

    func addPrompt(client: String, _ run: @escaping (SecretService, String) -> Void) throws -> String {
        guard prompts.values.filter({ $0.client == client }).count < limits.promptsPerClient else {
            throw BusError.limitsExceeded("too many open prompts")
        }
        let path = Self.promptPrefix + "/p" + String(nextPrompt)
        nextPrompt += 1
        prompts[path] = Prompt(client: client, run: run)
        return path
    }

    func completePrompt(_ path: String, dismissed: Bool, result: [String]) {
        bus.post { bus in
            bus.emit(path: path, interface: PromptInterface.interface, member: "Completed") { m in
                try m.append(dismissed)
                try m.open("v", "ao")
                try m.append(objectPaths: result)
                try m.close()
            }
        }
    }

    // MARK: lock

    /// Unlocks what needs no passphrase at once; a keychain with a passphrase needs a prompt:
    /// pinentry, when configured, asks for it (three tries) on a thread of its own, so the bus
    /// goes on serving; with none configured the prompt completes dismissed.
    func unlock(_ objects: [String], client: String, caller: pid_t?) throws -> (unlocked: [String], prompt: String) {
        if keychainLocked && !owner.hasPassphrase {
            try mapped { try owner.unlock(passphrase: nil) }
        }
        if !keychainLocked { return (objects, "/") }
        let program = caller.flatMap { pid in try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe") }
        let who = "\(program ?? "A program") (pid \(caller.map(String.init) ?? "?"))"
        let prompt = try addPrompt(client: client) { service, path in
            guard let pinentry = service.pinentry else {
                service.completePrompt(path, dismissed: true, result: [])
                return
            }
            let owner = service.owner, store = owner.storePath
            let thread = Thread {
                var unlocked = false
                attempts: for attempt in 0..<3 {
                    let description = (attempt == 0 ? "" : "Wrong passphrase. ")
                        + "\(who) asks through the Secret Service to unlock the keychain \(store)."
                    switch pinentry.ask(description: description) {
                    case .dismissed:
                        break attempts
                    case .passphrase(let passphrase):
                        defer { passphrase.wipe() }
                        do {
                            try owner.unlock(passphrase: passphrase, origin: .control)
                            unlocked = true
                            break attempts
                        } catch KeychainError.wrongPassphrase {
                            continue
                        } catch {
                            break attempts
                        }
                    }
                }
                service.completePrompt(path, dismissed: !unlocked, result: unlocked ? objects : [])
            }
            thread.name = "secret-service-prompt"
            thread.start()
        }
        return ([], prompt)
    }

    /// Locks the whole keychain, as `keychainfs lock` does.
    func lock(_ objects: [String]) -> [String] {
        owner.lock(origin: .control)
        return objects
    }

    // MARK: signals of changes made anywhere

    func signal(_ changes: [ItemChange]) {
        for change in changes {
            switch change {
            case .added(let key), .updated(let key):
                guard let item = try? owner.items(matching: .exactly(key)).first else { continue }
                let isNew = { if case .added = change { return true } else { return false } }()
                emitItem(isNew ? "ItemCreated" : "ItemChanged", path(of: item))
            case .moved(let from, let to):
                knownPaths[from] = nil
                guard let item = try? owner.items(matching: .exactly(to)).first else { continue }
                emitItem("ItemChanged", path(of: item))
            case .removed(let key):
                guard let path = knownPaths.removeValue(forKey: key) else {
                    // Never named on the bus: no client holds its path.
                    emitCollectionChanged(SecretCollections.login)
                    continue
                }
                emitItem("ItemDeleted", path)
            case .lockStateChanged:
                for c in registry.ids {
                    bus.emitPropertiesChanged(path: Self.collectionPath(c), interface: CollectionInterface.interface, ["Locked"])
                    emitCollectionChanged(c)
                }
            }
        }
    }

    /// `ItemCreated`, `ItemChanged` or `ItemDeleted` on the item's collection.
    private func emitItem(_ member: String, _ path: String) {
        let collection = String(path.dropFirst(Self.collectionPrefix.count + 1).prefix { $0 != "/" })
        let at = Self.collectionPath(collection)
        bus.emit(path: at, interface: CollectionInterface.interface, member: member) { try $0.append(objectPath: path) }
        bus.emitPropertiesChanged(path: at, interface: CollectionInterface.interface, ["Items"])
        emitCollectionChanged(collection)
    }

    func emitCollectionChanged(_ id: String) { emitService("CollectionChanged", id) }

    func emitService(_ member: String, _ id: String) {
        bus.emit(path: Self.root, interface: ServiceInterface.interface, member: member) {
            try $0.append(objectPath: Self.collectionPath(id))
        }
    }
}

/// Carries a value between the bus thread and the writes' queue, which hand it over in turn.
struct UncheckedBox<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}

/// Hands the owner's changes to the bus's thread.
private struct ChangeForwarder: ItemChangeObserver {
    let service: SecretService
    func keychainDidChange(_ changes: [ItemChange], origin: ChangeOrigin) {
        service.bus.post { [service] _ in service.signal(changes) }
    }
}

/// The specification's errors, and the keychain's errors as D-Bus errors.
enum SecretError {
    static func noSuchObject(_ path: String) -> BusError {
        BusError("org.freedesktop.Secret.Error.NoSuchObject", "no such object: \(path)")
    }
    static func noSession(_ path: String) -> BusError {
        BusError("org.freedesktop.Secret.Error.NoSession", "no open session of this client: \(path)")
    }
    static func isLocked(_ what: String) -> BusError {
        BusError("org.freedesktop.Secret.Error.IsLocked", "\(what) is locked; unlock it first (Unlock, or 'keychainfs unlock')")
    }
}

/// Runs a keychain operation, its errors as D-Bus errors.
/// The program that sent a call, for per-program access: the pid the bus daemon vouches for,
/// pinned now (a client keeps its connection, so its pid is its own while it waits).
func accessCaller(_ m: BusMessage) -> AccessCaller {
    guard let pid = m.senderPID() else { return .unidentified("the bus gave no pid for the sender") }
    do { return .process(try PinnedProcess.forProcess(pid)) } catch { return .unidentified(error.description) }
}

func mapped<T>(_ body: () throws -> T) throws -> T {
    do {
        return try body()
    } catch let e as BusError {
        throw e
    } catch let e as KeychainError {
        switch e {
        case .unavailable: throw SecretError.isLocked("the item")
        case .itemNotFound: throw BusError("org.freedesktop.Secret.Error.NoSuchObject", e.description)
        case .accessDenied: throw BusError("org.freedesktop.DBus.Error.AccessDenied", e.description)
        case .invalidInput, .nameTooLong, .secretTooLarge: throw BusError.invalidArgs(e.description)
        default: throw BusError.failed(e.description)
        }
    } catch let e as ModelError {
        throw BusError.invalidArgs("\(e)")
    } catch {
        throw BusError.failed("\(error)")
    }
}
