/// Every way a keychain operation fails. Each case has its own CLI exit code
/// (`exitCode`, the one table) and the filesystem maps them to errno in its own table.
public enum KeychainError: Error, Equatable, Sendable, Codable, CustomStringConvertible {
    case itemNotFound
    case duplicateItem
    case wrongPassphrase
    /// Too many wrong passphrases in a row; the next attempt is allowed after this many seconds.
    case tooManyAttempts(retryAfter: Int)
    /// The item's class key is not held in this lock state (or not on this device).
    case unavailable(className: String)
    /// A sealed value failed authentication: tampered, swapped or corrupt.
    case integrityFailure(String)
    case invalidInput(String)
    case nameTooLong(String)
    case secretTooLarge(Int)
    case noSuchStore(String)
    /// The file is not a keychainfs store, or its header is damaged.
    case notAKeychain(String)
    case storeExists(String)
    /// A file the command would write exists, and the command replaces none unasked
    /// (`export FILE` without `--force`); the message names it and the way to replace it.
    case fileExists(String)
    /// Another daemon serves this store (message names its mountpoint), or no daemon does.
    case storeBusy(String)
    case notMounted(String)
    /// The daemon serving the store speaks another control protocol; names its version.
    case daemonVersionMismatch(running: String)
    case mountFailed(String)
    /// The mountpoint cannot be unmounted: a process has a file open or its working directory there.
    case mountpointBusy(String)
    /// The mountpoint holds files, which the mount would hide; the message names it.
    case mountpointNotEmpty(String)
    case diskFull
    /// A program not on the item's access list (issue 17), or one refused even when listed
    /// (traced, started with a loader variable, a replaced executable); the text says why.
    case accessDenied(String)
    /// A this-device-only item cannot be synchronizable (issue 20): the message says which change
    /// was refused; nothing changed.
    case notSynchronizable(String)
    case io(String)
    /// The sync engine (git) failed: the remote could not be reached, a merge conflicted, or
    /// pushes kept being refused; nothing was pushed, and the message says what git said.
    case syncEngine(String)

    /// The message a user sees, after the wording of macOS `security`.
    public var description: String {
        switch self {
        case .itemNotFound: "The specified item could not be found in the keychain."
        case .duplicateItem: "The specified item already exists in the keychain (use -U to update it)."
        case .wrongPassphrase: "The passphrase is wrong; nothing was changed."
        case .tooManyAttempts(let s): "Too many wrong passphrases; try again in \(s) second\(s == 1 ? "" : "s")."
        case .unavailable(let c): "Required key not available: '\(c)' items cannot be used in the keychain's current state; run 'keychainfs unlock'."
        case .integrityFailure(let m): "Integrity check failed: \(m)"
        case .invalidInput(let m): m
        case .nameTooLong(let m): m
        case .secretTooLarge(let n): "The secret is \(n) bytes; the limit is 16 MiB."
        case .noSuchStore(let p): "No keychain store at \(p) (create one with 'keychainfs init')."
        case .notAKeychain(let m): m
        case .storeExists(let p): "A keychain store already exists at \(p)."
        case .fileExists(let m): m
        case .storeBusy(let m): m
        case .notMounted(let m): m
        case .daemonVersionMismatch(let v): "the running daemon is version \(v); unmount and mount again"
        case .mountFailed(let m): m
        case .mountpointBusy(let m): m
        case .mountpointNotEmpty(let m): m
        case .diskFull: "The disk is full; nothing was changed."
        case .accessDenied(let m): "Access denied: \(m) (see 'keychainfs access log')."
        case .notSynchronizable(let m): m
        case .io(let m): m
        case .syncEngine(let m): m
        }
    }

    /// The CLI exit status. Where macOS `security` has one, it is the same number
    /// (its OSStatus's low byte): 44 not found, 45 duplicate, 51 auth failed, 36 interaction
    /// not allowed, 50 no such keychain, 49 invalid keychain. 64 is usage (swift-argument-parser).
    public var exitCode: Int32 {
        switch self {
        case .itemNotFound: 44
        case .duplicateItem: 45
        case .wrongPassphrase: 51
        case .tooManyAttempts: 52
        case .unavailable: 36
        case .integrityFailure: 93
        case .invalidInput: 65
        case .nameTooLong: 66
        case .secretTooLarge: 67
        case .noSuchStore: 50
        case .notAKeychain: 49
        case .storeExists, .fileExists: 48
        case .storeBusy: 75
        case .daemonVersionMismatch: 76
        case .notMounted: 69
        case .mountFailed: 70
        case .mountpointBusy: 16
        case .mountpointNotEmpty: 39
        case .diskFull: 73
        case .accessDenied: 77
        case .notSynchronizable: 78
        case .io: 74
        case .syncEngine: 85
        }
    }

    /// The exit-code table as printed by `--help` and the README.
    package static let exitCodeTable: [(code: Int32, meaning: String)] = [
        (0, "success"),
        (1, "other failure"),
        (16, "mountpoint busy: a process still uses the mount (find it with fuser -vm)"),
        (36, "locked: the item's accessibility class is not available now"),
        (39, "mountpoint not empty: mounting would hide its files"),
        (44, "item not found"),
        (45, "duplicate item"),
        (48, "already exists: the store, a sync folder's key, or export's FILE (--force replaces it)"),
        (49, "not a keychainfs store, or a corrupt one"),
        (50, "no such store"),
        (51, "wrong passphrase"),
        (52, "too many wrong passphrases; wait and retry"),
        (64, "usage error"),
        (65, "bad input (a name, port, protocol or class; an argument or path variable that is not UTF-8; a backup file that does not exist; no terminal to ask a passphrase on)"),
        (66, "name too long (over 255 bytes once escaped)"),
        (67, "secret over 16 MiB"),
        (69, "not mounted"),
        (70, "mount failed"),
        (73, "disk full; nothing was changed"),
        (74, "I/O error"),
        (75, "store busy: already mounted (here or at another mountpoint), in use by another process, or held by a daemon that cannot be reached or too busy to answer"),
        (76, "the running daemon is another version; unmount and mount again"),
        (77, "access denied: the program is not on the item's access list (or not trusted as the listed one), and no prompt allowed it (EACCES in the tree)"),
        (78, "a this-device-only item cannot be synchronizable; nothing was changed"),
        (85, "the sync engine (git) failed; nothing was pushed"),
        (93, "integrity failure: a tampered or corrupt item"),
    ]

    /// One daemon serves a store; the refusal names where it is mounted.
    package static func alreadyServed(_ store: String, at mountpoint: String?) -> KeychainError {
        .storeBusy("\(store) is already mounted at \(mountpoint ?? "another mountpoint"); one daemon serves a store")
    }
}
