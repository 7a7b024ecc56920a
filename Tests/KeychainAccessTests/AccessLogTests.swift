import Foundation
import Glibc
import XCTest
@testable import KeychainAccess
import KeychainModel

final class AccessLogTests: AccessTestCase {
    private lazy var dir = directory()
    private let item = genericItem("github", "bob")

    func testEachRefusalAndAnswerIsLoggedWithTheCommandThatWouldAllowIt() throws {
        let log = AccessLog(path: dir.path + "/access.log")
        let lines = Mutex<[String]>([])
        let headOnly = try list("/usr/bin/head")
        let cat = try TestProcess(["/bin/cat"], waitForExecutable: "/usr/bin/cat")
        // No prompt: refused.
        let quiet = AccessControl(settings: .none, log: log, logLine: { line in lines.withLock { $0.append(line) } })
        XCTAssertTrue(isRefused(quiet.decide(threadID: cat.pid, item: item, operation: .read, list: headOnly)))
        // Listed but traced: refused, and no command would allow it.
        let strace = try TestProcess(["/usr/bin/strace", "-o", "/dev/null", "/usr/bin/head"])
        var traced: pid_t = 0
        try TestProcess.waitUntil("strace starts head") {
            traced = TestProcess.children(of: strace.pid).first { TestProcess.executable(of: $0) == "/usr/bin/head" } ?? 0
            return traced != 0
        }
        XCTAssertTrue(isRefused(quiet.decide(threadID: traced, item: item, operation: .read, list: headOnly)))
        // Each answer of a prompt.
        for answer in ["ok", "notok", "cancel"] {
            let pinentry = try scriptedPinentry(in: dir, answer: answer)
            let asking = AccessControl(settings: try AccessSettings(pinentry: pinentry.path, promptTimeoutSeconds: 5), log: log)
            _ = asking.decide(threadID: cat.pid, item: item, operation: .write, list: headOnly)
        }
        let never = try scriptedPinentry(in: dir, answer: "never")
        _ = AccessControl(settings: try AccessSettings(pinentry: never.path, promptTimeoutSeconds: 1), log: log)
            .decide(threadID: cat.pid, item: item, operation: .delete, list: headOnly)
        // Allowed by the list: nothing to log.
        let head = try TestProcess(["/usr/bin/head"], waitForExecutable: "/usr/bin/head")
        XCTAssertEqual(quiet.decide(threadID: head.pid, item: item, operation: .read, list: headOnly), .allowed)

        let (entries, unreadable) = try AccessLog.read(log.path)
        XCTAssertEqual(unreadable, 0)
        XCTAssertEqual(entries.map(\.decision), [.refused, .refused, .allowedOnce, .alwaysAllowed, .denied, .timedOut])
        XCTAssertEqual(entries.map(\.operation), ["read", "read", "write", "write", "write", "delete"])
        let refused = entries[0]
        XCTAssertEqual(refused.program, "/usr/bin/cat")
        XCTAssertEqual(refused.pid, cat.pid)
        XCTAssertEqual(refused.commandLine, ["/bin/cat"])
        XCTAssertEqual(refused.item, "/mnt/k/github/bob")
        XCTAssertEqual(refused.allowCommand, "keychainfs access set-generic -s github -a bob -T /usr/bin/head -T /usr/bin/cat")
        XCTAssertLessThan(abs(refused.time.timeIntervalSinceNow), 60)
        XCTAssertTrue(entries[1].reason.contains("traced"))
        XCTAssertNil(entries[1].allowCommand, "no list allows a traced caller")
        XCTAssertTrue(entries[3].reason.contains("added /usr/bin/cat"))
        XCTAssertEqual(lines.withLock { $0.count }, 2, "the daemon's log gets a line for each")
        XCTAssertTrue(lines.withLock { $0[0] }.hasPrefix("access refused: /usr/bin/cat pid \(cat.pid) read /mnt/k/github/bob"))

        let text = AccessLog.render(entries, json: false)
        XCTAssertTrue(text.contains(" refused /usr/bin/cat (pid \(cat.pid)) read /mnt/k/github/bob: it is not on the item's access list"), text)
        XCTAssertTrue(text.contains("    command: /bin/cat\n"), text)
        XCTAssertTrue(text.contains("    to allow: keychainfs access set-generic -s github -a bob -T /usr/bin/head -T /usr/bin/cat\n"), text)
        let json = AccessLog.render(entries, json: true).split(separator: "\n")
        XCTAssertEqual(json.count, entries.count)
        let first = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json[0].utf8)) as? [String: Any])
        XCTAssertEqual(first["decision"] as? String, "refused")
        XCTAssertEqual(first["program"] as? String, "/usr/bin/cat")
        XCTAssertEqual(first["allowCommand"] as? String, refused.allowCommand)
        XCTAssertNotNil(first["time"] as? String)
    }

    func testTheLogIsPrivateAndRefusesALinkPlantedInItsPlace() throws {
        let path = dir.path + "/access.log"
        try AccessLog(path: path).append(entry("x"))
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600)
        let planted = dir.path + "/planted.log"
        XCTAssertEqual(symlink(dir.path + "/elsewhere", planted), 0)
        XCTAssertThrowsError(try AccessLog(path: planted).append(entry("y")))
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir.path + "/elsewhere"))
        let open = dir.path + "/open.log"
        XCTAssertTrue(FileManager.default.createFile(atPath: open, contents: nil, attributes: [.posixPermissions: 0o644]))
        XCTAssertThrowsError(try AccessLog(path: open).append(entry("z")), "a log others can read is not ours to write")
    }

    func testACutLineIsCountedAndTheLogRollsOver() throws {
        let path = dir.path + "/access.log"
        let log = AccessLog(path: path, rollOver: 2000)
        for n in 0..<30 { try log.append(entry("item-\(n)")) }
        let (entries, _) = try AccessLog.read(path)
        XCTAssertTrue(FileManager.default.fileExists(atPath: path + ".1"))
        XCTAssertLessThan(entries.count, 30, "older entries roll off")
        XCTAssertEqual(entries.last?.item, "item-29")
        XCTAssertEqual(entries.map(\.item), entries.map(\.item).sorted { Int($0.dropFirst(5))! < Int($1.dropFirst(5))! })
        let fd = Glibc.open(path, O_WRONLY | O_APPEND)
        XCTAssertEqual(write(fd, "{\"time\": \"2026", 14), 14)
        close(fd)
        let (again, unreadable) = try AccessLog.read(path)
        XCTAssertEqual(unreadable, 1)
        XCTAssertEqual(again.count, entries.count)
    }

    private func entry(_ item: String) -> AccessLogEntry {
        AccessLogEntry(program: "/usr/bin/cat", pid: 42, commandLine: ["cat", item], item: item, operation: "read",
                       decision: .refused, reason: "it is not on the item's access list", allowCommand: nil)
    }
}

import Synchronization
