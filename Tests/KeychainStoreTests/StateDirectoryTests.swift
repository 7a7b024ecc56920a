import Foundation
import KeychainModel
import KeychainStore
import XCTest

/// The device key and the records beside it (the rollback counter, the files' state) are
/// trusted only in a directory of this user's that no one else can write, and the key only
/// as a file of its own that no one else can read: another user who could put theirs in place
/// would hold the key a store is wrapped with, or lower its counter.
final class StateDirectoryTests: XCTestCase {
    var store: TempStore!
    var stateDirectory: String { PathText.parent(store.deviceKeyPath) }

    override func setUpWithError() throws {
        store = try TempStore()
        _ = try store.create()
    }

    override func tearDown() { store = nil }

    private func assertRefused(_ why: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try store.open(), file: file, line: line) { error in
            guard case .io(let message) = error as? KeychainError else {
                return XCTFail("expected an I/O refusal, got \(error)", file: file, line: line)
            }
            XCTAssertTrue(message.contains(why), message, file: file, line: line)
        }
    }

    func testADeviceKeyOthersCanReadIsRefused() throws {
        chmod(store.deviceKeyPath, 0o644)
        assertRefused("\(store.deviceKeyPath) is not a private regular file of ours")
        chmod(store.deviceKeyPath, 0o600)
        XCTAssertNoThrow(try store.open())
    }

    func testASymlinkedDeviceKeyIsJudgedByTheFileItNames() throws {
        let real = store.directory + "/elsewhere.key"
        XCTAssertEqual(rename(store.deviceKeyPath, real), 0)
        XCTAssertEqual(symlink(real, store.deviceKeyPath), 0)
        XCTAssertNoThrow(try store.open(), "a link to a private key of ours (kept elsewhere) is followed")
        chmod(real, 0o644)
        assertRefused("\(store.deviceKeyPath) is not a private regular file of ours")
        assertRefused("(chmod 600 \(store.deviceKeyPath))")
    }

    func testAStateDirectoryOthersCanWriteIsRefused() throws {
        chmod(stateDirectory, 0o777)
        assertRefused("\(stateDirectory) can be written by other users (mode 777); refusing to use it (chmod 700 \(stateDirectory))")
        chmod(stateDirectory, 0o700)
        XCTAssertNoThrow(try store.open())
    }

    func testAStateDirectoryOfAnotherUserIsRefused() throws {
        try XCTSkipUnless(getuid() == 0, "only root can give a directory to another user")
        XCTAssertEqual(chown(stateDirectory, 65534, 65534), 0)
        assertRefused("\(stateDirectory) belongs to user 65534, not to this one")
        // `init` of another store with this state directory refuses too, before it makes the store.
        let other = store.directory + "/other/k.db"
        XCTAssertThrowsError(try Keychain.create(at: other, passphrase: nil, scrypt: TempStore.scrypt,
                                                 deviceKeyPath: store.deviceKeyPath))
        XCTAssertFalse(FileManager.default.fileExists(atPath: other))
    }

    func testTheStateDirectoryAndItsMissingParentsAreMadePrivate() throws {
        let old = umask(0)
        defer { umask(old) }
        let fresh = try TempStore()
        let key = fresh.directory + "/a/b/state/keychainfs/device.key"
        _ = try Keychain.create(at: fresh.path, passphrase: nil, scrypt: TempStore.scrypt, deviceKeyPath: key)
        for dir in ["a", "a/b", "a/b/state", "a/b/state/keychainfs"] {
            var st = stat()
            XCTAssertEqual(lstat(fresh.directory + "/" + dir, &st), 0)
            XCTAssertEqual(st.st_mode & 0o777, 0o700, dir)
        }
        var st = stat()
        XCTAssertEqual(lstat(key, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600)
    }
}
