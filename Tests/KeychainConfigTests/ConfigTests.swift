import Foundation
import KeychainModel
import XCTest
@testable import KeychainConfig

final class ConfigTests: XCTestCase {
    private func parse(_ text: String) throws -> KeychainConfig {
        try KeychainConfig.parse(text, path: "config.toml", home: "/home/alice")
    }

    /// The message of the `invalidInput` that parsing `text` throws.
    private func failure(_ text: String, file: StaticString = #filePath, line: UInt = #line) -> String {
        do {
            let config = try parse(text)
            XCTFail("parsed without error: \(config)", file: file, line: line)
            return ""
        } catch let KeychainError.invalidInput(message) {
            XCTAssertEqual(KeychainError.invalidInput(message).exitCode, 65, file: file, line: line)
            return message
        } catch {
            XCTFail("unexpected error \(error)", file: file, line: line)
            return ""
        }
    }

    func testEmptyFileSetsNothing() throws {
        XCTAssertEqual(try parse(""), KeychainConfig())
        XCTAssertEqual(try parse("# only a comment\n\n"), KeychainConfig())
    }

    func testEveryKey() throws {
        let config = try parse("""
            mountpoint = "/srv/keys"
            lock-after = 900
            default-accessible = "after-first-unlock"
            allow-root = true
            """)
        XCTAssertEqual(config, KeychainConfig(mountpoint: "/srv/keys", lockAfter: 900,
                                              defaultAccessible: .afterFirstUnlock, allowRoot: true))
    }

    func testSecretService() throws {
        XCTAssertEqual(try parse("secret-service = true").secretService, true)
        XCTAssertEqual(try parse("secret-service = false").secretService, false)
        XCTAssertNil(try parse("").secretService)
        XCTAssertTrue(failure("secret-service = \"yes\"").hasPrefix("config.toml:1: secret-service must be true or false"))
    }

    func testAccessTable() throws {
        let config = try parse("[access]\npinentry = \"/usr/bin/pinentry-tty\"\nprompt-timeout = 10\n")
        XCTAssertEqual(config.pinentry, "/usr/bin/pinentry-tty")
        XCTAssertEqual(config.promptTimeout, 10)
        XCTAssertTrue(failure("[access]\npinentry = \"pinentry\"").contains("absolute path"))
        XCTAssertTrue(failure("[access]\nprompt-timeout = 0").contains("prompt-timeout"))
        XCTAssertTrue(failure("[access]\nbogus = 1").contains("unknown key 'access.bogus'"))
        XCTAssertTrue(failure("access = 1").contains("access must be a table"))
        // A key of [access] is named on its own line, not the header's.
        XCTAssertTrue(failure("lock-after = 5\n[access]\n\nprompt-timeout = 9\npinentry = \"pinentry-tty\"\n")
            .hasPrefix("config.toml:5: access.pinentry must be the absolute path"))
        XCTAssertTrue(failure("[access]\npinentry = \"/usr/bin/pinentry-tty\"\n  prompt-timeout = 0\n")
            .hasPrefix("config.toml:3: access.prompt-timeout"))
        XCTAssertTrue(failure("[access]\n'bogus' = 1").hasPrefix("config.toml:2: unknown key 'access.bogus'"))
    }

    func testQuotedKeysAndZeroLockAfter() throws {
        let config = try parse("\"lock-after\" = 0\n'allow-root' = false\n")
        XCTAssertEqual(config.lockAfter, 0)
        XCTAssertEqual(config.allowRoot, false)
    }

    func testTildeExpandsToHome() throws {
        XCTAssertEqual(try parse("mountpoint = \"~/Keychain\"").mountpoint, "/home/alice/Keychain")
        XCTAssertEqual(try parse("mountpoint = \"~\"").mountpoint, "/home/alice")
    }

    func testSyntaxErrorNamesTheLine() {
        let message = failure("mountpoint = \"/a\"\nlock-after = = 3\n")
        XCTAssertTrue(message.hasPrefix("config.toml:2:"), message)
    }

    func testUnterminatedStringNamesTheLine() {
        let message = failure("\n\nmountpoint = \"/a\n")
        XCTAssertTrue(message.hasPrefix("config.toml:3:"), message)
    }

    func testUnknownKeyNamesTheLineAndTheKnownKeys() {
        let message = failure("mountpoint = \"/a\"\n\nlock_after = 5\n")
        XCTAssertTrue(message.hasPrefix("config.toml:3: unknown key 'lock_after'"), message)
        XCTAssertTrue(message.contains("lock-after"), message)
    }

    func testUnknownTableNamesItsLine() {
        let message = failure("allow-root = true\n[mount]\npoint = 1\n")
        XCTAssertTrue(message.hasPrefix("config.toml:2: unknown key 'mount'"), message)
    }

    /// TOMLKit's parser aborts the process on these (an assertion); they must be errors.
    func testTableHeaderWithoutANameIsAnErrorNotAnAbort() {
        for text in ["[", "[[", "[.]", " [.", "[[.]]", "[{]", "[\\]", "[\n", "[ ]", "[[ ]]",
                     "allow-root = true\n\n[", "a = \"x\" # [\n[=]"] {
            let message = failure(text)
            XCTAssertTrue(message.contains("a table header needs a name"), "\(text.debugDescription): \(message)")
        }
        XCTAssertTrue(failure("allow-root = true\n\n  [[\n").hasPrefix("config.toml:3:"))
    }

    func testBracketsInStringsCommentsAndArraysAreNotHeaders() {
        // Each reaches the parser and fails there (no value of ours is an array), not as a header.
        XCTAssertTrue(failure("mountpoint = [\n[\n1]]\n").contains("mountpoint must be a string"))
        XCTAssertTrue(failure("mountpoint = '''\n[.]\n'''\n").contains("mountpoint must be an absolute path"))
        XCTAssertTrue(failure("mountpoint = \"\"\"\n[\n\"\"\"").contains("mountpoint must be an absolute path"))
        XCTAssertEqual(try parse("# [\nallow-root = true # [.]\n").allowRoot, true)
        XCTAssertEqual(try parse("mountpoint = \"/a[\\\"[\"\n").mountpoint, "/a[\"[")
    }

    func testControlCharactersAreRefusedWithTheirLine() {
        XCTAssertTrue(failure("\0").hasPrefix("config.toml:1: a control character"))
        XCTAssertTrue(failure("allow-root = true\n\0lock-after = x").hasPrefix("config.toml:2: a control character"))
        XCTAssertTrue(failure("# \u{7f}").contains("control character"))
        XCTAssertTrue(failure("mountpoint = \"/a\u{1}\"").contains("control character"))
    }

    func testWrongTypes() {
        XCTAssertTrue(failure("mountpoint = 5").hasPrefix("config.toml:1: mountpoint must be a string"))
        XCTAssertTrue(failure("\nlock-after = \"5m\"").hasPrefix("config.toml:2: lock-after must be a whole number"))
        XCTAssertTrue(failure("lock-after = 1.5").contains("lock-after"))
        XCTAssertTrue(failure("allow-root = \"yes\"").hasPrefix("config.toml:1: allow-root must be true or false"))
        XCTAssertTrue(failure("default-accessible = 3").hasPrefix("config.toml:1: default-accessible must be a string"))
    }

    func testNegativeLockAfter() {
        XCTAssertTrue(failure("lock-after = -1").hasPrefix("config.toml:1: lock-after must be a whole number"))
    }

    func testUnknownClassListsTheClasses() {
        let message = failure("# classes\ndefault-accessible = \"sometimes\"")
        XCTAssertTrue(message.hasPrefix("config.toml:2: default-accessible: unknown accessibility class 'sometimes'"), message)
        XCTAssertTrue(message.contains("when-unlocked"), message)
    }

    func testRelativeMountpointIsRefused() {
        XCTAssertTrue(failure("mountpoint = \"Keychain\"").hasPrefix("config.toml:1: mountpoint must be an absolute path"))
    }

    func testDuplicateKeyIsASyntaxError() {
        XCTAssertTrue(failure("allow-root = true\nallow-root = false\n").hasPrefix("config.toml:2:"))
    }

    func testMissingFileIsEmptyConfig() throws {
        XCTAssertEqual(try KeychainConfig.load(path: "/nonexistent/keychainfs/config.toml"), KeychainConfig())
    }

    func testLoadNamesTheFile() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("kcfs-config-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("config.toml")
        try Data("lock-after = 60\nallow-root = 1\n".utf8).write(to: file)
        XCTAssertThrowsError(try KeychainConfig.load(path: file.path)) { error in
            XCTAssertEqual(error as? KeychainError,
                           .invalidInput("\(file.path):2: allow-root must be true or false, not 1"))
        }
        try Data([0x61, 0x3d, 0x31, 0x0a, 0x62, 0xff, 0x0a]).write(to: file)
        XCTAssertThrowsError(try KeychainConfig.load(path: file.path)) { error in
            XCTAssertEqual(error as? KeychainError, .invalidInput("\(file.path):2: not UTF-8 text"))
        }
    }

    func testLineOfKeyIgnoresKeysThatOnlyStartAlike() {
        let lines = SourceLines("mountpointx = 1\n  mountpoint = \"/a\"\n")
        XCTAssertEqual(lines.line(ofKey: "mountpoint"), 2)
    }
}
