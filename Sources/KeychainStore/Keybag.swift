import Foundation
import KeychainCrypto
import KeychainModel

/// Which key wraps a keybag entry.
enum Wrapping: String, CaseIterable {
    case passphrase = "p"
    case device = "d"
    /// Both factors: derived from the passphrase key and the device key together.
    case passphraseAndDevice = "pd"
    /// An older generation's class key, wrapped by the same class's key of the next generation.
    case nextGeneration = "n"
}

/// One wrapped key as stored in the `wrapped_keys` table.
struct WrappedKey {
    var name: String
    var wrapping: Wrapping
    var generation: Int64
    var blob: [UInt8]
}

/// A class key of one generation.
struct ClassKeyID: Hashable {
    var accessible: AccessibilityClass
    var generation: Int64
}

/// The class keys, the blind-index key and the metadata keys, with the lock state that says
/// which of them are held. Not thread-safe; `Keychain` guards it.
///
/// Wrapping rules of the newest generation (passphrase store / device-only store):
/// - index key: passphrase and device / device
/// - `always`: passphrase and device / device        — readable before first unlock
/// - `always-this-device-only`: device / device
/// - `after-first-unlock`, `when-unlocked`: passphrase / device
/// - other `*-this-device-only`: passphrase+device / device (`when-passcode-set` refused)
/// A row that these rules do not allow is an integrity failure, never a way in: unwrapping
/// would otherwise take any row whose wrapping key it holds, so a device-wrapped row added
/// by someone with the device key would make a passphrase class open without it.
///
/// Generations: each passphrase change makes fresh class keys (generation + 1) wrapped as
/// above; each older generation's class key is kept only wrapped by its successor (`n`). New
/// items are sealed under the newest generation, so an old copy of the store with the old
/// passphrase opens only what was sealed before the change. The index key does not change
/// (blind indexes would all change with it); it is re-wrapped with each generation.
/// Generation 0 is a store made before generations: its rows' associated data does not name
/// the store; its first full unlock starts generation 1.
///
/// Metadata (names, attributes) uses a key derived from the class key; it is kept while
/// locked so that names stay listed, as on iOS.
struct Keybag {
    static let indexKeyName = "index"
    static func classKeyName(_ c: AccessibilityClass) -> String { "class.\(c.rawValue)" }

    let hasPassphrase: Bool
    let storeID: [UInt8]
    /// The newest generation, from the store's meta table.
    let generation: Int64
    private(set) var state: LockState = .beforeFirstUnlock
    private(set) var indexKey: SecureBytes? {
        // Derived once per key rather than at every commit (two HKDFs each).
        didSet { ledgerKeys = indexKey.flatMap { try? RowLedger.Keys(indexKey: $0) } }
    }
    /// The row ledger's keys, from the index key; forgotten with it.
    private(set) var ledgerKeys: RowLedger.Keys?
    private var classKeys: [ClassKeyID: SecureBytes] = [:]
    private var metadataKeys: [ClassKeyID: SecureBytes] = [:]
    let deviceKey: SecureBytes?

    static func wrappings(for name: String, hasPassphrase: Bool) -> [Wrapping] {
        if name == indexKeyName { return hasPassphrase ? [.passphrase, .device] : [.device] }
        guard let c = classNamed(name), hasPassphrase || c != .whenPasscodeSetThisDeviceOnly else { return [] }
        guard hasPassphrase else { return [.device] }
        switch c {
        case .always: return [.passphrase, .device]
        case .alwaysThisDeviceOnly: return [.device]
        case .afterFirstUnlock, .whenUnlocked: return [.passphrase]
        case .afterFirstUnlockThisDeviceOnly, .whenUnlockedThisDeviceOnly, .whenPasscodeSetThisDeviceOnly:
            return [.passphraseAndDevice]
        }
    }

    static func classes(hasPassphrase: Bool) -> [AccessibilityClass] {
        AccessibilityClass.allCases.filter { hasPassphrase || $0 != .whenPasscodeSetThisDeviceOnly }
    }

    static func classNamed(_ name: String) -> AccessibilityClass? {
        AccessibilityClass.allCases.first { classKeyName($0) == name }
    }

    /// Binds an entry to its store, name, wrapping and generation, so that rows cannot be moved
    /// between stores, keys or generations.
    static func aad(_ name: String, _ w: Wrapping, generation: Int64, storeID: [UInt8]) -> [UInt8] {
        guard generation > 0 else { return Array("kcfs-wrap|\(name)|\(w.rawValue)".utf8) }
        let id = storeID.map { String(format: "%02x", $0) }.joined()
        return Array("kcfs-wrap-v2|\(id)|\(name)|\(w.rawValue)|\(generation)".utf8)
    }

    private static func wrappingKey(_ w: Wrapping, passphraseKey: SecureBytes?, deviceKey: SecureBytes?) throws -> SecureBytes? {
        switch w {
        case .passphrase: return passphraseKey
        case .device: return deviceKey
        case .nextGeneration: return nil
        case .passphraseAndDevice:
            guard let p = passphraseKey, let d = deviceKey else { return nil }
            let both = SecureBytes(count: p.count + d.count)
            both.withUnsafeMutableBytes { dst in
                p.withUnsafeBytes { dst.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
                d.withUnsafeBytes { (dst.baseAddress! + p.count).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
            }
            return try HKDF.deriveKey(from: both, info: "keychainfs passphrase+device")
        }
    }

    // MARK: the policy

    /// Every row must be one the rules allow: the newest generation's wrappings, or one
    /// successor wrapping per older class key.
    static func checkPolicy(_ rows: [WrappedKey], generation: Int64, hasPassphrase: Bool) throws {
        for r in rows {
            let allowed: Bool
            if r.generation == generation {
                allowed = wrappings(for: r.name, hasPassphrase: hasPassphrase).contains(r.wrapping)
            } else {
                allowed = r.generation >= 0 && r.generation < generation && r.wrapping == .nextGeneration
                    && classNamed(r.name) != nil
            }
            guard allowed else {
                throw KeychainError.integrityFailure(
                    "the keybag has an entry the store's rules do not allow ('\(r.name)' wrapped by '\(r.wrapping.rawValue)', generation \(r.generation) of \(generation)): it was added behind keychainfs's back")
            }
        }
    }

    /// What is missing from the keybag: for each class, exactly the wrappings its rules ask
    /// for; for each older generation that items still use, its successor wrapping.
    static func audit(_ rows: [WrappedKey], generation: Int64, hasPassphrase: Bool,
                      itemKeys: Set<ClassKeyID>) -> [String] {
        var problems: [String] = []
        let have = Set(rows.map { "\($0.name)|\($0.wrapping.rawValue)|\($0.generation)" })
        for name in [indexKeyName] + classes(hasPassphrase: hasPassphrase).map(classKeyName) {
            for w in wrappings(for: name, hasPassphrase: hasPassphrase) where !have.contains("\(name)|\(w.rawValue)|\(generation)") {
                problems.append("the keybag entry '\(name)' wrapped by '\(w.rawValue)' is missing (deleted?)")
            }
        }
        for id in itemKeys.sorted(by: { ($0.generation, $0.accessible.code) < ($1.generation, $1.accessible.code) })
        where id.generation < generation {
            for g in id.generation..<generation where !have.contains("\(classKeyName(id.accessible))|n|\(g)") {
                problems.append("the keybag entry of generation \(g) of '\(id.accessible.rawValue)' is missing (deleted?)")
            }
        }
        if !hasPassphrase && rows.contains(where: { $0.wrapping == .passphrase || $0.wrapping == .passphraseAndDevice }) {
            problems.append("the store says it has no passphrase, but its keybag has passphrase entries")
        }
        return Array(Set(problems)).sorted()
    }

    // MARK: making keys

    /// Wraps `key` as the rules ask for `name` in `generation`.
    static func wrap(_ key: SecureBytes, name: String, generation: Int64, hasPassphrase: Bool, storeID: [UInt8],
                     passphraseKey: SecureBytes?, deviceKey: SecureBytes?) throws -> [WrappedKey] {
        try wrappings(for: name, hasPassphrase: hasPassphrase).map { w in
            guard let wk = try wrappingKey(w, passphraseKey: passphraseKey, deviceKey: deviceKey) else {
                throw KeychainError.invalidInput("the device key is needed to wrap '\(name)' but is missing")
            }
            return WrappedKey(name: name, wrapping: w, generation: generation,
                              blob: try AESGCM.seal(key, key: wk, aad: aad(name, w, generation: generation, storeID: storeID)))
        }
    }

    /// Fresh random keys for a new store (generation 1), wrapped, and its index key.
    static func create(passphraseKey: SecureBytes?, deviceKey: SecureBytes, storeID: [UInt8]) throws
        -> (rows: [WrappedKey], indexKey: SecureBytes) {
        let hasPassphrase = passphraseKey != nil
        let indexKey = SecureRandom.bytes(AESGCM.keyBytes)
        var out = try wrap(indexKey, name: indexKeyName, generation: 1, hasPassphrase: hasPassphrase, storeID: storeID,
                           passphraseKey: passphraseKey, deviceKey: deviceKey)
        for name in classes(hasPassphrase: hasPassphrase).map(classKeyName) {
            out += try wrap(SecureRandom.bytes(AESGCM.keyBytes), name: name, generation: 1, hasPassphrase: hasPassphrase,
                            storeID: storeID, passphraseKey: passphraseKey, deviceKey: deviceKey)
        }
        return (out, indexKey)
    }

    /// The rows of the next generation: fresh class keys wrapped under `passphraseKey` (and the
    /// device key), the index key re-wrapped, and each current class key wrapped by its
    /// successor. The caller replaces the current generation's rows with these. Needs every
    /// class key of the current generation (an unlocked store with its device key).
    /// `withPassphrase` changes whether the store has a passphrase (`passwd --add`/`--remove`):
    /// the new generation is wrapped by that store's rules, a class it gains starts fresh, and a
    /// class it loses (`when-passcode-set-this-device-only`) gets no successor.
    func nextGeneration(passphraseKey: SecureBytes?, withPassphrase: Bool? = nil) throws -> [WrappedKey] {
        guard state == .unlocked, let indexKey else { throw KeychainError.wrongPassphrase }
        let next = generation + 1
        let has = withPassphrase ?? hasPassphrase
        var out = try Self.wrap(indexKey, name: Self.indexKeyName, generation: next, hasPassphrase: has,
                                storeID: storeID, passphraseKey: passphraseKey, deviceKey: deviceKey)
        for c in Self.classes(hasPassphrase: has) {
            let current = classKeys[ClassKeyID(accessible: c, generation: generation)]
            guard current != nil || !Self.classes(hasPassphrase: hasPassphrase).contains(c) else {
                throw KeychainError.invalidInput("the key of '\(c.rawValue)' items is not available (is the device key missing?); nothing was changed")
            }
            let fresh = SecureRandom.bytes(AESGCM.keyBytes)
            let name = Self.classKeyName(c)
            out += try Self.wrap(fresh, name: name, generation: next, hasPassphrase: has, storeID: storeID,
                                 passphraseKey: passphraseKey, deviceKey: deviceKey)
            guard let current else { continue }
            out.append(WrappedKey(name: name, wrapping: .nextGeneration, generation: generation,
                                  blob: try AESGCM.seal(current, key: fresh,
                                                        aad: Self.aad(name, .nextGeneration, generation: generation, storeID: storeID))))
        }
        return out
    }

    // MARK: opening

    /// Opens what the device key alone can open: the state "before first unlock". Rows the
    /// rules do not allow fail here already.
    init(wrapped: [WrappedKey], hasPassphrase: Bool, storeID: [UInt8], generation: Int64, deviceKey: SecureBytes?) throws {
        self.hasPassphrase = hasPassphrase
        self.storeID = storeID
        self.generation = generation
        self.deviceKey = deviceKey
        try Self.checkPolicy(wrapped, generation: generation, hasPassphrase: hasPassphrase)
        guard let deviceKey else { return }
        var opened: [ClassKeyID: SecureBytes] = [:]
        for w in wrapped where w.wrapping == .device && w.generation == generation {
            // A device key from another machine opens nothing here; that is not damage.
            guard let key = try? AESGCM.open(w.blob, key: deviceKey, aad: aad(w)) else { continue }
            if w.name == Self.indexKeyName {
                indexKey = key
                // Observers do not run in an initialiser.
                ledgerKeys = try? RowLedger.Keys(indexKey: key)
                continue
            }
            if let c = Self.classNamed(w.name), c.tier == .always { opened[ClassKeyID(accessible: c, generation: generation)] = key }
        }
        try openOlderGenerations(wrapped, into: &opened)
        for (id, key) in opened { install(id, key) }
    }

    private func aad(_ w: WrappedKey) -> [UInt8] { Self.aad(w.name, w.wrapping, generation: w.generation, storeID: storeID) }

    /// Walks down the generations: each older class key opens with its successor.
    private func openOlderGenerations(_ wrapped: [WrappedKey], into keys: inout [ClassKeyID: SecureBytes]) throws {
        for g in stride(from: generation - 1, through: 0, by: -1) {
            for w in wrapped where w.generation == g && w.wrapping == .nextGeneration {
                guard let c = Self.classNamed(w.name),
                      let successor = keys[ClassKeyID(accessible: c, generation: g + 1)] else { continue }
                do { keys[ClassKeyID(accessible: c, generation: g)] = try AESGCM.open(w.blob, key: successor, aad: aad(w)) }
                catch { throw KeychainError.integrityFailure("the keybag entry of generation \(g) of '\(c.rawValue)' does not open") }
            }
        }
    }

    private mutating func install(_ id: ClassKeyID, _ key: SecureBytes) {
        classKeys[id] = key
        if metadataKeys[id] == nil { metadataKeys[id] = try? HKDF.deriveKey(from: key, info: "keychainfs metadata") }
    }

    /// Throws `wrongPassphrase` unless `passphraseKey` opens this generation's verifier (the
    /// passphrase-wrapped index key); installs nothing.
    func checkPassphrase(_ passphraseKey: SecureBytes, wrapped: [WrappedKey]) throws {
        try Self.checkPolicy(wrapped, generation: generation, hasPassphrase: hasPassphrase)
        // The index key is always passphrase-wrapped in such a store: it is the verifier.
        guard let check = wrapped.first(where: { $0.generation == generation && $0.name == Self.indexKeyName && $0.wrapping == .passphrase }) else {
            throw KeychainError.notAKeychain("the store's keybag has no passphrase entry")
        }
        guard (try? AESGCM.open(check.blob, key: passphraseKey, aad: aad(check))) != nil else {
            throw KeychainError.wrongPassphrase
        }
    }

    /// Unwraps every key the passphrase (and the device key, if present) opens.
    /// Throws `wrongPassphrase` without changing anything if the passphrase is wrong.
    mutating func unlock(passphraseKey: SecureBytes?, wrapped: [WrappedKey]) throws {
        let current = wrapped.filter { $0.generation == generation }
        if hasPassphrase {
            guard let passphraseKey else { throw KeychainError.wrongPassphrase }
            try checkPassphrase(passphraseKey, wrapped: wrapped)
        } else {
            try Self.checkPolicy(wrapped, generation: generation, hasPassphrase: hasPassphrase)
        }
        // A device key from another machine (the store was copied) opens nothing here: treat it
        // as absent, so that the passphrase still opens everything that does not need this device.
        var deviceKey = self.deviceKey
        if hasPassphrase, let d = deviceKey,
           let check = current.first(where: { $0.name == Self.indexKeyName && $0.wrapping == .device }),
           (try? AESGCM.open(check.blob, key: d, aad: aad(check))) == nil {
            deviceKey = nil
        }
        var opened: [String: SecureBytes] = [:]
        for w in current {
            guard let wk = try Self.wrappingKey(w.wrapping, passphraseKey: passphraseKey, deviceKey: deviceKey) else { continue }
            let key: SecureBytes
            do { key = try AESGCM.open(w.blob, key: wk, aad: aad(w)) }
            catch { throw KeychainError.integrityFailure("the keybag entry '\(w.name)' does not open") }
            // Two wrappings of one key (`always`) must agree, or one of them was replaced.
            if let earlier = opened[w.name], !earlier.isEqual(to: key) {
                throw KeychainError.integrityFailure("the keybag entries of '\(w.name)' disagree: one was replaced")
            }
            opened[w.name] = key
        }
        var keys: [ClassKeyID: SecureBytes] = [:]
        for (name, key) in opened {
            if let c = Self.classNamed(name) { keys[ClassKeyID(accessible: c, generation: generation)] = key }
        }
        try openOlderGenerations(wrapped, into: &keys)
        if let index = opened[Self.indexKeyName] { indexKey = index }
        for (id, key) in keys { install(id, key) }
        state = .unlocked
    }

    /// Forgets the keys of `when-unlocked*` classes; the secrets of those items become unreadable.
    mutating func lock() {
        guard state == .unlocked else { return }
        // Dropped, not wiped in place: another thread may be mid-decryption with it; the last
        // reference's deinit wipes and unmaps it.
        for id in classKeys.keys where id.accessible.tier == .whenUnlocked { classKeys[id] = nil }
        state = .locked
    }

    /// Forgets every key.
    mutating func forget() {
        classKeys = [:]; metadataKeys = [:]; indexKey = nil
        state = .beforeFirstUnlock
    }

    func classKey(_ c: AccessibilityClass, generation g: Int64? = nil) -> SecureBytes? {
        classKeys[ClassKeyID(accessible: c, generation: g ?? generation)]
    }
    func metadataKey(_ c: AccessibilityClass, generation g: Int64? = nil) -> SecureBytes? {
        metadataKeys[ClassKeyID(accessible: c, generation: g ?? generation)]
    }
    var deviceKeyPresent: Bool { deviceKey != nil }
    /// The classes and generations whose items' names and attributes can be read now.
    var metadataKeyIDs: [ClassKeyID] { Array(metadataKeys.keys) }

    /// Every class key of the newest generation is held: needed to start the next one.
    var holdsEveryClassKey: Bool {
        Self.classes(hasPassphrase: hasPassphrase).allSatisfy { classKey($0) != nil }
    }
}
