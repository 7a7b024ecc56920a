import Foundation
import KeychainAccess
import KeychainCrypto
import KeychainModel
import KeychainStore
import XCTest
@testable import KeychainFileSystem

/// The owner is the one gate of per-program access (issue 17): every tree operation that
/// reads, changes, deletes, renames or replaces an item with a non-empty list asks it, for
/// the caller it was given, and Always allow goes through the owner's commit path.
final class AccessGateTests: XCTestCase {
    var dir = ""
    var keychain: Keychain!
    let recorder = RecordingObserver()
    let key = ItemKey.generic(try! GenericPasswordKey(service: "svc", account: "acct"))
    let me = try! FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")

    override func setUpWithError() throws {
        (dir, keychain) = try makeTemporaryKeychain("kcfs-gate", passphrase: SecureBytes(copying: Array("pw".utf8)))
    }

    override func tearDown() { try? FileManager.default.removeItem(atPath: dir) }

    func tree(_ settings: AccessSettings = .none) throws -> KeychainTree {
        let served = try ServedKeychain(keychain: keychain, access: AccessControl(settings: settings, log: nil))
        served.addObserver(recorder)
        return KeychainTree(served: served)
    }

    func add(_ account: String, listing programs: [String]) throws {
        var values = AttributeValues()
        values.access = try AccessList.anyProgram.setting(programs.map { try AccessProgram(parsing: $0) })
        let k = ItemKey.generic(try GenericPasswordKey(service: "svc", account: account))
        try keychain.add(ItemRecord(key: k, attributes: ItemAttributes(values, accessible: .whenUnlocked)),
                         secret: SecureBytes(copying: Array("secret-\(account)".utf8)))
    }

    var myself: AccessCaller { .process(try! PinnedProcess.forProcess(getpid())) }
    let stranger = AccessCaller.unidentified("a caller the test did not name")

    func errno(_ body: () throws -> Void) -> Int32? {
        do { try body() } catch let e as FileSystemError { return e.errno } catch { return -1 }
        return nil
    }

    func testAListedCallerOpensAndOthersGetEACCES() throws {
        try add("acct", listing: ["/usr/bin/head", me])
        try add("open", listing: [])
        let tree = try tree()
        let location = try TreeLocation.parse("/svc/acct")
        let h = try tree.open(location, flags: O_RDONLY, caller: myself)
        try tree.release(h)
        XCTAssertEqual(errno { _ = try tree.open(location, flags: O_RDONLY, caller: stranger) }, EACCES)
        XCTAssertEqual(errno { _ = try tree.open(location, flags: O_WRONLY | O_TRUNC, caller: stranger) }, EACCES)
        // The tree's own entry points, told no caller, fail closed.
        XCTAssertEqual(errno { _ = try tree.get("/svc/acct") }, EACCES)
        XCTAssertEqual(errno { try tree.truncate("/svc/acct", size: 0) }, EACCES)
        // An item with no list is any program's, and names stay open.
        XCTAssertEqual(try tree.get("/svc/open"), "secret-open")
        XCTAssertNoThrow(try tree.stat("/svc/acct"))
        XCTAssertTrue(try tree.list("/svc").map(\.name).contains("acct"))
    }

    func testDeleteRenameAndReplaceAreGuarded() throws {
        try add("acct", listing: [me])
        try add("open", listing: [])
        let tree = try tree()
        XCTAssertEqual(errno { try tree.remove(try TreeLocation.parse("/svc/acct"), caller: self.stranger) }, EACCES)
        XCTAssertEqual(errno { try tree.rename(try TreeLocation.parse("/svc/acct"), to: try TreeLocation.parse("/svc/moved"), noReplace: false, exchange: false, caller: self.stranger) }, EACCES)
        // Onto the guarded item: replacing it is guarded by its list.
        XCTAssertEqual(errno { try tree.rename(try TreeLocation.parse("/svc/open"), to: try TreeLocation.parse("/svc/acct"), noReplace: false, exchange: false, caller: self.stranger) }, EACCES)
        XCTAssertNotNil(try keychain.item(for: key), "nothing was changed")
        XCTAssertEqual(try keychain.item(for: key)?.record.attributes.values.access?.rules.map(\.program), [.executable(me)])
        try tree.rename(try TreeLocation.parse("/svc/acct"), to: try TreeLocation.parse("/svc/moved"), noReplace: false, exchange: false, caller: myself)
        try tree.remove(try TreeLocation.parse("/svc/moved"), caller: myself)
        XCTAssertTrue(try keychain.allItems().items.map(\.key).allSatisfy { $0 != key })
    }

    /// Always allow adds the caller to the list in a commit of the owner (observers hear it),
    /// then the open goes on; Deny refuses.
    func testAlwaysAllowAddsTheCallerThroughTheOwnersCommit() throws {
        try add("acct", listing: ["/usr/bin/head"])
        let answer = dir + "/answer"
        let pinentry = dir + "/pinentry"
        try """
            #!/bin/sh
            echo "OK"
            notok_button=
            while IFS= read -r line; do
                case "$line" in
                    SETNOTOK*) notok_button=1; echo OK ;;
                    CONFIRM*) case "$(cat '\(answer)')" in
                        notok) if [ -n "$notok_button" ]; then echo "ERR 83886194 Not confirmed"; else echo OK; fi ;;
                        *) echo "ERR 83886179 Operation cancelled" ;;
                    esac ;;
                    BYE*) echo OK; exit 0 ;;
                    *) echo OK ;;
                esac
            done
            """.write(toFile: pinentry, atomically: true, encoding: .utf8)
        chmod(pinentry, 0o755)
        let tree = try tree(try AccessSettings(pinentry: pinentry, promptTimeoutSeconds: 5))
        let location = try TreeLocation.parse("/svc/acct")
        try "cancel".write(toFile: answer, atomically: true, encoding: .utf8)
        XCTAssertEqual(errno { _ = try tree.open(location, flags: O_RDONLY, caller: self.myself) }, EACCES, "Deny")
        _ = recorder.take()
        try "notok".write(toFile: answer, atomically: true, encoding: .utf8)
        let h = try tree.open(location, flags: O_RDONLY, caller: myself)
        try tree.release(h)
        XCTAssertEqual(try keychain.item(for: key)?.record.attributes.values.access?.rules.map(\.program),
                       [.executable("/usr/bin/head"), .executable(me)], "sealed in the store")
        XCTAssertTrue(recorder.take().flatMap(\.changes).contains(.updated(key)), "through the owner's commit path")
        // Listed now: no prompt (a Deny would refuse).
        try "cancel".write(toFile: answer, atomically: true, encoding: .utf8)
        try tree.release(try tree.open(location, flags: O_RDONLY, caller: myself))
    }
}
