// swift-tools-version:6.0
import PackageDescription

// Layers, each depending only on those above it:
// KeychainErrors (leaf) → KeychainModel → KeychainCrypto → KeychainStore → KeychainFileSystem → KeychainFuse
// → KeychainControl → executables.
let package = Package(
    name: "keychainfs",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "KeychainStore", targets: ["KeychainStore"]),
        .executable(name: "keychainfs", targets: ["keychainfs"]),
        .executable(name: "git-credential-keychainfs", targets: ["git-credential-keychainfs"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    ],
    targets: [
        .systemLibrary(name: "CFuse", pkgConfig: "fuse3",
                       providers: [.apt(["libfuse3-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "libcrypto",
                       providers: [.apt(["libssl-dev"])]),
        .target(name: "CFuseShim", dependencies: ["CFuse"]),
        .target(name: "CHardening"),
        .target(name: "KeychainErrors"),
        .target(name: "KeychainModel", dependencies: ["KeychainErrors"]),
        .target(name: "KeychainCrypto", dependencies: ["COpenSSL", "CHardening"]),
        .target(name: "KeychainStore", dependencies: [
            "KeychainModel", "KeychainCrypto",
            .product(name: "GRDB", package: "GRDB.swift"),
            .product(name: "GRDBSQLite", package: "GRDB.swift"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        .target(name: "KeychainFileSystem", dependencies: ["KeychainModel", "KeychainCrypto", "KeychainStore"]),
        .target(name: "KeychainFuse", dependencies: ["KeychainFileSystem", "CFuseShim"]),
        .target(name: "KeychainControl", dependencies: ["KeychainModel", "KeychainCrypto", "KeychainStore"]),
        .target(name: "GitCredential", dependencies: ["KeychainModel"]),
        .executableTarget(name: "keychainfs", dependencies: [
            "KeychainStore", "KeychainFileSystem", "KeychainFuse", "KeychainControl",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        .executableTarget(name: "git-credential-keychainfs", dependencies: ["KeychainModel", "KeychainControl", "GitCredential"]),
        .testTarget(name: "KeychainModelTests", dependencies: ["KeychainModel"]),
        .testTarget(name: "KeychainCryptoTests", dependencies: ["KeychainCrypto"]),
        .testTarget(name: "KeychainStoreTests", dependencies: ["KeychainStore"], exclude: ["Fixtures"]),
        .testTarget(name: "KeychainFileSystemTests", dependencies: ["KeychainFileSystem"]),
        .testTarget(name: "GitCredentialTests", dependencies: ["GitCredential"]),
    ],
    swiftLanguageModes: [.v6]
)
