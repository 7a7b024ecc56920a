import Foundation
import KeychainAccess
import KeychainFileSystem
import KeychainStore
import SDBus
import Synchronization

/// Per-program access for D-Bus callers, with the same prompt as the tree's and the control
/// socket's. The bus has one thread for every client, so a call that names a guarded item is
/// decided on a thread of its own unless the gate allows it at once: the call is answered later
/// (`DeferredReply`), and the bus goes on serving everyone else while the caller is identified
/// or the user is asked.
extension SecretService {
    /// Decides whether the sender of `m` may `operation` `item`, then runs `answer` with the
    /// reply on the bus's thread. Refused: AccessDenied.
    func whenAllowed(_ m: BusMessage, reply r: BusMessage, _ item: KeychainItem, _ operation: AccessOperation,
                     answer: @escaping (BusMessage) throws -> Void) throws {
        try whenDecided(m, reply: r, [item], operation) { r, refusal in
            if let refused = refusal(item) { throw refused }
            try answer(r)
        }
    }

    /// Decides for each of `items` (in order, one prompt at a time), then runs `answer` on the
    /// bus's thread with the reply and each item's refusal (nil: allowed); at once when
    /// `decide` can.
    func whenDecided(_ m: BusMessage, reply r: BusMessage, _ items: [KeychainItem], _ operation: AccessOperation,
                     answer: @escaping (BusMessage, _ refusal: (KeychainItem) -> BusError?) throws -> Void) throws {
        let pending = DeferredReply(m)
        let bus = bus
        // Called only on the bus's thread (in `bus.answer`), as everything of the service is.
        let onBusThread = BusThreadOnly(answer)
        let now = decide(m, items, operation) { refused in
            bus.answer(pending) { reply in try onBusThread.body(reply) { refused[$0.id] } }
        }
        guard let now else { throw BusReplyDeferred() }
        try answer(r) { now[$0.id] }
    }

    /// The refusals (by item id) of `items` for the sender of `m`, decided at once; or nil, when
    /// the decision may wait: then `later` gets them from a thread of its own.
    ///
    /// Only items with no list, or a caller the gate knows and allows at once
    /// (`allowsAtOnce`: checked within the last 10 ms), are decided on the bus's thread.
    /// Anything else may wait, on the user (a prompt) or on the caller itself: identifying a
    /// process reads its `/proc` files and stats and hashes its executable, and a client can
    /// make each slow (its executable on a file system that does not answer, its memory map
    /// held locked). That would hold every other client of the bus (`test_access_dbus_dos`).
    /// `prompting` false: a caller not listed is refused without asking the user.
    func decide(_ m: BusMessage, _ items: [KeychainItem], _ operation: AccessOperation, prompting: Bool = true,
                later: @escaping @Sendable ([Int64: BusError]) -> Void) -> [Int64: BusError]? {
        let keychain = owner
        let guarded = items.filter { !($0.record.attributes.values.access?.isAnyProgram ?? true) }
        guard !guarded.isEmpty else { return [:] }
        let caller = accessCaller(m)
        if guarded.allSatisfy({ keychain.allowsAtOnce(caller, $0.record) }) { return [:] }
        let prompting = prompting && keychain.access.settings.prompt != nil
        @Sendable func decideEach() -> [Int64: BusError] {
            var refused: [Int64: BusError] = [:]
            for item in guarded {
                do { try mapped { try keychain.authorize(caller, item, operation, prompting: prompting) } } catch {
                    refused[item.id] = error as? BusError ?? BusError.failed("\(error)")
                }
            }
            return refused
        }
        // Each waiting decision holds a thread: past a bound (clients calling faster than they
        // can be identified or the user answers), the rest are refused at once.
        guard let place = Self.waitingDecisions.enter() else {
            return Dictionary(uniqueKeysWithValues: guarded.map { ($0.id, Self.tooManyWaiting) })
        }
        let thread = Thread {
            let refused = decideEach()
            place.end()
            later(refused)
        }
        thread.name = "secret-service-access"
        thread.start()
        return nil
    }

    /// `decide` for a call sd-bus answers on the spot (a property write), with no prompt: the
    /// bus's thread waits for the decision at most `syncDecisionSeconds`, then refuses. So a
    /// client slow to identify holds the bus for that long at most, and only until the gate's
    /// bound on callers held on slow work refuses the next ones at once.
    func decideNow(_ m: BusMessage, _ item: KeychainItem, _ operation: AccessOperation) throws {
        let outcome = OneShot<[Int64: BusError]>()
        let now = decide(m, [item], operation, prompting: false) { outcome.deliver($0) }
        guard let refused = now ?? outcome.wait(seconds: Double(Self.syncDecisionSeconds)) else {
            throw BusError("org.freedesktop.DBus.Error.AccessDenied",
                           "the caller could not be identified within \(Self.syncDecisionSeconds) s (its executable or memory slow to read); try again")
        }
        if let error = refused[item.id] { throw error }
    }
}

extension SecretService {
    /// Calls waiting for an access decision on threads of their own (`decide`).
    static let waitingDecisions = HolderLimit(max: 32)
    static let tooManyWaiting = BusError("org.freedesktop.DBus.Error.AccessDenied",
                                         "too many calls are waiting for an access decision; try again")
    static let syncDecisionSeconds = 2
}

/// A closure of the bus's thread carried through another thread, which never calls it.
private final class BusThreadOnly: @unchecked Sendable {
    let body: (BusMessage, (KeychainItem) -> BusError?) throws -> Void
    init(_ body: @escaping (BusMessage, (KeychainItem) -> BusError?) throws -> Void) { self.body = body }
}
