// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif
import KeychainBatch
import KeychainCrypto
import KeychainModel

/// A request on the control socket: one `KeychainService` call, one per connection.
package enum ControlRequest {
    case save(key: ItemKey, secret: SecureBytes, extras: SecureBytes?, changes: AttributeChanges, updateExisting: Bool)
    case find(query: ItemQuery, withSecrets: Bool, limit: Int?)
    case delete(query: ItemQuery, all: Bool)
    case dump(withSecrets: Bool)
    case verify
    case status
    case lock
    case unlock(passphrase: SecureBytes?)
    case unmount
    /// Nil turns the idle lock off.
    case setLockAfter(seconds: Int?)
    /// Backups: the whole batch in one frame (the client splits a batch that does not fit).
    case importItems(batch: ItemBatch, overwrite: Bool)
    case exportItems(afterID: Int64, limit: Int)
    case sync(action: SyncAction, folder: String?, passphrase: SecureBytes?, scryptLogN: UInt8?)
    /// `repin`: programs of `list` pinned as they are now even if listed before.
    case setAccess(key: ItemKey, list: AccessList, repin: [AccessProgram], passphrase: SecureBytes)

    /// The frame kinds of requests. Never renumber.
    package enum Kind: UInt16, CaseIterable {
        case save = 1, find = 2, delete = 3, dump = 4, verify = 5, status = 6, lock = 7, unlock = 8, unmount = 9
        case setLockAfter = 10
        case importItems = 11, exportItems = 12
        case sync = 13
        case setAccess = 14
    }

    package var kind: Kind {
        switch self {
        case .save: .save
        case .find: .find
        case .delete: .delete
        case .dump: .dump
        case .verify: .verify
        case .status: .status
        case .lock: .lock
        case .unlock: .unlock
        case .unmount: .unmount
        case .setLockAfter: .setLockAfter
        case .importItems: .importItems
        case .exportItems: .exportItems
        case .sync: .sync
        case .setAccess: .setAccess
        }
    }

    package func frame() throws -> SecureBytes {
        try ControlFrame.encode(kind: kind.rawValue) { w in
            switch self {
            case .sync(let action, let folder, let passphrase, let scryptLogN):
                w.field(.syncAction, action.rawValue)
                w.field(.syncFolder, ifPresent: folder)
                if let passphrase { w.field(.passphrase, secret: passphrase) }
                if let scryptLogN { w.field(.scryptLogN, scryptLogN) }
            case .save(let key, let secret, let extras, let changes, let updateExisting):
                guard secret.count <= maxSecretBytes else { throw KeychainError.secretTooLarge(secret.count) }
                w.nested(.key) { WireItem.write(key, to: $0) }
                w.field(.secret, secret: secret)
                if let extras { w.field(.extras, secret: extras) }
                w.nested(.changes) { WireItem.write(changes, to: $0) }
                w.field(.updateExisting, updateExisting)
            case .find(let query, let withSecrets, let limit):
                w.nested(.query) { WireItem.write(query, to: $0) }
                w.field(.withSecrets, withSecrets)
                if let limit { w.field(.limit, UInt64(max(limit, 0))) }
            case .delete(let query, let all):
                w.nested(.query) { WireItem.write(query, to: $0) }
                w.field(.all, all)
            case .setLockAfter(let seconds):
                if let seconds { w.field(.lockAfter, UInt64(max(seconds, 0))) }
            case .dump(let withSecrets):
                w.field(.withSecrets, withSecrets)
            case .unlock(let passphrase):
                if let passphrase { w.field(.passphrase, secret: passphrase) }
            case .importItems(let batch, let overwrite):
                try WireItem.write(batch, to: w)
                w.field(.updateExisting, overwrite)
            case .exportItems(let afterID, let limit):
                w.field(.afterID, UInt64(bitPattern: afterID))
                w.field(.limit, UInt64(max(limit, 0)))
            case .setAccess(let key, let list, let repin, let passphrase):
                w.nested(.key) { WireItem.write(key, to: $0) }
                w.nested(.changes) { WireItem.write(AttributeChanges { $0.access = list }, to: $0) }
                // The programs as rules of the list (their pins go unused): one encoding of programs.
                let again = AccessList(rules: list.rules.filter { repin.contains($0.program) })
                if !again.isAnyProgram { w.nested(.repin) { WireItem.write(AttributeChanges { $0.access = again }, to: $0) } }
                w.field(.passphrase, secret: passphrase)
            case .verify, .status, .lock, .unmount:
                break
            }
        }
    }

    /// Decodes and validates a request by the rules of the CLI and the tree: keys are built
    /// through their validating initializers, so a bad name, port or code fails here with the
    /// same error (and exit code) as on the command line.
    package init(kind rawKind: UInt16, payload: SecureBytes) throws {
        guard let kind = Kind(rawValue: rawKind) else { throw KeychainError.io("unknown control request kind \(rawKind)") }
        let f = try WireFields(payload)
        switch kind {
        case .save:
            let secret = try f.secret(.secret) ?? SecureBytes()
            guard secret.count <= maxSecretBytes else { throw KeychainError.secretTooLarge(secret.count) }
            self = .save(key: try WireItem.newKey(f.nested(required: .key)), secret: secret, extras: try f.secret(.extras),
                         changes: try WireItem.changes(f.nested(.changes)), updateExisting: try f.flag(.updateExisting))
        case .find:
            let limit = try f.integer(.limit, as: UInt64.self).map { Int(clamping: $0) }
            self = .find(query: try WireItem.query(f.nested(required: .query)), withSecrets: try f.flag(.withSecrets),
                         limit: limit)
        case .delete: self = .delete(query: try WireItem.query(f.nested(required: .query)), all: try f.flag(.all))
        case .dump: self = .dump(withSecrets: try f.flag(.withSecrets))
        case .verify: self = .verify
        case .status: self = .status
        case .lock: self = .lock
        case .unlock: self = .unlock(passphrase: try f.secret(.passphrase))
        case .unmount: self = .unmount
        case .setLockAfter:
            // Never is the field left out, so 0 is no setting.
            let seconds = try f.integer(.lockAfter, as: UInt64.self)
            if seconds == 0 { throw KeychainError.invalidInput("lock-after must be a positive number of seconds") }
            self = .setLockAfter(seconds: seconds.map { Int(clamping: $0) })
        case .importItems:
            self = .importItems(batch: try WireItem.batch(f, validating: true), overwrite: try f.flag(.updateExisting))
        case .exportItems:
            self = .exportItems(afterID: Int64(bitPattern: try f.integer(required: .afterID, as: UInt64.self)),
                                limit: Int(clamping: try f.integer(required: .limit, as: UInt64.self)))
        case .sync:
            guard let action = SyncAction(rawValue: try f.integer(required: .syncAction, as: UInt8.self)) else {
                throw KeychainError.invalidInput("unknown sync action")
            }
            self = .sync(action: action, folder: try f.string(.syncFolder), passphrase: try f.secret(.passphrase),
                         scryptLogN: try f.integer(.scryptLogN, as: UInt8.self))
        case .setAccess:
            guard let list = try WireItem.changes(f.nested(required: .changes)).values.access else {
                throw KeychainError.invalidInput("an access list change without a list")
            }
            guard let passphrase = try f.secret(.passphrase) else { throw KeychainError.wrongPassphrase }
            let repin = try f.nested(.repin).map { try WireItem.changes($0).values.access?.rules.map(\.program) ?? [] } ?? []
            self = .setAccess(key: try WireItem.newKey(f.nested(required: .key)), list: list, repin: repin, passphrase: passphrase)
        }
    }
}

/// A reply frame. `find` and `dump` are answered with one `item` frame per item, and
/// `delete` with one `deleted` frame per deleted record, then `end`, so that no frame holds
/// more than one secret; `exportItems` with `exported` frames of a few items each (at most
/// about 1 MiB of secrets, or one item) and then `exportEnd`; every other request with one frame.
package enum ControlReply {
    case saved(ItemRecord)
    case item(FoundItem)
    case end(count: Int)
    case deleted(ItemRecord)
    case verified(VerifyReport)
    case status(KeychainStatus)
    case done
    /// The very `KeychainError` the daemon met, so the client exits with the same code.
    case failed(KeychainError)
    case imported(ImportReport)
    /// Some of the items of an export page.
    case exported(ItemBatch)
    /// The end of an export page: how many items were sent, the damaged ones left out, the next page's `afterID`.
    case exportEnd(count: Int, damaged: [IntegrityProblem], next: Int64?)
    /// The daemon's first frame on every connection, before any request: it has identified the
    /// peer (issue 17), so the client may now make itself non-dumpable, which hides its /proc
    /// entries from the daemon, and send its request.
    case identified
    case synced(SyncOutcome)

    /// The frame kinds of replies. Never renumber.
    package enum Kind: UInt16 {
        case saved = 0x8001, item = 0x8002, end = 0x8003, deleted = 0x8004, verified = 0x8005, status = 0x8006
        case done = 0x8007, imported = 0x8008, exported = 0x8009, exportEnd = 0x800A, identified = 0x800B, synced = 0x800C
        case failed = 0x80FF
    }

    package var kind: Kind {
        switch self {
        case .saved: .saved
        case .item: .item
        case .end: .end
        case .deleted: .deleted
        case .verified: .verified
        case .status: .status
        case .done: .done
        case .failed: .failed
        case .imported: .imported
        case .exported: .exported
        case .exportEnd: .exportEnd
        case .identified: .identified
        case .synced: .synced
        }
    }

    package func frame() throws -> SecureBytes {
        try ControlFrame.encode(kind: kind.rawValue) { w in
            switch self {
            case .saved(let record), .deleted(let record): w.nested(.record) { WireItem.write(record, to: $0) }
            case .item(let item): WireItem.write(item, to: w)
            case .end(let count): w.field(.count, UInt64(count))
            case .verified(let report):
                w.field(.count, UInt64(report.checked))
                WireItem.write(report.problems, to: w)
            case .imported(let report):
                w.field(.added, UInt64(report.added))
                w.field(.replaced, UInt64(report.replaced))
                for key in report.skipped { w.nested(.skipped) { WireItem.write(key, to: $0) } }
            case .exported(let batch):
                try WireItem.write(batch, to: w)
            case .exportEnd(let count, let damaged, let next):
                w.field(.count, UInt64(count))
                WireItem.write(damaged, to: w)
                if let next { w.field(.nextID, UInt64(bitPattern: next)) }
            case .status(let s): WireItem.write(s, to: w)
            case .done, .identified: break
            case .synced(let o):
                w.field(.syncFolder, o.folder)
                w.field(.syncDevice, o.device)
                for (tag, n) in [(WireTag.published, o.published), (.applied, o.applied), (.removed, o.deleted),
                                 (.conflictCopies, o.conflictCopies), (.deferred, o.deferred)] {
                    w.field(tag, UInt64(max(n, 0)))
                }
                for key in o.heldByItemThatDoesNotSync { w.nested(.heldHere) { WireItem.write(key, to: $0) } }
                for r in o.refusals { w.nested(.refusal) { $0.field(.message, r) } }
                if let note = o.ownDirectoryRewritten { w.field(.ownDirectoryRewritten, note) }
            case .failed(let error): WireError.write(error, to: w)
            }
        }
    }

    package init(kind rawKind: UInt16, payload: SecureBytes) throws {
        guard let kind = Kind(rawValue: rawKind) else { throw KeychainError.io("unknown control reply kind \(rawKind)") }
        let f = try WireFields(payload)
        switch kind {
        case .saved: self = .saved(try WireItem.record(f.nested(required: .record)))
        case .item: self = .item(try WireItem.foundItem(f))
        case .end: self = .end(count: Int(clamping: try f.integer(required: .count, as: UInt64.self)))
        case .deleted: self = .deleted(try WireItem.record(f.nested(required: .record)))
        case .verified:
            self = .verified(VerifyReport(checked: Int(clamping: try f.integer(required: .count, as: UInt64.self)),
                                          problems: try WireItem.problems(f)))
        case .imported:
            self = .imported(ImportReport(added: Int(clamping: try f.integer(required: .added, as: UInt64.self)),
                                          replaced: Int(clamping: try f.integer(required: .replaced, as: UInt64.self)),
                                          skipped: try f.nestedAll(.skipped).map(WireItem.storedKey)))
        case .exported: self = .exported(try WireItem.batch(f, validating: false))
        case .exportEnd:
            self = .exportEnd(count: Int(clamping: try f.integer(required: .count, as: UInt64.self)),
                              damaged: try WireItem.problems(f),
                              next: try f.integer(.nextID, as: UInt64.self).map { Int64(bitPattern: $0) })
        case .status: self = .status(try WireItem.status(f))
        case .done: self = .done
        case .identified: self = .identified
        case .synced:
            var o = SyncOutcome()
            o.folder = try f.string(.syncFolder) ?? ""
            o.device = try f.string(.syncDevice) ?? ""
            func n(_ tag: WireTag) throws -> Int { Int(clamping: try f.integer(tag, as: UInt64.self) ?? 0) }
            o.published = try n(.published); o.applied = try n(.applied); o.deleted = try n(.removed)
            o.conflictCopies = try n(.conflictCopies); o.deferred = try n(.deferred)
            o.heldByItemThatDoesNotSync = try f.nestedAll(.heldHere).map(WireItem.storedKey)
            o.refusals = try f.nestedAll(.refusal).map { try $0.string(required: .message) }
            o.ownDirectoryRewritten = try f.string(.ownDirectoryRewritten)
            self = .synced(o)
        case .failed: self = .failed(try WireError.read(f))
        }
    }
}

/// Keys, queries, attributes and items as explicit fields.
package enum WireItem {
    static func write(_ key: ItemKey, to w: WireWriter) {
        switch key {
        case .generic(let g):
            w.field(.itemKind, UInt8(1))
            w.field(.accessGroup, g.accessGroup)
            w.field(.service, g.service)
            w.field(.account, g.account)
        case .internet(let i):
            w.field(.itemKind, UInt8(2))
            w.field(.accessGroup, i.accessGroup)
            w.field(.server, i.server)
            w.field(.port, i.port)
            w.field(.path, i.path)
            w.field(.internetProtocol, i.protocol.code.text)
            w.field(.authenticationType, i.authenticationType.code.text)
            w.field(.securityDomain, i.securityDomain)
            w.field(.account, i.account)
        }
    }

    static func kind(_ f: WireFields) throws -> ItemKind {
        switch try f.integer(required: .itemKind, as: UInt8.self) {
        case 1: .generic
        case 2: .internet
        case let k: throw KeychainError.invalidInput("unknown item kind \(k)")
        }
    }

    static func code<T: FourCharVocabulary>(_ f: WireFields, _ tag: WireTag, as: T.Type) throws -> T? {
        try f.string(tag).map { text in T(code: try validated { try FourCharCode(text) }) }
    }

    /// A key for a new item, validated as the CLI and the tree validate it.
    package static func newKey(_ f: WireFields) throws -> ItemKey {
        let account = try f.string(required: .account), group = try f.string(.accessGroup) ?? ""
        switch try kind(f) {
        case .generic:
            let service = try f.string(required: .service)
            return try validated { .generic(try GenericPasswordKey(service: service, account: account, accessGroup: group)) }
        case .internet:
            let server = try f.string(required: .server), path = try f.string(.path) ?? ""
            let port = try f.integer(.port, as: UInt16.self) ?? 0
            let proto = try code(f, .internetProtocol, as: InternetProtocol.self) ?? .https
            let auth = try code(f, .authenticationType, as: AuthenticationType.self) ?? .default
            let domain = try f.string(.securityDomain) ?? ""
            return try validated {
                .internet(try InternetPasswordKey(server: server, port: port, path: path, protocol: proto,
                                                  authenticationType: auth, securityDomain: domain, account: account,
                                                  accessGroup: group))
            }
        }
    }

    /// A key as the daemon's store holds it, taken as it is (it may predate a rule).
    static func storedKey(_ f: WireFields) throws -> ItemKey {
        let account = try f.string(required: .account), group = try f.string(.accessGroup) ?? ""
        switch try kind(f) {
        case .generic:
            return .generic(GenericPasswordKey(storedService: try f.string(required: .service), account: account,
                                               accessGroup: group))
        case .internet:
            guard let proto = try code(f, .internetProtocol, as: InternetProtocol.self),
                  let auth = try code(f, .authenticationType, as: AuthenticationType.self) else {
                throw WireFields.malformed("an internet key without protocol or authentication type")
            }
            return .internet(InternetPasswordKey(
                storedServer: try f.string(required: .server), port: try f.integer(required: .port, as: UInt16.self),
                path: try f.string(.path) ?? "", protocol: proto, authenticationType: auth,
                securityDomain: try f.string(.securityDomain) ?? "", account: account, accessGroup: group))
        }
    }

    static func write(_ q: ItemQuery, to w: WireWriter) {
        w.field(.itemKind, UInt8(q.kind == .generic ? 1 : 2))
        w.field(.accessGroup, ifPresent: q.accessGroup)
        w.field(.account, ifPresent: q.account)
        w.field(.service, ifPresent: q.service)
        w.field(.server, ifPresent: q.server)
        if let port = q.port { w.field(.port, port) }
        w.field(.path, ifPresent: q.path)
        w.field(.internetProtocol, ifPresent: q.protocol?.code.text)
        w.field(.authenticationType, ifPresent: q.authenticationType?.code.text)
        w.field(.securityDomain, ifPresent: q.securityDomain)
        write(q.attributes, to: w)
    }

    package static func query(_ f: WireFields) throws -> ItemQuery {
        ItemQuery(kind: try kind(f), accessGroup: try f.string(.accessGroup), account: try f.string(.account),
                  service: try f.string(.service), server: try f.string(.server),
                  port: try f.integer(.port, as: UInt16.self), path: try f.string(.path),
                  protocol: try code(f, .internetProtocol, as: InternetProtocol.self),
                  authenticationType: try code(f, .authenticationType, as: AuthenticationType.self),
                  securityDomain: try f.string(.securityDomain), attributes: try values(f))
    }

    /// The settable attributes, each under its tag from `ItemAttribute.all`.
    static func write(_ values: AttributeValues, to w: WireWriter) {
        for a in ItemAttribute.all { if let v = values[a] { w.field(a, v) } }
    }

    static func values(_ f: WireFields) throws -> AttributeValues {
        var values = AttributeValues()
        for a in ItemAttribute.all { values[a] = try f.attribute(a) }
        return values
    }

    static func write(_ c: AttributeChanges, to w: WireWriter) {
        write(c.values, to: w)
        if let a = c.accessible { w.field(.accessible, UInt8(a.code)) }
    }

    static func accessible(_ f: WireFields) throws -> AccessibilityClass? {
        try f.integer(.accessible, as: UInt8.self).map { code in
            guard let c = AccessibilityClass(code: Int(code)) else {
                throw KeychainError.invalidInput("unknown accessibility class number \(code)")
            }
            return c
        }
    }

    package static func changes(_ f: WireFields?) throws -> AttributeChanges {
        guard let f else { return AttributeChanges() }
        return AttributeChanges(try values(f), accessible: try accessible(f))
    }

    static func write(_ r: ItemRecord, to w: WireWriter) {
        w.nested(.key) { write(r.key, to: $0) }
        let a = r.attributes
        write(a.values, to: w)
        w.field(.accessible, UInt8(a.accessible.code))
        w.field(.created, a.created.timeIntervalSinceReferenceDate.bitPattern)
        w.field(.modified, a.modified.timeIntervalSinceReferenceDate.bitPattern)
    }

    /// A record whose key is read by `key`: `storedKey` for what the daemon sends, `newKey`
    /// (validated) for what it is asked to store.
    static func record(_ f: WireFields, key: (WireFields) throws -> ItemKey = storedKey) throws -> ItemRecord {
        func date(_ tag: WireTag) throws -> Date {
            Date(timeIntervalSinceReferenceDate: Double(bitPattern: try f.integer(required: tag, as: UInt64.self)))
        }
        let changes = try changes(f)
        guard let accessible = changes.accessible else { throw WireFields.malformed("a record without its class") }
        let attributes = ItemAttributes(changes.values, accessible: accessible, created: try date(.created),
                                        modified: try date(.modified))
        return ItemRecord(key: try key(f.nested(required: .key)), attributes: attributes)
    }

    static func write(_ problems: [IntegrityProblem], to w: WireWriter) {
        for p in problems {
            w.nested(.problem) { n in
                n.field(.itemID, UInt64(bitPattern: p.itemID))
                n.field(.damage, p.reason)
            }
        }
    }

    static func problems(_ f: WireFields) throws -> [IntegrityProblem] {
        try f.nestedAll(.problem).map { p in
            IntegrityProblem(itemID: Int64(bitPattern: try p.integer(required: .itemID, as: UInt64.self)),
                             reason: try p.string(required: .damage))
        }
    }

    /// Each item of a batch as one `batchItem` field: its record, secret and extras, the
    /// secrets copied from the batch's locked buffer straight into the frame's.
    static func write(_ batch: ItemBatch, to w: WireWriter) throws {
        for entry in batch.entries {
            guard entry.secret.count <= maxSecretBytes else { throw KeychainError.secretTooLarge(entry.secret.count) }
            batch.withSecretAndExtras(entry) { secret, extras in
                w.nested(.batchItem) { n in
                    n.nested(.record) { write(entry.record, to: $0) }
                    n.field(.secret, secret)
                    if let extras { n.field(.extras, extras) }
                }
            }
        }
    }

    /// The `batchItem` fields as one batch, their secrets copied from the frame into the
    /// batch's locked buffer. `validating`: keys go through the model's initializers, as a
    /// `save` request's key does.
    package static func batch(_ f: WireFields, validating: Bool) throws -> ItemBatch {
        var batch = ItemBatch()
        for item in try f.nestedAll(.batchItem) {
            let record = try self.record(item.nested(required: .record), key: validating ? newKey : storedKey)
            try item.withBytes(.secret) { secret in
                let secret = secret ?? UnsafeRawBufferPointer(start: nil, count: 0)
                guard secret.count <= maxSecretBytes else { throw KeychainError.secretTooLarge(secret.count) }
                try item.withBytes(.extras) { extras in batch.append(record, secret: secret, extras: extras) }
            }
        }
        return batch
    }

    static func write(_ item: FoundItem, to w: WireWriter) {
        w.field(.itemID, UInt64(bitPattern: item.itemID))
        w.nested(.record) { write(item.record, to: $0) }
        switch item.secret {
        case .value(let bytes):
            w.field(.secretState, UInt8(1))
            w.field(.secret, secret: bytes)
        case .unavailable(let c):
            w.field(.secretState, UInt8(2))
            w.field(.accessible, UInt8(c.code))
        case .damaged(let reason):
            w.field(.secretState, UInt8(3))
            w.field(.damage, reason)
        case .refused(let reason):
            w.field(.secretState, UInt8(4))
            w.field(.message, reason)
        case nil:
            break
        }
        if let extras = item.extras { w.field(.extras, secret: extras) }
    }

    static func foundItem(_ f: WireFields) throws -> FoundItem {
        let secret: FoundSecret?
        switch try f.integer(.secretState, as: UInt8.self) {
        case nil: secret = nil
        case 1: secret = .value(try f.secret(.secret) ?? SecureBytes())
        case 2:
            guard let c = try accessible(f) else { throw WireFields.malformed("an unavailable secret without its class") }
            secret = .unavailable(c)
        case 3: secret = .damaged(try f.string(required: .damage))
        case 4: secret = .refused(try f.string(required: .message))
        case let s?: throw WireFields.malformed("unknown secret state \(s)")
        }
        return FoundItem(itemID: Int64(bitPattern: try f.integer(required: .itemID, as: UInt64.self)),
                         record: try record(f.nested(required: .record)), secret: secret, extras: try f.secret(.extras))
    }

    static let lockStates: [(LockState, UInt8)] = [(.beforeFirstUnlock, 1), (.unlocked, 2), (.locked, 3)]

    static func write(_ s: KeychainStatus, to w: WireWriter) {
        w.field(.lockState, lockStates.first { $0.0 == s.state }!.1)
        w.field(.storePath, s.storePath)
        w.field(.mountpoint, ifPresent: s.mountpoint)
        if let lockAfter = s.lockAfter { w.field(.lockAfter, UInt64(max(lockAfter, 0))) }
        for (c, n) in s.itemCounts.sorted(by: { $0.key < $1.key }) {
            w.nested(.classCount) { n2 in
                n2.field(.accessible, UInt8(c.code))
                n2.field(.count, UInt64(n))
            }
        }
        w.field(.hasPassphrase, s.hasPassphrase)
        if let pid = s.daemonPID { w.field(.daemonPID, UInt64(max(pid, 0))) }
        w.field(.daemonVersion, ifPresent: s.daemonVersion)
        if let locked = s.memoryLocked { w.field(.memoryLocked, UInt8(locked ? 1 : 0)) }
        if let allowRoot = s.allowRoot { w.field(.allowRoot, UInt8(allowRoot ? 1 : 0)) }
        if let wait = s.passphraseWait, wait > 0 { w.field(.passphraseWait, UInt64(wait)) }
        if let m = s.memory {
            w.nested(.memory) { n in
                n.field(.lockedBytes, UInt64(max(m.lockedBytes, 0)))
                n.field(.unlockedBytes, UInt64(max(m.unlockedBytes, 0)))
                if let limit = m.limit { n.field(.lockLimit, UInt64(max(limit, 0))) }
                n.field(.lockRefusals, UInt64(max(m.refusals, 0)))
                n.field(.cachedSecrets, UInt64(max(m.cachedSecrets, 0)))
                n.field(.cachedBytes, UInt64(max(m.cachedBytes, 0)))
                n.field(.cacheBudget, UInt64(max(m.cacheBudget, 0)))
            }
        }
    }

    static func memory(_ f: WireFields?) throws -> MemoryStatus? {
        guard let f else { return nil }
        func number(_ tag: WireTag) throws -> Int { Int(clamping: try f.integer(required: tag, as: UInt64.self)) }
        return MemoryStatus(lockedBytes: try number(.lockedBytes), unlockedBytes: try number(.unlockedBytes),
                            limit: try f.integer(.lockLimit, as: UInt64.self).map { Int(clamping: $0) },
                            refusals: try number(.lockRefusals), cachedSecrets: try number(.cachedSecrets),
                            cachedBytes: try number(.cachedBytes), cacheBudget: try number(.cacheBudget))
    }

    static func status(_ f: WireFields) throws -> KeychainStatus {
        let raw = try f.integer(required: .lockState, as: UInt8.self)
        guard let state = lockStates.first(where: { $0.1 == raw })?.0 else { throw WireFields.malformed("unknown lock state \(raw)") }
        var counts: [AccessibilityClass: Int] = [:]
        for n in try f.nestedAll(.classCount) {
            guard let c = try accessible(n) else { throw WireFields.malformed("a class count without its class") }
            counts[c] = Int(clamping: try n.integer(required: .count, as: UInt64.self))
        }
        return KeychainStatus(state: state, storePath: try f.string(required: .storePath), mountpoint: try f.string(.mountpoint),
                              lockAfter: try f.integer(.lockAfter, as: UInt64.self).map { Int(clamping: $0) },
                              itemCounts: counts, hasPassphrase: try f.flag(.hasPassphrase),
                              daemonPID: try f.integer(.daemonPID, as: UInt64.self).map { Int32(clamping: $0) },
                              daemonVersion: try f.string(.daemonVersion),
                              memoryLocked: try f.integer(.memoryLocked, as: UInt8.self).map { $0 != 0 },
                              allowRoot: try f.integer(.allowRoot, as: UInt8.self).map { $0 != 0 },
                              memory: try memory(f.nested(.memory)),
                              passphraseWait: try f.integer(.passphraseWait, as: UInt64.self).map { Int(clamping: $0) })
    }
}

/// `KeychainError` as explicit fields: a case number, its message and its number.
package enum WireError {
    /// Never renumber; a case this side does not know arrives as `io` with its message.
    static func write(_ e: KeychainError, to w: WireWriter) {
        let (code, message, number): (UInt16, String?, Int?) = switch e {
        case .itemNotFound: (1, nil, nil)
        case .duplicateItem: (2, nil, nil)
        case .wrongPassphrase: (3, nil, nil)
        case .tooManyAttempts(let s): (4, nil, s)
        case .unavailable(let c): (5, c, nil)
        case .integrityFailure(let m): (6, m, nil)
        case .invalidInput(let m): (7, m, nil)
        case .nameTooLong(let m): (8, m, nil)
        case .secretTooLarge(let n): (9, nil, n)
        case .noSuchStore(let p): (10, p, nil)
        case .notAKeychain(let m): (11, m, nil)
        case .storeExists(let p): (12, p, nil)
        case .storeBusy(let m): (13, m, nil)
        case .notMounted(let m): (14, m, nil)
        case .mountFailed(let m): (15, m, nil)
        case .diskFull: (16, nil, nil)
        case .io(let m): (17, m, nil)
        case .daemonVersionMismatch(let v): (18, v, nil)
        case .mountpointBusy(let m): (19, m, nil)
        case .accessDenied(let m): (20, m, nil)
        case .notSynchronizable(let m): (21, m, nil)
        case .fileExists(let m): (22, m, nil)
        case .mountpointNotEmpty(let m): (23, m, nil)
        case .syncEngine(let m): (40, m, nil)
        }
        w.field(.errorCase, code)
        w.field(.errorText, e.description)
        if let message { w.field(.message, message) }
        if let number { w.field(.number, UInt64(max(number, 0))) }
    }

    static func read(_ f: WireFields) throws -> KeychainError {
        let code = try f.integer(required: .errorCase, as: UInt16.self)
        let text = try f.string(.message) ?? ""
        let number = Int(clamping: try f.integer(.number, as: UInt64.self) ?? 0)
        switch code {
        case 1: return .itemNotFound
        case 2: return .duplicateItem
        case 3: return .wrongPassphrase
        case 4: return .tooManyAttempts(retryAfter: number)
        case 5: return .unavailable(className: text)
        case 6: return .integrityFailure(text)
        case 7: return .invalidInput(text)
        case 8: return .nameTooLong(text)
        case 9: return .secretTooLarge(number)
        case 10: return .noSuchStore(text)
        case 11: return .notAKeychain(text)
        case 12: return .storeExists(text)
        case 13: return .storeBusy(text)
        case 14: return .notMounted(text)
        case 15: return .mountFailed(text)
        case 16: return .diskFull
        case 17: return .io(text)
        case 18: return .daemonVersionMismatch(running: text)
        case 19: return .mountpointBusy(text)
        case 20: return .accessDenied(text)
        case 21: return .notSynchronizable(text)
        case 22: return .fileExists(text)
        case 23: return .mountpointNotEmpty(text)
        case 40: return .syncEngine(text)
        default: return .io(try f.string(.errorText) ?? "the daemon failed (error \(code))")
        }
    }
}

/// Turns the item model's errors into the keychain's, so they get the CLI's exit codes.
private func validated<T>(_ body: () throws -> T) throws -> T {
    do { return try body() } catch let error as ModelError { throw KeychainError(error) }
}
