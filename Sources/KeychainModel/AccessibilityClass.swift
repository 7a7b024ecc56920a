/// When an item's secret may be decrypted, after Apple's `kSecAttrAccessible*` values.
public enum AccessibilityClass: String, CaseIterable, Codable, Sendable, Comparable {
    case whenUnlocked = "when-unlocked"
    case afterFirstUnlock = "after-first-unlock"
    case always = "always"
    case whenUnlockedThisDeviceOnly = "when-unlocked-this-device-only"
    case afterFirstUnlockThisDeviceOnly = "after-first-unlock-this-device-only"
    case alwaysThisDeviceOnly = "always-this-device-only"
    case whenPasscodeSetThisDeviceOnly = "when-passcode-set-this-device-only"

    /// The class of a new item that names none, as on Apple platforms.
    public static let `default` = AccessibilityClass.whenUnlocked

    /// Stable number stored in the database; never renumber.
    package var code: Int {
        switch self {
        case .whenUnlocked: 1
        case .afterFirstUnlock: 2
        case .always: 3
        case .whenUnlockedThisDeviceOnly: 4
        case .afterFirstUnlockThisDeviceOnly: 5
        case .alwaysThisDeviceOnly: 6
        case .whenPasscodeSetThisDeviceOnly: 7
        }
    }

    /// The class stored as `code`; nil for a number no class has.
    package init?(code: Int) {
        guard let c = Self.allCases.first(where: { $0.code == code }) else { return nil }
        self = c
    }

    /// Parses a class's name (`when-unlocked`), as the CLI and the tree take it.
    public init(parsing text: String) throws(ModelError) {
        guard let c = AccessibilityClass(rawValue: text) else {
            throw .invalid("unknown accessibility class '\(text)'; expected one of: "
                + Self.allCases.map(\.rawValue).joined(separator: ", "))
        }
        self = c
    }

    /// True for the classes bound to this machine's device key; backups leave them out.
    public var isThisDeviceOnly: Bool {
        switch self {
        case .whenUnlockedThisDeviceOnly, .afterFirstUnlockThisDeviceOnly,
             .alwaysThisDeviceOnly, .whenPasscodeSetThisDeviceOnly: true
        default: false
        }
    }

    /// The lock states in which the class key is held.
    public enum Tier: Sendable { case always, afterFirstUnlock, whenUnlocked }

    /// Which class key seals the item, and so in which lock states it can be read.
    public var tier: Tier {
        switch self {
        case .always, .alwaysThisDeviceOnly: .always
        case .afterFirstUnlock, .afterFirstUnlockThisDeviceOnly: .afterFirstUnlock
        case .whenUnlocked, .whenUnlockedThisDeviceOnly, .whenPasscodeSetThisDeviceOnly: .whenUnlocked
        }
    }

    /// Whether an item of this class can be decrypted in `state`.
    public func isAvailable(in state: LockState) -> Bool {
        switch (tier, state) {
        case (.always, _): true
        case (.afterFirstUnlock, .unlocked), (.afterFirstUnlock, .locked): true
        case (.whenUnlocked, .unlocked): true
        default: false
        }
    }

    /// Orders by stored code, so listings are stable.
    public static func < (a: Self, b: Self) -> Bool { a.code < b.code }

    /// The class of an item created in a directory of the tree: the strictest of the mount's
    /// default and the items already there. This-device-only if any of them is; the most
    /// restrictive tier (when-unlocked over after-first-unlock over always); and
    /// when-passcode-set if any of them is. A save through a temporary file (`sed -i`, editors)
    /// creates that file beside the item, so its secret is never sealed under a weaker class,
    /// not even before the rename.
    package static func forNewItem(mountDefault: AccessibilityClass, siblings: some Sequence<AccessibilityClass>) -> AccessibilityClass {
        let all = [mountDefault] + Array(siblings)
        let deviceOnly = all.contains { $0.isThisDeviceOnly }
        let tier: Tier = all.contains { $0.tier == .whenUnlocked } ? .whenUnlocked
            : all.contains { $0.tier == .afterFirstUnlock } ? .afterFirstUnlock : .always
        switch (deviceOnly, tier) {
        case (false, .always): return .always
        case (false, .afterFirstUnlock): return .afterFirstUnlock
        case (false, .whenUnlocked): return .whenUnlocked
        case (true, .always): return .alwaysThisDeviceOnly
        case (true, .afterFirstUnlock): return .afterFirstUnlockThisDeviceOnly
        case (true, .whenUnlocked):
            return all.contains(.whenPasscodeSetThisDeviceOnly) ? .whenPasscodeSetThisDeviceOnly : .whenUnlockedThisDeviceOnly
        }
    }
}

/// The state of a keychain, as on a device.
public enum LockState: String, Codable, Sendable {
    case beforeFirstUnlock = "before-first-unlock"
    case unlocked
    case locked
}
