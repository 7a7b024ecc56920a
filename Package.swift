// swift-tools-version:6.0
import PackageDescription

// Layers, each depending only on those above it:
// KeychainErrors (leaf) → KeychainModel → KeychainCrypto → KeychainBatch → KeychainStore → KeychainFileSystem
// (the owner, ServedKeychain, and the tree) → KeychainFuse → KeychainDaemon (the daemon's composition)
// → executables. KeychainBatch (items with their secrets in one locked buffer) is what
// the store's batch writes and the control protocol's import and export both carry; KeychainBackup
// (backup files) needs only it. The control socket is apart from the store: KeychainControlProtocol
// (wire format, records, `KeychainService`) → KeychainClient (reaching a daemon) and KeychainControlServer (the
// daemon's end); KeychainControl adds the one service over the owner, for the daemon and for a
// command with no daemon. git-credential-keychainfs
// links only the client, so neither GRDB nor SQLite. So does `keychainfs` itself: a small front that
// answers `find-generic-password -w` through the daemon and execs `keychainfs-full` (the whole
// tool, Sources/keychainfs) for everything else, so that a lookup pays no start-up of the whole tool.
// The Secret Service: SDBus (sd-bus from libsystemd, through CSystemd and CSDBusShim, in a small
// Swift layer) → KeychainSecretService (the D-Bus API over the owner, KeychainFileSystem's
// ServedKeychain) → KeychainDaemon, which starts it beside the mount.
// keychainfs-full resolves every symbol when it starts (`-z now`, and its relocations read-only
// after it; the front starts it with LD_BIND_NOW for its libraries). Lazily, the loader's
// resolver saves the vector registers on the stack at each first call of a library function:
// registers that the last copy of a secret went through (client_memory.py found a password
// there, in the git helper, below its stack pointer where nothing wipes it). The front and the
// git helper are static executables and resolve nothing.
let bindNow = ["-Xlinker", "-z", "-Xlinker", "now", "-Xlinker", "-z", "-Xlinker", "relro"]

let package = Package(
    name: "keychainfs",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "KeychainStore", targets: ["KeychainStore"]),
        .executable(name: "keychainfs", targets: ["keychainfs"]),
        .executable(name: "keychainfs-full", targets: ["keychainfs-full"]),
        .executable(name: "git-credential-keychainfs", targets: ["git-credential-keychainfs"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/LebJe/TOMLKit", from: "0.6.0"),
    ],
    targets: [
        .systemLibrary(name: "CFuse", pkgConfig: "fuse3",
                       providers: [.apt(["libfuse3-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "libcrypto",
                       providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CSystemd", pkgConfig: "libsystemd",
                       providers: [.apt(["libsystemd-dev"])]),
        .target(name: "CFuseShim", dependencies: ["CFuse"]),
        .target(name: "CSDBusShim", dependencies: ["CSystemd"]),
        // sd-bus, the field's D-Bus library, in a small Swift layer: messages, objects, one thread.
        .target(name: "SDBus", dependencies: ["CSystemd", "CSDBusShim", "KeychainCrypto"]),
        // The Secret Service D-Bus API over the keychain's owner.
        .target(name: "KeychainSecretService", dependencies: [
            "SDBus", "COpenSSL", "KeychainCrypto", "KeychainModel", "KeychainStore", "KeychainFileSystem", "KeychainAccess",
            .product(name: "Logging", package: "swift-log"),
        ]),
        .target(name: "CHardening"),
        // realloc that wipes the block it leaves, for keychainfs-full only (wiping_realloc.c).
        .target(name: "CWipingRealloc"),
        .target(name: "KeychainErrors"),
        .target(name: "KeychainModel", dependencies: ["KeychainErrors"]),
        // scrypt's memory-hard middle (ROMix), optimised even in a debug build: at -O0 an unlock
        // at the default cost took seconds.
        .target(name: "CScrypt", cSettings: [.unsafeFlags(["-O3"])]),
        .target(name: "KeychainCrypto", dependencies: ["COpenSSL", "CHardening", "CScrypt"]),
        .target(name: "KeychainBatch", dependencies: ["KeychainModel", "KeychainCrypto"]),
        // The store's SQLite VFS: the system's, with a WAL's truncation done as an overwrite with zeros.
        .target(name: "CStoreVFS"),
        .target(name: "KeychainStore", dependencies: [
            "KeychainModel", "KeychainCrypto", "KeychainBatch", "CStoreVFS", "CProcessPin",
            .product(name: "GRDB", package: "GRDB.swift"),
            .product(name: "GRDBSQLite", package: "GRDB.swift"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        .target(name: "KeychainFileSystem", dependencies: [
            "KeychainModel", "KeychainCrypto", "KeychainStore", "KeychainAccess", .product(name: "Logging", package: "swift-log"),
        ]),
        .target(name: "KeychainFuse", dependencies: ["KeychainFileSystem", "KeychainAccess", "CFuseShim"]),
        .target(name: "KeychainControlProtocol", dependencies: ["KeychainModel", "KeychainCrypto", "KeychainBatch"]),
        .target(name: "KeychainClient", dependencies: ["KeychainControlProtocol", "KeychainModel", "KeychainCrypto"]),
        .target(name: "KeychainControlServer", dependencies: [
            "KeychainControlProtocol", "KeychainModel", "KeychainCrypto", "KeychainAccess", .product(name: "Logging", package: "swift-log"),
        ]),
        .target(name: "KeychainControl", dependencies: [
            "KeychainStore", "KeychainFileSystem", "KeychainClient", "KeychainControlProtocol", "KeychainAccess", "KeychainSync",
        ]),
        .target(name: "GitCredential", dependencies: ["KeychainModel", "KeychainCrypto"]),
        // The git transport of a sync folder (issue 20): commit, fetch, merge, push, with the
        // keychain's merge called in between. It runs git; it knows nothing of the folder's files.
        .target(name: "KeychainSyncGit", dependencies: ["KeychainErrors"]),
        .target(name: "KeychainBackup", dependencies: ["KeychainModel", "KeychainCrypto", "KeychainBatch"]),
        // Sync across devices (issue 20): the folder's sealed files and signed manifests, the
        // per-item merge, and the exchange that applies it through the owner (ServedKeychain).
        // Above the filesystem semantics (the owner), below the daemon and the executables.
        .target(name: "KeychainSync", dependencies: [
            "KeychainModel", "KeychainCrypto", "KeychainBatch", "KeychainStore", "KeychainBackup", "KeychainFileSystem",
            .product(name: "Logging", package: "swift-log"),
        ]),
        // Per-program access (issue 17): who is asking (a pidfd-pinned process, its executable's
        // identity), access lists, pinentry prompts and the access log. Called by the gate.
        .target(name: "CProcessPin"),
        .target(name: "KeychainAccess", dependencies: ["KeychainErrors", "KeychainModel", "KeychainCrypto", "CProcessPin", "COpenSSL"]),
        .target(name: "KeychainConfig", dependencies: [
            "KeychainModel",
            .product(name: "TOMLKit", package: "TOMLKit"),
        ]),
        // The daemon's composition: the owner, the FUSE mount, the control service and socket,
        // systemd's notification; the executable parses arguments and calls it.
        .target(name: "KeychainDaemon", dependencies: [
            "KeychainSecretService", "KeychainSync",
            "KeychainStore", "KeychainFileSystem", "KeychainFuse", "KeychainControl", "KeychainControlServer", "KeychainAccess",
            .product(name: "Logging", package: "swift-log"),
        ]),
        .executableTarget(name: "keychainfs-full", dependencies: [
            "KeychainDaemon", "CWipingRealloc",
            "KeychainStore", "KeychainFileSystem", "KeychainFuse", "KeychainControl", "KeychainControlServer", "KeychainConfig",
            "KeychainAccess",
            "KeychainBackup", "KeychainSync", "KeychainSyncGit",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
        ], path: "Sources/keychainfs", linkerSettings: [
            // swiftc exports every symbol of an executable (-export-dynamic, for dladdr); in a PIE
            // each reference to an exported symbol is then a symbolic relocation that the loader
            // looks up at every start: 1 MiB of the daemon's resident size (docs/performance-notes.md).
            // Nothing here looks its own symbols up.
            .unsafeFlags(["-Xlinker", "--no-export-dynamic"] + bindNow),
        ]),
        // A static executable: no dynamic loader, no libcrypto or libstdc++ to map and relocate.
        // That was most of what a lookup's start-up cost (docs/performance-notes.md). FoundationEssentials'
        // two support libraries are named because modules built without --static-swift-stdlib (a
        // debug build) do not ask for them.
        .executableTarget(name: "keychainfs", dependencies: [
            "KeychainModel", "KeychainCrypto", "KeychainControlProtocol", "KeychainClient",
        ], path: "Sources/keychainfs-front", linkerSettings: [
            .unsafeFlags(["-static-executable", "-l_FoundationCollections", "-l_FoundationCShims"]),
        ]),
        // Static as the front, for the same start-up, and with no loader to bind symbols lazily:
        // its resolver saved the vector registers, a password's bytes among them, on the stack.
        .executableTarget(name: "git-credential-keychainfs", dependencies: ["KeychainModel", "KeychainClient", "GitCredential"],
                          linkerSettings: [.unsafeFlags(["-static-executable", "-l_FoundationCollections", "-l_FoundationCShims"])]),
        // Test support: fills a store with many items at once (Tests/integration/test_memory.sh).
        .executableTarget(name: "keychainfs-fill", dependencies: ["KeychainStore", "KeychainBatch"], path: "Tests/Fill"),
        .testTarget(name: "KeychainModelTests", dependencies: ["KeychainModel"]),
        .testTarget(name: "KeychainCryptoTests", dependencies: ["KeychainCrypto"]),
        .testTarget(name: "KeychainStoreTests", dependencies: ["KeychainStore"], exclude: ["Fixtures"]),
        .testTarget(name: "KeychainFileSystemTests", dependencies: ["KeychainFileSystem", "KeychainBatch", "KeychainAccess"]),
        .testTarget(name: "KeychainFuseTests", dependencies: ["KeychainFuse", "KeychainStore"]),
        .testTarget(name: "GitCredentialTests", dependencies: ["GitCredential", "KeychainCrypto", "KeychainModel"]),
        .testTarget(name: "KeychainSyncGitTests", dependencies: ["KeychainSyncGit", "KeychainErrors"]),
        .testTarget(name: "KeychainControlTests", dependencies: [
            "KeychainControlProtocol", "KeychainClient", "KeychainControlServer", "KeychainBatch", "KeychainAccess",
        ]),
        .testTarget(name: "KeychainDaemonTests", dependencies: ["KeychainDaemon", "KeychainControl", "KeychainFileSystem"]),
        .testTarget(name: "KeychainConfigTests", dependencies: ["KeychainConfig"]),
        .testTarget(name: "KeychainAccessTests", dependencies: ["KeychainAccess", "KeychainModel"]),
        .testTarget(name: "KeychainSecretServiceTests", dependencies: ["KeychainSecretService", "COpenSSL", "KeychainCrypto"]),
        .testTarget(name: "KeychainSyncTests", dependencies: ["KeychainSync", "KeychainStore", "KeychainFileSystem", "KeychainBatch"]),
        .testTarget(name: "KeychainBackupTests", dependencies: ["KeychainBackup", "KeychainStore"]),
        // Every row of ItemAttribute.all through every channel, the CLI's among them.
        .testTarget(name: "AttributeTableTests", dependencies: [
            "KeychainStore", "KeychainBackup", "KeychainControlProtocol", "KeychainFileSystem", "keychainfs-full", "KeychainAccess",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),
    ],
    swiftLanguageModes: [.v6]
)
