import Foundation
import KeychainCrypto
import KeychainModel

/// Which key wraps a keybag entry.
enum Wrapping: String, CaseIterable {
    case passphrase = "p"
    case device = "d"
    /// Both factors: derived from the passphrase key and the device key together.
    case passphraseAndDevice = "pd"
}

/// One wrapped key as stored in the `wrapped_keys` table.
struct WrappedKey {
    var name: String
    var wrapping: Wrapping
    var blob: [UInt8]
}

/// The class keys, the blind-index key and the metadata keys, with the lock state that says
/// which of them are held. Not thread-safe; `Keychain` guards it.
///
/// Wrapping rules (passphrase store / device-only store):
/// - index key: passphrase and device / device
/// - `always`: passphrase and device / device        — readable before first unlock
/// - `always-this-device-only`: device / device
/// - `after-first-unlock`, `when-unlocked`: passphrase / device
/// - other `*-this-device-only`: passphrase+device / device (`when-passcode-set` refused)
/// Metadata (names, attributes) uses a key derived from the class key; it is kept while
/// locked so that names stay listed, as on iOS.
struct Keybag {
    static let indexKeyName = "index"
    static func classKeyName(_ c: AccessibilityClass) -> String { "class.\(c.rawValue)" }

    let hasPassphrase: Bool
    private(set) var state: LockState = .beforeFirstUnlock
    private(set) var indexKey: SecureBytes?
    private var classKeys: [AccessibilityClass: SecureBytes] = [:]
    private var metadataKeys: [AccessibilityClass: SecureBytes] = [:]
    private let deviceKey: SecureBytes?

    static func wrappings(for name: String, hasPassphrase: Bool) -> [Wrapping] {
        guard hasPassphrase else { return [.device] }
        if name == indexKeyName { return [.passphrase, .device] }
        guard let c = AccessibilityClass.allCases.first(where: { classKeyName($0) == name }) else { return [] }
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

    private static func aad(_ name: String, _ w: Wrapping) -> [UInt8] { Array("kcfs-wrap|\(name)|\(w.rawValue)".utf8) }

    private static func wrappingKey(_ w: Wrapping, passphraseKey: SecureBytes?, deviceKey: SecureBytes?) throws -> SecureBytes? {
        switch w {
        case .passphrase: return passphraseKey
        case .device: return deviceKey
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

    /// Fresh random keys for a new store, wrapped for storage.
    static func create(passphraseKey: SecureBytes?, deviceKey: SecureBytes) throws -> [WrappedKey] {
        let hasPassphrase = passphraseKey != nil
        let names = [indexKeyName] + classes(hasPassphrase: hasPassphrase).map(classKeyName)
        var out: [WrappedKey] = []
        for name in names {
            let key = SecureRandom.bytes(AESGCM.keyBytes)
            out += try wrap(key, name: name, hasPassphrase: hasPassphrase, passphraseKey: passphraseKey, deviceKey: deviceKey)
        }
        return out
    }

    static func wrap(_ key: SecureBytes, name: String, hasPassphrase: Bool,
                     passphraseKey: SecureBytes?, deviceKey: SecureBytes?) throws -> [WrappedKey] {
        try wrappings(for: name, hasPassphrase: hasPassphrase).map { w in
            guard let wk = try wrappingKey(w, passphraseKey: passphraseKey, deviceKey: deviceKey) else {
                throw KeychainError.invalidInput("the device key is needed to re-wrap '\(name)' but is missing")
            }
            return WrappedKey(name: name, wrapping: w, blob: try AESGCM.seal(key, key: wk, aad: aad(name, w)))
        }
    }

    /// Opens what the device key alone can open: the state "before first unlock".
    init(wrapped: [WrappedKey], hasPassphrase: Bool, deviceKey: SecureBytes?) {
        self.hasPassphrase = hasPassphrase
        self.deviceKey = deviceKey
        guard let deviceKey else { return }
        for w in wrapped where w.wrapping == .device {
            guard let key = try? AESGCM.open(w.blob, key: deviceKey, aad: Self.aad(w.name, .device)) else { continue }
            if w.name == Self.indexKeyName { indexKey = key; continue }
            if let c = Self.classNamed(w.name), c.tier == .always { install(c, key) }
        }
    }

    private static func classNamed(_ name: String) -> AccessibilityClass? {
        AccessibilityClass.allCases.first { classKeyName($0) == name }
    }

    private mutating func install(_ c: AccessibilityClass, _ key: SecureBytes) {
        classKeys[c] = key
        if metadataKeys[c] == nil { metadataKeys[c] = try? HKDF.deriveKey(from: key, info: "keychainfs metadata") }
    }

    /// Unwraps every key the passphrase (and the device key, if present) opens.
    /// Throws `wrongPassphrase` without changing anything if the passphrase is wrong.
    mutating func unlock(passphraseKey: SecureBytes?, wrapped: [WrappedKey]) throws {
        var opened: [(String, SecureBytes)] = []
        if hasPassphrase {
            guard let passphraseKey else { throw KeychainError.wrongPassphrase }
            // The index key is always passphrase-wrapped in such a store: it is the verifier.
            guard let check = wrapped.first(where: { $0.name == Self.indexKeyName && $0.wrapping == .passphrase }) else {
                throw KeychainError.notAKeychain("the store's keybag has no passphrase entry")
            }
            guard (try? AESGCM.open(check.blob, key: passphraseKey, aad: Self.aad(check.name, .passphrase))) != nil else {
                throw KeychainError.wrongPassphrase
            }
        }
        // A device key from another machine (the store was copied) opens nothing here: treat it
        // as absent, so that the passphrase still opens everything that does not need this device.
        var deviceKey = self.deviceKey
        if hasPassphrase, let d = deviceKey,
           let check = wrapped.first(where: { $0.name == Self.indexKeyName && $0.wrapping == .device }),
           (try? AESGCM.open(check.blob, key: d, aad: Self.aad(check.name, .device))) == nil {
            deviceKey = nil
        }
        for w in wrapped {
            guard let wk = try Self.wrappingKey(w.wrapping, passphraseKey: passphraseKey, deviceKey: deviceKey) else { continue }
            do {
                opened.append((w.name, try AESGCM.open(w.blob, key: wk, aad: Self.aad(w.name, w.wrapping))))
            } catch {
                throw KeychainError.integrityFailure("the keybag entry '\(w.name)' does not open")
            }
        }
        for (name, key) in opened {
            if name == Self.indexKeyName { indexKey = key } else if let c = Self.classNamed(name) { install(c, key) }
        }
        state = .unlocked
    }

    /// Forgets the keys of `when-unlocked*` classes; the secrets of those items become unreadable.
    mutating func lock() {
        guard state == .unlocked else { return }
        // Dropped, not wiped in place: another thread may be mid-decryption with it; the last
        // reference's deinit wipes and unmaps it.
        for c in classKeys.keys where c.tier == .whenUnlocked { classKeys[c] = nil }
        state = .locked
    }

    /// Forgets every key.
    mutating func forget() {
        classKeys = [:]; metadataKeys = [:]; indexKey = nil
        state = .beforeFirstUnlock
    }

    func classKey(_ c: AccessibilityClass) -> SecureBytes? { classKeys[c] }
    func metadataKey(_ c: AccessibilityClass) -> SecureBytes? { metadataKeys[c] }
    var deviceKeyPresent: Bool { deviceKey != nil }

    /// Every key, wrapped as a store without a passphrase wraps it (device key only), for
    /// `Keychain.removePassphrase`. The `when-passcode-set-this-device-only` key is left out:
    /// such a store has none.
    func wrapAllForDeviceOnly() throws -> [WrappedKey] {
        try wrapAll(hasPassphrase: false, passphraseKey: nil, extra: [])
    }

    /// Every key, wrapped as a store with a passphrase wraps it, plus a fresh key for
    /// `when-passcode-set-this-device-only` items, for `Keychain.addPassphrase`.
    func wrapAllForPassphrase(_ passphraseKey: SecureBytes) throws -> [WrappedKey] {
        let passcodeKey = SecureRandom.bytes(AESGCM.keyBytes)
        return try wrapAll(hasPassphrase: true, passphraseKey: passphraseKey,
                           extra: [(Self.classKeyName(.whenPasscodeSetThisDeviceOnly), passcodeKey)])
    }

    /// Needs the store unlocked with every key of a device-key-only store held, and the device key.
    private func wrapAll(hasPassphrase: Bool, passphraseKey: SecureBytes?,
                         extra: [(String, SecureBytes)]) throws -> [WrappedKey] {
        guard state == .unlocked else { throw KeychainError.wrongPassphrase }
        guard deviceKey != nil else {
            throw KeychainError.invalidInput("this machine's device key is missing, and every key of the store must be wrapped by it; nothing was changed")
        }
        guard let indexKey else { throw KeychainError.invalidInput("the store's index key is not available; nothing was changed") }
        var keys: [(String, SecureBytes)] = [(Self.indexKeyName, indexKey)]
        for c in Self.classes(hasPassphrase: false) {
            guard let k = classKeys[c] else {
                throw KeychainError.invalidInput("the key of '\(c.rawValue)' items does not open with this machine's device key (was the store copied from another machine?); nothing was changed")
            }
            keys.append((Self.classKeyName(c), k))
        }
        var out: [WrappedKey] = []
        for (name, key) in keys + extra {
            out += try Self.wrap(key, name: name, hasPassphrase: hasPassphrase, passphraseKey: passphraseKey, deviceKey: deviceKey)
        }
        return out
    }

    /// Re-wraps every passphrase-wrapped key under a new passphrase key; items are untouched.
    func rewrap(under newPassphraseKey: SecureBytes) throws -> [WrappedKey] {
        guard state == .unlocked else { throw KeychainError.wrongPassphrase }
        var out: [WrappedKey] = []
        var keys: [(String, SecureBytes)] = []
        if let indexKey { keys.append((Self.indexKeyName, indexKey)) }
        for c in Self.classes(hasPassphrase: true) {
            guard let k = classKeys[c] else {
                throw KeychainError.invalidInput("the key of '\(c.rawValue)' items is not available (is the device key missing?); the passphrase was not changed")
            }
            keys.append((Self.classKeyName(c), k))
        }
        for (name, key) in keys {
            out += try Self.wrap(key, name: name, hasPassphrase: true, passphraseKey: newPassphraseKey, deviceKey: deviceKey)
        }
        return out
    }
}
