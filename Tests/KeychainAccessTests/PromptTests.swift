import Foundation
import Glibc
import XCTest
@testable import KeychainAccess
import KeychainModel

/// The prompt through a scripted pinentry (a shell script speaking Assuan) and a real
/// pinentry-tty in tmux, and what each answer does.
final class PromptTests: AccessTestCase {
    private let item = genericItem("github", "bob")
    private lazy var dir = directory()

    private func control(_ answer: String, timeout: Int = 5, log: AccessLog? = nil) throws -> (AccessControl, String) {
        let pinentry = try scriptedPinentry(in: dir, answer: answer)
        let settings = try AccessSettings(pinentry: pinentry.path, promptTimeoutSeconds: timeout)
        return (AccessControl(settings: settings, log: log), pinentry.transcript)
    }

    private func confirms(_ transcript: String) -> Int {
        ((try? String(contentsOfFile: transcript, encoding: .utf8)) ?? "").split(separator: "\n").filter { $0 == "CONFIRM" }.count
    }

    func testAllowOnceLastsForThatProcessItemAndOperation() throws {
        let (access, transcript) = try control("ok")
        let headOnly = try list("/usr/bin/head")
        let cat = try TestProcess(["/bin/cat"], waitForExecutable: "/usr/bin/cat")
        XCTAssertEqual(access.decide(threadID: cat.pid, item: item, operation: .read, list: headOnly), .allowed)
        XCTAssertEqual(access.decide(threadID: cat.pid, item: item, operation: .read, list: headOnly), .allowed)
        XCTAssertEqual(confirms(transcript), 1, "asked once for this process")
        XCTAssertEqual(access.decide(threadID: cat.pid, item: item, operation: .write, list: headOnly), .allowed)
        XCTAssertEqual(access.decide(threadID: cat.pid, item: genericItem("other", "x"), operation: .read, list: headOnly), .allowed)
        XCTAssertEqual(confirms(transcript), 3, "another operation, another item: asked again")
        // Another process of the same program is asked again.
        let second = try TestProcess(["/bin/cat"], waitForExecutable: "/usr/bin/cat")
        XCTAssertEqual(access.decide(threadID: second.pid, item: item, operation: .read, list: headOnly), .allowed)
        XCTAssertEqual(confirms(transcript), 4)
    }

    func testTwoRequestsOfOneProcessWaitingForOnePromptAreAnsweredByIt() throws {
        let (access, transcript) = try control("slow-ok")
        let headOnly = try list("/usr/bin/head")
        let cat = try TestProcess(["/bin/cat"], waitForExecutable: "/usr/bin/cat")
        let both = expectation(description: "both answered")
        both.expectedFulfillmentCount = 2
        let catPid = cat.pid, item = self.item
        for _ in 0..<2 {
            Thread.detachNewThread {
                XCTAssertEqual(access.decide(threadID: catPid, item: item, operation: .read, list: headOnly), .allowed)
                both.fulfill()
            }
        }
        wait(for: [both], timeout: 10)
        XCTAssertEqual(confirms(transcript), 1, "the second waited for the first prompt and took its answer")
    }

    func testTheCacheStaysSmallButKeepsAllowOnce() throws {
        let (access, transcript) = try control("ok")
        let headOnly = try list("/usr/bin/head")
        let cat = try TestProcess(["/bin/cat"], waitForExecutable: "/usr/bin/cat")
        XCTAssertEqual(access.decide(threadID: cat.pid, item: item, operation: .read, list: headOnly), .allowed)
        var crowd: [TestProcess] = []
        for _ in 0...ProcessTable.capacity {
            let head = try TestProcess(["/usr/bin/head"], waitForExecutable: "/usr/bin/head")
            XCTAssertEqual(access.decide(threadID: head.pid, item: item, operation: .read, list: headOnly), .allowed)
            crowd.append(head)
        }
        XCTAssertLessThanOrEqual(access.cachedProcessCount, ProcessTable.capacity, "three descriptors each: the table is bounded")
        XCTAssertEqual(access.decide(threadID: cat.pid, item: item, operation: .read, list: headOnly), .allowed)
        XCTAssertEqual(confirms(transcript), 1, "the Allow once was not evicted to make room")
        crowd.forEach { $0.stop() }
    }

    func testAllowOnceEndsWhenTheProcessExecsAnotherProgram() throws {
        let (access, transcript) = try control("ok")
        let script = try dir.write("import os, sys\nsys.stdin.readline()\nos.execv('/usr/bin/head', ['head'])\n", as: "then-head.py")
        let process = try TestProcess(["/usr/bin/python3", script], waitForExecutable: pythonExecutable)
        let sshOnly = try list("/usr/bin/tail")
        XCTAssertEqual(access.decide(threadID: process.pid, item: item, operation: .read, list: sshOnly), .allowed)
        process.send("go")
        try TestProcess.waitUntil("it execs head") { TestProcess.runs(process.pid, "/usr/bin/head") }
        XCTAssertEqual(access.decide(threadID: process.pid, item: item, operation: .read, list: sshOnly), .allowed)
        XCTAssertEqual(confirms(transcript), 2, "the grant went with the old image")
    }

    func testAlwaysAllowReturnsTheRuleToAdd() throws {
        let (access, _) = try control("notok")
        let cat = try TestProcess(["/bin/cat"], waitForExecutable: "/usr/bin/cat")
        let before = try list("/usr/bin/head")
        guard case .allowedAlways(let rule) = access.decide(threadID: cat.pid, item: item, operation: .read, list: before) else {
            return XCTFail("Always allow gives a rule")
        }
        XCTAssertEqual(rule.program, .executable("/usr/bin/cat"))
        XCTAssertEqual(rule.executable, try FileIdentity.of(path: "/usr/bin/cat"))
        // With the rule added, no prompt: allowed by the list.
        let after = try before.adding(rule)
        XCTAssertEqual(after.text, "/usr/bin/head\n/usr/bin/cat\n")
        let (quiet, transcript) = try control("cancel")
        XCTAssertEqual(quiet.decide(threadID: cat.pid, item: item, operation: .read, list: after), .allowed)
        XCTAssertEqual(confirms(transcript), 0)
    }

    /// Pinentry answers "not OK" for that button and also when it cannot prompt at all:
    /// pinentry-tty given no terminal answers every CONFIRM so. That is never Always allow.
    func testAPinentryThatAnswersNotOKToEveryPromptAllowsNothing() throws {
        let (access, transcript) = try control("notok-always")
        let cat = try TestProcess(["/bin/cat"], waitForExecutable: "/usr/bin/cat")
        let outcome = access.decide(threadID: cat.pid, item: item, operation: .read, list: try list("/usr/bin/head"))
        XCTAssertTrue(isRefused(outcome), "no program is added unasked: \(outcome)")
        XCTAssertEqual(confirms(transcript), 2, "Always allow is confirmed in a second prompt")
        let sent = try String(contentsOfFile: transcript, encoding: .utf8)
        XCTAssertTrue(sent.contains("for good?"), "the second prompt asks whether to add it for good")
    }

    func testAlwaysAllowIsConfirmedWithOKInAPromptWithoutANotOKButton() throws {
        let (access, transcript) = try control("notok")
        let cat = try TestProcess(["/bin/cat"], waitForExecutable: "/usr/bin/cat")
        guard case .allowedAlways = access.decide(threadID: cat.pid, item: item, operation: .read, list: try list("/usr/bin/head")) else {
            return XCTFail("not OK, then OK to the confirmation, is Always allow")
        }
        let sent = try String(contentsOfFile: transcript, encoding: .utf8)
        XCTAssertEqual(confirms(transcript), 2)
        XCTAssertEqual(sent.components(separatedBy: "SETNOTOK").count - 1, 1, "only the first prompt has a not-OK button")
        XCTAssertTrue(sent.contains("SETOK _Always allow"), "the confirmation's OK is labelled Always allow")
    }

    func testAlwaysAllowForAnInterpreterAddsItsScriptNotTheInterpreter() throws {
        let (access, _) = try control("notok")
        let script = try dir.write("import sys\nsys.stdin.read()\n", as: "sync.py")
        let process = try TestProcess(["/usr/bin/python3", script], waitForExecutable: pythonExecutable)
        guard case .allowedAlways(let rule) = access.decide(threadID: process.pid, item: item, operation: .read, list: try list("/usr/bin/head")) else {
            return XCTFail("Always allow gives a rule")
        }
        XCTAssertEqual(rule.program, .script(interpreter: pythonExecutable, script: script))
        XCTAssertEqual(rule.script, try FileIdentity.of(path: script))
    }

    func testAnInterpreterWithoutARecognisedScriptIsNotOfferedAlwaysAllow() throws {
        let (access, transcript) = try control("notok-always")
        let process = try TestProcess(["/usr/bin/python3", "-c", "import sys; sys.stdin.read()"], waitForExecutable: pythonExecutable)
        let outcome = access.decide(threadID: process.pid, item: item, operation: .read, list: try list("/usr/bin/head"))
        XCTAssertTrue(isRefused(outcome), "the interpreter alone is never added: \(outcome)")
        let sent = try String(contentsOfFile: transcript, encoding: .utf8)
        XCTAssertFalse(sent.contains("SETNOTOK"), "no Always allow button")
        XCTAssertTrue(sent.contains("Always allow is not offered"))
    }

    /// A listed program in a user namespace of its own is asked about with that reason, and
    /// only Allow once is offered: a rule for it would never match there.
    func testACallerInAnotherUserNamespaceIsAskedWithThatReasonAndNoAlwaysAllow() throws {
        let (access, transcript) = try control("ok")
        let head = try TestProcess(["/usr/bin/unshare", "--user", "--map-current-user", "/usr/bin/head"], waitForExecutable: "/usr/bin/head")
        XCTAssertEqual(access.decide(threadID: head.pid, item: item, operation: .read, list: try list("/usr/bin/head")), .allowed)
        let sent = try String(contentsOfFile: transcript, encoding: .utf8).replacingOccurrences(of: "%0A", with: "\n")
        XCTAssertTrue(sent.contains("Why asked: it runs in another user namespace, where a process can name any executable as its own"), sent)
        XCTAssertFalse(sent.contains("SETNOTOK"), "no Always allow button")
        XCTAssertEqual(confirms(transcript), 1)
    }

    func testDenyAndTimeoutAndAFailedPromptRefuse() throws {
        let headOnly = try list("/usr/bin/head")
        let cat = try TestProcess(["/bin/cat"], waitForExecutable: "/usr/bin/cat")
        let (deny, _) = try control("cancel")
        XCTAssertTrue(isRefused(deny.decide(threadID: cat.pid, item: item, operation: .read, list: headOnly)))
        for answer in ["garbage", "exit"] {
            let (broken, _) = try control(answer)
            let outcome = broken.decide(threadID: cat.pid, item: item, operation: .read, list: headOnly)
            XCTAssertTrue(isRefused(outcome, containing: "the prompt failed"), "\(answer): \(outcome)")
        }
        let (never, _) = try control("never", timeout: 1)
        let start = ContinuousClock.now
        let outcome = never.decide(threadID: cat.pid, item: item, operation: .read, list: headOnly)
        let waited = ContinuousClock.now - start
        XCTAssertTrue(isRefused(outcome, containing: "no answer in time"), "\(outcome)")
        XCTAssertGreaterThanOrEqual(waited, .milliseconds(900))
        XCTAssertLessThan(waited, .seconds(3), "denied at the timeout, not later")
        // The pinentry that never answered was killed and reaped: no child of ours is left but cat.
        XCTAssertEqual(TestProcess.children(of: getpid()).filter { $0 != cat.pid }, [])
    }

    func testNoPinentryConfiguredOrRunnableRefusesAtOnce() throws {
        let cat = try TestProcess(["/bin/cat"], waitForExecutable: "/usr/bin/cat")
        let start = ContinuousClock.now
        let none = AccessControl(settings: .none, log: nil)
        XCTAssertTrue(isRefused(none.decide(threadID: cat.pid, item: item, operation: .read, list: try list("/usr/bin/head")), containing: "no prompt is configured"))
        XCTAssertLessThan(ContinuousClock.now - start, .milliseconds(500))
        let missing = Pinentry(path: dir.path + "/no-such-pinentry", timeout: .seconds(5))
        guard case .unavailable = missing.ask(PromptText(title: "t", description: "d", prompt: "p"), terminal: nil, terminalType: nil) else {
            return XCTFail("a missing pinentry is no answer")
        }
    }

    func testThePromptShowsWhoAsksForWhatAndCannotBeForged() throws {
        let (access, transcript) = try control("cancel")
        let script = try dir.write("import sys\nsys.stdin.read()\n", as: "sync.py")
        let forged = "x\nProgram: /usr/bin/ssh\u{1b}[2J"
        let process = try TestProcess(["/usr/bin/python3", script, forged], waitForExecutable: pythonExecutable)
        _ = access.decide(threadID: process.pid, item: item, operation: .read, list: try list("/usr/bin/head"))
        let lines = try String(contentsOfFile: transcript, encoding: .utf8).split(separator: "\n").map(String.init)
        for verb in ["SETTITLE ", "SETPROMPT ", "SETOK Allow _once", "SETNOTOK _Always allow", "SETCANCEL _Deny", "SETTIMEOUT 5"] {
            XCTAssertTrue(lines.contains { $0.hasPrefix(verb) }, verb)
        }
        let desc = try XCTUnwrap(lines.first { $0.hasPrefix("SETDESC ") })
        let shown = desc.replacingOccurrences(of: "%0A", with: "\n")
        XCTAssertTrue(shown.contains("Program: \(pythonExecutable)\n"), shown)
        XCTAssertTrue(shown.contains("Process: \(process.pid), parent \(getpid()) ("), shown)
        XCTAssertTrue(shown.contains("terminal none"), shown)
        XCTAssertTrue(shown.contains("/mnt/k/github/bob (read)"), shown)
        XCTAssertTrue(shown.contains("wants to read the secret of /mnt/k/github/bob"), shown)
        XCTAssertTrue(shown.contains("Command: /usr/bin/python3 \(script) 'x\\x0aProgram: /usr/bin/ssh\\x1b[2J'"), shown)
        XCTAssertTrue(shown.contains("Always allow adds: \(pythonExecutable) \(script)"), shown)
        XCTAssertFalse(desc.contains("\u{1b}"))
        XCTAssertEqual(shown.split(separator: "\n").filter { $0.hasPrefix("Program: ") }.count, 1, "the forged line is not a line of its own")
        XCTAssertTrue(lines.allSatisfy { $0.utf8.count <= Pinentry.maxLine })
    }

    func testThePinentryGetsNoDescriptorOfTheDaemon() throws {
        let (access, transcript) = try control("cancel")
        let secretFile = try dir.write("not for the prompt", as: "store.db")
        let leaked = open(secretFile, O_RDONLY)  // no O_CLOEXEC, as a careless library might
        defer { close(leaked) }
        let cat = try TestProcess(["/bin/cat"], waitForExecutable: "/usr/bin/cat")
        _ = access.decide(threadID: cat.pid, item: item, operation: .read, list: try list("/usr/bin/head"))
        let fds = try String(contentsOfFile: transcript, encoding: .utf8).split(separator: "\n").filter { $0.hasPrefix("FD ") }
        XCTAssertFalse(fds.isEmpty)
        XCTAssertFalse(fds.contains { $0.contains("store.db") }, "\(fds)")
    }

    func testALongDescriptionIsCutToOneAssuanLine() {
        let line = Pinentry.line("SETDESC", String(repeating: "a%\n", count: 2000))
        XCTAssertLessThanOrEqual(line.utf8.count, Pinentry.maxLine)
        XCTAssertTrue(line.hasPrefix("SETDESC a%25%0Aa"))
        XCTAssertFalse(line.hasSuffix("%") || line.hasSuffix("%0") || line.hasSuffix("%2"), "no escape cut in half")
    }

    func testAWaitingPromptStallsOnlyItsCaller() throws {
        let (access, _) = try control("never", timeout: 3)
        let cat = try TestProcess(["/bin/cat"], waitForExecutable: "/usr/bin/cat")
        let head = try TestProcess(["/usr/bin/head"], waitForExecutable: "/usr/bin/head")
        let headOnly = try list("/usr/bin/head")
        XCTAssertEqual(access.decide(threadID: head.pid, item: item, operation: .read, list: headOnly), .allowed)
        let prompted = expectation(description: "the prompted caller is answered")
        let catPid = cat.pid, item = self.item
        Thread.detachNewThread {
            XCTAssertTrue(isRefused(access.decide(threadID: catPid, item: item, operation: .read, list: headOnly)))
            prompted.fulfill()
        }
        usleep(300_000)  // the prompt is open now
        let start = ContinuousClock.now
        for _ in 0..<100 {
            XCTAssertEqual(access.decide(threadID: head.pid, item: item, operation: .read, list: headOnly), .allowed)
            XCTAssertEqual(access.decide(threadID: head.pid, item: genericItem("open", "x"), operation: .read, list: .anyProgram), .allowed)
        }
        XCTAssertLessThan(ContinuousClock.now - start, .milliseconds(500), "other callers go on while a prompt waits")
        // A second caller needing a prompt queues behind the first and gives up at its own deadline.
        let second = try TestProcess(["/bin/cat"], waitForExecutable: "/usr/bin/cat")
        let queued = ContinuousClock.now
        XCTAssertTrue(isRefused(access.decide(threadID: second.pid, item: item, operation: .read, list: headOnly)))
        XCTAssertLessThan(ContinuousClock.now - queued, .seconds(4))
        wait(for: [prompted], timeout: 10)
    }

    /// The real pinentry-tty, for a caller with no terminal: it answers "not OK" to every
    /// prompt it cannot show, which must add nothing to the list.
    func testRealPinentryTtyForACallerWithNoTerminalAllowsNothing() throws {
        guard access("/usr/bin/pinentry-tty", X_OK) == 0 else {
            return XCTFail("/usr/bin/pinentry-tty is missing: run scripts/install-deps")
        }
        let loner = try TestProcess(["/usr/bin/setsid", "/bin/cat"], waitForExecutable: "/usr/bin/cat")
        let settings = try AccessSettings(pinentry: "/usr/bin/pinentry-tty", promptTimeoutSeconds: 5)
        let gate = AccessControl(settings: settings, log: nil)
        XCTAssertNil(try gate.identify(threadID: loner.pid).terminal)
        let outcome = gate.decide(threadID: loner.pid, item: item, operation: .read, list: try list("/usr/bin/head"))
        XCTAssertTrue(isRefused(outcome), "no answer, no access: \(outcome)")
    }

    /// The real thing: pinentry-tty on a tmux pane's terminal, answered with keys.
    func testRealPinentryTtyInTmux() throws {
        // scripts/install-deps installs both: missing, the test fails rather than passing unseen.
        for program in ["/usr/bin/pinentry-tty", "/usr/bin/tmux"] where access(program, X_OK) != 0 {
            XCTFail("\(program) is missing: run scripts/install-deps (it installs pinentry-tty and tmux)")
            return
        }
        let socketName = "kcfs-access-\(getpid())"
        func tmux(_ args: [String]) throws -> String {
            let out = dir.path + "/tmux.out"
            try TestProcess(["/bin/sh", "-c", "exec /usr/bin/tmux -L \(socketName) \"$@\" > '\(out)' 2>&1", "tmux"] + args).wait()
            return ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        }
        // The pane runs the caller (`sleep`), so the prompt goes to the caller's own terminal.
        _ = try tmux(["new-session", "-d", "-s", "p", "-x", "160", "-y", "50", "exec /usr/bin/sleep 600"])
        defer { _ = try? tmux(["kill-server"]) }
        let caller = pid_t(try tmux(["display", "-p", "-t", "p", "#{pane_pid}"])) ?? 0
        let tty = try tmux(["display", "-p", "-t", "p", "#{pane_tty}"])
        XCTAssertGreaterThan(caller, 0)
        let settings = try AccessSettings(pinentry: "/usr/bin/pinentry-tty", promptTimeoutSeconds: 10)
        let gate = AccessControl(settings: settings, log: nil)
        XCTAssertEqual(try gate.identify(threadID: caller).terminal, tty)
        let headOnly = try list("/usr/bin/head")
        func prompts() -> Int {
            ((try? tmux(["capture-pane", "-p", "-S", "-", "-t", "p"])) ?? "").components(separatedBy: "[oda]?").count - 1
        }
        for (n, (key, operation, expected)) in [("o", AccessOperation.read, "allowed"), ("d", .write, "refused"), ("a", .delete, "always")].enumerated() {
            let answered = expectation(description: key)
            let result = Mutex<AccessOutcome?>(nil)
            let item = self.item
            Thread.detachNewThread {
                result.withLock { $0 = gate.decide(threadID: caller, item: item, operation: operation, list: headOnly) }
                answered.fulfill()
            }
            try TestProcess.waitUntil("prompt \(n + 1) shows") { prompts() == n + 1 }
            let screen = try tmux(["capture-pane", "-p", "-t", "p"])
            XCTAssertTrue(screen.contains("Program: /usr/bin/sleep"), screen)
            _ = try tmux(["send-keys", "-t", "p", key])
            if key == "a" {
                // Always allow is confirmed in a second prompt, whose OK is Always allow.
                try TestProcess.waitUntil("Always allow's confirmation shows") {
                    ((try? tmux(["capture-pane", "-p", "-S", "-", "-t", "p"])) ?? "").contains("for good?")
                }
                _ = try tmux(["send-keys", "-t", "p", "a"])
            }
            wait(for: [answered], timeout: 10)
            switch (expected, result.withLock { $0 }) {
            case ("allowed", .allowed?), ("refused", .refused?): break
            case ("always", .allowedAlways(let rule)?): XCTAssertEqual(rule.program, .executable("/usr/bin/sleep"))
            case let (want, got): XCTFail("key \(key): wanted \(want), got \(String(describing: got))")
            }
        }
    }
}

import Synchronization
