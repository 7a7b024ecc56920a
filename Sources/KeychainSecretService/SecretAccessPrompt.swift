import Foundation
import KeychainAccess
import KeychainFileSystem
import KeychainStore
import SDBus
import Synchronization

/// Per-program access for D-Bus callers, with the same prompt as the tree's and the control
/// socket's. The bus has one thread for every client, so a call that names a guarded item,
/// when a prompt is configured, is decided on a thread of its own: the call is answered later
/// (`DeferredReply`) and the bus goes on serving everyone else while the user is asked.
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
    /// bus's thread with the reply and each item's refusal (nil: allowed). Items with no
    /// list, or every item when no prompt is configured, are decided here at once.
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
    /// a guarded item needs the user's answer: then `later` gets them from a thread of its own.
    func decide(_ m: BusMessage, _ items: [KeychainItem], _ operation: AccessOperation,
                later: @escaping @Sendable ([Int64: BusError]) -> Void) -> [Int64: BusError]? {
        let caller = accessCaller(m)
        let keychain = owner
        @Sendable func decideEach(prompting: Bool) -> [Int64: BusError] {
            var refused: [Int64: BusError] = [:]
            for item in items {
                do { try mapped { try keychain.authorize(caller, item, operation, prompting: prompting) } } catch {
                    refused[item.id] = error as? BusError ?? BusError.failed("\(error)")
                }
            }
            return refused
        }
        let guarded = items.contains { !($0.record.attributes.values.access?.isAnyProgram ?? true) }
        // Each waiting decision holds a thread: past a bound (clients calling faster than the
        // user answers), the rest are decided at once, with no prompt.
        guard guarded, owner.access.settings.prompt != nil,
              Self.waitingDecisions.add(1, ordering: .relaxed).newValue <= Self.maxWaitingDecisions else {
            if guarded, owner.access.settings.prompt != nil { Self.waitingDecisions.subtract(1, ordering: .relaxed) }
            return decideEach(prompting: false)
        }
        let thread = Thread {
            let refused = decideEach(prompting: true)
            Self.waitingDecisions.subtract(1, ordering: .relaxed)
            later(refused)
        }
        thread.name = "secret-service-access"
        thread.start()
        return nil
    }
}

extension SecretService {
    /// Calls waiting for an access decision on threads of their own (`whenDecided`).
    static let waitingDecisions = Atomic<Int>(0)
    static let maxWaitingDecisions = 32
}

/// A closure of the bus's thread carried through another thread, which never calls it.
private final class BusThreadOnly: @unchecked Sendable {
    let body: (BusMessage, (KeychainItem) -> BusError?) throws -> Void
    init(_ body: @escaping (BusMessage, (KeychainItem) -> BusError?) throws -> Void) { self.body = body }
}
