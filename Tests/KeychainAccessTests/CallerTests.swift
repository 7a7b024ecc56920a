import CProcessPin
import Foundation
import Glibc
import XCTest
@testable import KeychainAccess
import KeychainModel

/// Real processes, identified through /proc and judged against access lists.
final class CallerTests: AccessTestCase {
    private let access = AccessControl(settings: .none, log: nil)
    private let item = genericItem()

    func testHeadIsIdentifiedByItsExecutableAndAllowedWhenListed() throws {
        let head = try TestProcess(["/usr/bin/head"], waitForExecutable: "/usr/bin/head")
        let facts = try access.identify(threadID: head.pid)
        XCTAssertEqual(facts.pid, head.pid)
        XCTAssertEqual(facts.executablePath, "/usr/bin/head")
        XCTAssertEqual(try facts.executableIdentity(), try FileIdentity.of(path: "/usr/bin/head"))
        XCTAssertEqual(facts.commandLine, ["/usr/bin/head"])
        XCTAssertTrue(facts.parent.hasPrefix("\(getpid()) ("), facts.parent)
        XCTAssertFalse(facts.executableDeleted)
        XCTAssertFalse(facts.executableReplaced)
        XCTAssertFalse(facts.inAnotherUserNamespace)
        XCTAssertEqual(facts.loaderVariables, [])
        XCTAssertNil(facts.flatpakAppID)
        XCTAssertEqual(access.decide(threadID: head.pid, item: item, operation: .read, list: try list("/usr/bin/head")), .allowed)
        let other = access.decide(threadID: head.pid, item: item, operation: .read, list: try list("/usr/bin/tail"))
        XCTAssertTrue(isRefused(other, containing: "not on the item's access list; no prompt is configured"), "\(other)")
    }

    func testAnExitedProcessIsForgottenNotTakenForItsPid() throws {
        let headOnly = try list("/usr/bin/head")
        let head = try TestProcess(["/usr/bin/head"], waitForExecutable: "/usr/bin/head")
        XCTAssertEqual(access.decide(threadID: head.pid, item: item, operation: .read, list: headOnly), .allowed)
        head.stop()
        let outcome = access.decide(threadID: head.pid, item: item, operation: .read, list: headOnly)
        XCTAssertTrue(isRefused(outcome, containing: "cannot identify the caller"), "\(outcome)")
    }

    /// As the daemon runs (a normal user, not root), a process that made itself non-dumpable
    /// hides its executable and environment: it cannot be identified, so it is refused. Run
    /// as a normal user: `setpriv --reuid=nobody ... keychainfsPackageTests.xctest`.
    func testANonDumpableCallerCannotBeIdentifiedByANormalUser() throws {
        try XCTSkipIf(geteuid() == 0, "root reads every process's /proc files")
        let hidden = try TestProcess(["/usr/bin/python3", "-c",
                                      "import ctypes, sys; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); sys.stdin.read()"],
                                     waitForExecutable: pythonExecutable)
        try TestProcess.waitUntil("it is not dumpable") { TestProcess.executable(of: hidden.pid) == nil }
        let outcome = access.decide(threadID: hidden.pid, item: item, operation: .read, list: try list("/usr/bin/python3"))
        XCTAssertTrue(isRefused(outcome, containing: "hides its executable from the daemon"), "\(outcome)")
        // An empty list asks nothing of it.
        XCTAssertEqual(access.decide(threadID: hidden.pid, item: item, operation: .read, list: .anyProgram), .allowed)
    }

    /// The table's dropped entries are let go of off the request path (`DroppedProcesses`):
    /// their descriptors must still be closed, not kept for the daemon's life.
    func testProcessesDroppedFromTheTableLetGoOfTheirDescriptors() throws {
        let headOnly = try list("/usr/bin/head")
        var pids: Set<pid_t> = []
        // Each head exits once identified: the insert past the table's capacity sweeps them.
        for _ in 0..<(ProcessTable.capacity + 8) {
            let head = try TestProcess(["/usr/bin/head"], waitForExecutable: "/usr/bin/head")
            XCTAssertEqual(access.decide(threadID: head.pid, item: item, operation: .read, list: headOnly), .allowed)
            pids.insert(head.pid)
            head.stop()
        }
        XCTAssertLessThanOrEqual(access.cachedProcessCount, ProcessTable.capacity)
        try TestProcess.waitUntil("the dropped processes are let go of") { DroppedProcesses.shared.isIdle }
        // What still names their /proc files: only the entries the table holds (status and witness).
        let held = (try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")).filter { fd in
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)"),
                  target.hasPrefix("/proc/"), let pid = pid_t(target.dropFirst(6).prefix(while: { $0 != "/" })) else { return false }
            return pids.contains(pid)
        }
        XCTAssertLessThanOrEqual(held.count, 2 * access.cachedProcessCount, "descriptors of dropped processes stay open: \(held.count)")
        XCTAssertLessThan(access.cachedProcessCount, 64, "the exited were swept")
    }

    func testAnEmptyListIsAnyProgramWithoutLookingAtTheCaller() throws {
        // Not even a real pid: an empty list never identifies anyone.
        XCTAssertEqual(access.decide(threadID: 999_999_999, item: item, operation: .read, list: .anyProgram), .allowed)
        XCTAssertEqual(access.cachedProcessCount, 0)
    }

    func testCatAndPythonAreRefusedAnItemListingHead() throws {
        let headOnly = try list("/usr/bin/head")
        let cat = try TestProcess(["/bin/cat"], waitForExecutable: "/usr/bin/cat")
        XCTAssertTrue(isRefused(access.decide(threadID: cat.pid, item: item, operation: .read, list: headOnly)))
        let python = try TestProcess(["/usr/bin/python3", "-c", "import sys; sys.stdin.read()"], waitForExecutable: pythonExecutable)
        XCTAssertTrue(isRefused(access.decide(threadID: python.pid, item: item, operation: .read, list: headOnly)))
    }

    func testACopyOfHeadIsAnotherProgram() throws {
        let dir = directory()
        let copy = try dir.copy("/usr/bin/head", as: "head")
        let process = try TestProcess([copy], waitForExecutable: copy)
        let facts = try access.identify(threadID: process.pid)
        let real = try FileIdentity.of(path: "/usr/bin/head")
        XCTAssertEqual(try facts.executableIdentity().sha256, real.sha256, "the same bytes...")
        XCTAssertNotEqual(try facts.executableIdentity(), real, "...in another file")
        XCTAssertTrue(isRefused(access.decide(threadID: process.pid, item: item, operation: .read, list: try list("/usr/bin/head"))))
    }

    /// The executable is hashed only when a rule needs it, not when the process is
    /// identified; bytes changed in between are not taken for the ones it was identified with.
    func testAnExecutableChangedAfterIdentificationIsRefused() throws {
        let dir = directory()
        let copy = try dir.copy("/usr/bin/head", as: "head")
        let process = try TestProcess([copy], waitForExecutable: copy)
        let facts = try access.identify(threadID: process.pid)
        // A running executable cannot be opened for writing (ETXTBSY); a chmod moves its ctime,
        // as any change would.
        XCTAssertEqual(chmod(copy, 0o700), 0)
        XCTAssertThrowsError(try facts.executableIdentity())
    }

    func testHeadUnderStraceIsRefusedEvenThoughListed() throws {
        let strace = try TestProcess(["/usr/bin/strace", "-o", "/dev/null", "/usr/bin/head"])
        var head: pid_t = 0
        try TestProcess.waitUntil("strace starts head") {
            head = TestProcess.children(of: strace.pid).first { TestProcess.executable(of: $0) == "/usr/bin/head" } ?? 0
            return head != 0
        }
        let outcome = access.decide(threadID: head, item: item, operation: .read, list: try list("/usr/bin/head"))
        XCTAssertTrue(isRefused(outcome, containing: "being traced by \(strace.pid) (strace)"), "\(outcome)")
    }

    func testATracerAttachingAfterTheProcessWasAllowedIsSeen() throws {
        let headOnly = try list("/usr/bin/head")
        let head = try TestProcess(["/usr/bin/head"], waitForExecutable: "/usr/bin/head")
        XCTAssertEqual(access.decide(threadID: head.pid, item: item, operation: .read, list: headOnly), .allowed)
        let tracer = try TestProcess(["/usr/bin/strace", "-o", "/dev/null", "-p", String(head.pid)])
        try TestProcess.waitUntil("strace attaches") { (try? self.tracerPid(head.pid)) == tracer.pid }
        waitOutTheRecheckInterval()
        XCTAssertTrue(isRefused(access.decide(threadID: head.pid, item: item, operation: .read, list: headOnly), containing: "traced"))
        tracer.stop()
        try TestProcess.waitUntil("strace detaches") { (try? self.tracerPid(head.pid)) == 0 }
        XCTAssertEqual(access.decide(threadID: head.pid, item: item, operation: .read, list: headOnly), .allowed)
    }

    /// A known caller allowed at once keeps the FUSE lead (`beforeWaiting`): its witness takes
    /// no lock, and its executable's file system, if it answers the `fstat` from memory (a
    /// local one), needs none. It passes it at its first recheck (the executable is opened then)
    /// and so does a new caller and a refusal; an executable on a file system not known to be
    /// local makes every full check pass it (a slow one: test_access). And the cheap path still
    /// sees what it must: a tracer, an exec.
    func testAKnownCallerAllowedAtOnceKeepsTheLead() throws {
        let headFD = open("/usr/bin/head", O_RDONLY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(headFD, 0)
        let local = kcfs_stat_is_local(headFD)
        close(headFD)
        XCTAssertNotEqual(local, -1, "fstatfs of /usr/bin/head")
        // Where /usr/bin is not known to be local, every full check passes the lead: the first
        // recheck, and each one after the interval.
        let laterPasses = local == 1 ? 0 : 1
        var passed = 0
        func decide(_ pid: pid_t, _ list: AccessList) -> AccessOutcome {
            access.decide(threadID: pid, item: item, operation: .read, list: list, beforeWaiting: { passed += 1 })
        }
        let headOnly = try list("/usr/bin/head")
        let head = try TestProcess(["/usr/bin/head"], waitForExecutable: "/usr/bin/head")
        XCTAssertEqual(decide(head.pid, headOnly), .allowed)
        XCTAssertEqual(passed, 1, "a process seen for the first time is identified after the lead is passed")
        XCTAssertEqual(decide(head.pid, headOnly), .allowed)
        XCTAssertEqual(passed, 2, "its first recheck opens its executable, after the lead is passed")
        for _ in 0..<3 { XCTAssertEqual(decide(head.pid, headOnly), .allowed) }
        waitOutTheRecheckInterval()
        XCTAssertEqual(decide(head.pid, headOnly), .allowed)
        XCTAssertEqual(passed, 2 + 4 * laterPasses, "a known single-threaded caller allowed at once keeps it, its status read or not")
        passed = 0
        XCTAssertTrue(isRefused(decide(head.pid, try list("/usr/bin/tail"))))
        XCTAssertGreaterThanOrEqual(passed, 1, "a refusal (logged) passes it")

        let tracer = try TestProcess(["/usr/bin/strace", "-o", "/dev/null", "-p", String(head.pid)])
        try TestProcess.waitUntil("strace attaches") { (try? self.tracerPid(head.pid)) == tracer.pid }
        waitOutTheRecheckInterval()
        XCTAssertTrue(isRefused(decide(head.pid, headOnly), containing: "traced"), "a tracer attached since is seen by the cheap path")
        XCTAssertTrue(isRefused(decide(head.pid, headOnly), containing: "traced"), "a traced process's status is read at every request")
        tracer.stop()
        try TestProcess.waitUntil("strace detaches") { (try? self.tracerPid(head.pid)) == 0 }
        passed = 0
        XCTAssertEqual(decide(head.pid, headOnly), .allowed)
        XCTAssertEqual(passed, laterPasses)

        let dir = directory()
        let script = try dir.write("""
            import sys, threading
            threading.Thread(target=lambda: sys.stdin.read()).start()
            """, as: "threads.py")
        let python = try TestProcess(["/usr/bin/python3", script], waitForExecutable: pythonExecutable)
        try TestProcess.waitUntil("a second thread") {
            ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(python.pid)/task")) ?? []).count > 1
        }
        let pythonOnly = try list("/usr/bin/python3")
        XCTAssertEqual(decide(python.pid, pythonOnly), .allowed)
        XCTAssertEqual(decide(python.pid, pythonOnly), .allowed)
        passed = 0
        XCTAssertEqual(decide(python.pid, pythonOnly), .allowed)
        XCTAssertEqual(passed, laterPasses, "nor does a known caller with two threads: its witness takes no lock of its memory")
    }

    func testLoaderVariablesAtStartAreRefusedEvenThoughListed() throws {
        let headOnly = try list("/usr/bin/head")
        for variable in ["LD_PRELOAD=/nonexistent/preload.so", "LD_AUDIT=/nonexistent/audit.so", "LD_LIBRARY_PATH=/nonexistent"] {
            let head = try TestProcess(["/usr/bin/head"], environment: ["PATH=/usr/bin", variable], waitForExecutable: "/usr/bin/head")
            let name = String(variable.prefix(while: { $0 != "=" }))
            let outcome = access.decide(threadID: head.pid, item: item, operation: .read, list: headOnly)
            XCTAssertTrue(isRefused(outcome, containing: "started with \(name) set"), "\(variable): \(outcome)")
        }
        // An empty value loads nothing.
        let plain = try TestProcess(["/usr/bin/head"], environment: ["LD_PRELOAD="], waitForExecutable: "/usr/bin/head")
        XCTAssertEqual(access.decide(threadID: plain.pid, item: item, operation: .read, list: headOnly), .allowed)
    }

    /// The environment is read into the stack when it fits 16 KiB and whole otherwise: a loader
    /// variable behind 40 KiB of others is seen, and TERM (for a terminal prompt) is read
    /// wherever it stands and however long it is.
    func testALoaderVariableBehindALargeEnvironmentIsSeen() throws {
        let headOnly = try list("/usr/bin/head")
        let padding = (0..<400).map { "PAD\($0)=" + String(repeating: "x", count: 100) }
        let hidden = try TestProcess(["/usr/bin/head"], environment: padding + ["LD_PRELOAD=/nonexistent/preload.so"],
                                     waitForExecutable: "/usr/bin/head")
        let outcome = access.decide(threadID: hidden.pid, item: item, operation: .read, list: headOnly)
        XCTAssertTrue(isRefused(outcome, containing: "started with LD_PRELOAD set"), "\(outcome)")
        let large = try TestProcess(["/usr/bin/head"], environment: padding + ["TERM=xterm-kcfs"], waitForExecutable: "/usr/bin/head")
        XCTAssertEqual(access.decide(threadID: large.pid, item: item, operation: .read, list: headOnly), .allowed)
        XCTAssertEqual(try access.identify(threadID: large.pid).terminalType, "xterm-kcfs")
        let longTerm = String(repeating: "t", count: 300)
        let small = try TestProcess(["/usr/bin/head"], environment: ["TERM=" + longTerm, "LD_AUDIT=/nonexistent/audit.so"],
                                    waitForExecutable: "/usr/bin/head")
        XCTAssertEqual(try access.identify(threadID: small.pid).terminalType, longTerm)
        let audited = access.decide(threadID: small.pid, item: item, operation: .read, list: headOnly)
        XCTAssertTrue(isRefused(audited, containing: "started with LD_AUDIT set"), "\(audited)")
    }

    func testAReplacedBinaryIsRefusedUntilAllowedAgain() throws {
        let dir = directory()
        let prog = try dir.copy("/usr/bin/head", as: "prog")
        let allowed = try list(prog)
        let before = try TestProcess([prog], waitForExecutable: prog)
        XCTAssertEqual(access.decide(threadID: before.pid, item: item, operation: .read, list: allowed), .allowed)
        // Replaced by another program (rename over it, as a package upgrade does).
        let staged = try dir.copy("/usr/bin/tail", as: "staged")
        XCTAssertEqual(rename(staged, prog), 0)
        // Known and allowed a moment ago; the cache notices.
        let stale = access.decide(threadID: before.pid, item: item, operation: .read, list: allowed)
        XCTAssertTrue(isRefused(stale, containing: "was deleted since it started"), "\(stale)")
        let after = try TestProcess([prog], waitForExecutable: prog)
        let changed = access.decide(threadID: after.pid, item: item, operation: .read, list: allowed)
        XCTAssertTrue(isRefused(changed, containing: "\(prog) changed since it was allowed"), "\(changed)")
        // Allowed again: removed from the list and added back, which pins the new file.
        let again = try allowed.setting([]).setting([.executable(prog)])
        XCTAssertEqual(access.decide(threadID: after.pid, item: item, operation: .read, list: again), .allowed)
    }

    /// A process that has read twice is checked in full once per `recheckInterval` (between
    /// checks, only that it runs the same address space): its binary replaced since, or a
    /// tracer attached since, is seen once the interval has passed.
    func testAKnownCallerIsCheckedInFullOncePerInterval() throws {
        let dir = directory()
        let prog = try dir.copy("/usr/bin/head", as: "prog")
        let allowed = try list(prog)
        let process = try TestProcess([prog], waitForExecutable: prog)
        for _ in 0..<3 { XCTAssertEqual(access.decide(threadID: process.pid, item: item, operation: .read, list: allowed), .allowed) }
        let staged = try dir.copy("/usr/bin/head", as: "staged")
        XCTAssertEqual(rename(staged, prog), 0)
        waitOutTheRecheckInterval()
        let stale = access.decide(threadID: process.pid, item: item, operation: .read, list: allowed)
        XCTAssertTrue(isRefused(stale, containing: "was deleted since it started"), "\(stale)")
        XCTAssertTrue(isRefused(access.decide(threadID: process.pid, item: item, operation: .read, list: allowed)),
                      "a refused process is checked in full at every request")
    }

    func testABinaryChangedInPlaceIsAnotherProgram() throws {
        let dir = directory()
        let prog = try dir.copy("/usr/bin/head", as: "prog")
        let allowed = try list(prog)
        // Same inode, one byte more (what a rebuild writing in place leaves).
        let fd = open(prog, O_WRONLY | O_APPEND)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(write(fd, "x", 1), 1)
        close(fd)
        let process = try TestProcess([prog], waitForExecutable: prog)
        XCTAssertTrue(isRefused(access.decide(threadID: process.pid, item: item, operation: .read, list: allowed), containing: "changed since"))
    }

    /// The digest of a binary is cached by its stat (dev, inode, size, mtime and ctime), so
    /// that the hundredth `head` is not hashed again: a rewrite in place that keeps the size
    /// and puts the mtime back (`touch -d`) still moves the ctime, which only the kernel sets.
    func testABinaryRewrittenInPlaceWithItsSizeAndMtimePutBackIsAnotherProgram() throws {
        let dir = directory()
        let prog = try dir.copy("/usr/bin/head", as: "prog")
        let allowed = try list(prog)
        let first = try TestProcess([prog], waitForExecutable: prog)
        XCTAssertEqual(access.decide(threadID: first.pid, item: item, operation: .read, list: allowed), .allowed)
        first.stop()
        var before = stat()
        XCTAssertEqual(stat(prog, &before), 0)
        // One byte of the last section header (which neither the kernel nor ld.so reads).
        let fd = open(prog, O_WRONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        var byte: UInt8 = 0x5a
        XCTAssertEqual(pwrite(fd, &byte, 1, off_t(before.st_size) - 1), 1)
        close(fd)
        let touch = try TestProcess(["/usr/bin/touch", "-d", "@\(before.st_mtim.tv_sec).\(String(format: "%09d", before.st_mtim.tv_nsec))", prog])
        XCTAssertEqual(touch.wait(), 0)
        var after = stat()
        XCTAssertEqual(stat(prog, &after), 0)
        XCTAssertEqual(after.st_size, before.st_size)
        XCTAssertEqual(after.st_mtim.tv_sec, before.st_mtim.tv_sec)
        XCTAssertEqual(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec)
        XCTAssertNotEqual(FileStatKey(after), FileStatKey(before))
        let second = try TestProcess([prog], waitForExecutable: prog)
        let outcome = access.decide(threadID: second.pid, item: item, operation: .read, list: allowed)
        XCTAssertTrue(isRefused(outcome, containing: "\(prog) changed since it was allowed"), "\(outcome)")
    }

    func testAPathNowNamingAnotherFileIsAReplacedExecutable() throws {
        try XCTSkipUnless(geteuid() == 0, "bind mounts need root")
        let dir = directory()
        let prog = try dir.copy("/usr/bin/head", as: "prog")
        let process = try TestProcess([prog], waitForExecutable: prog)
        XCTAssertEqual(try TestProcess(["/bin/mount", "--bind", "/usr/bin/tail", prog]).wait(), 0)
        defer { _ = try? TestProcess(["/bin/umount", prog]).wait() }
        let outcome = access.decide(threadID: process.pid, item: item, operation: .read, list: try list("/usr/bin/tail", prog))
        XCTAssertTrue(isRefused(outcome, containing: "was replaced since it started"), "\(outcome)")
    }

    func testInterpreterPlusScriptMatchesOnlyThatScript() throws {
        let dir = directory()
        let sync = try dir.write("import sys\nsys.stdin.read()\n", as: "sync.py")
        let other = try dir.write("import sys\nsys.stdin.read()\n", as: "other.py")
        let rule = try list("/usr/bin/python3 \(sync)")
        let python = pythonExecutable
        let good = try TestProcess(["/usr/bin/python3", sync], waitForExecutable: python)
        XCTAssertEqual(access.decide(threadID: good.pid, item: item, operation: .read, list: rule), .allowed)
        // Relative to its working directory, as `cd dir && python3 sync.py` runs it.
        let relative = try TestProcess(["/bin/sh", "-c", "cd '\(dir.path)' && exec /usr/bin/python3 sync.py"], waitForExecutable: python)
        XCTAssertEqual(try access.identify(threadID: relative.pid).scriptPath, sync)
        XCTAssertEqual(access.decide(threadID: relative.pid, item: item, operation: .read, list: rule), .allowed)
        // Options that run no code may come first, as a shebang line's do.
        let unbuffered = try TestProcess(["/usr/bin/python3", "-u", "-B", sync], waitForExecutable: python)
        XCTAssertEqual(access.decide(threadID: unbuffered.pid, item: item, operation: .read, list: rule), .allowed)
        for argv in [["/usr/bin/python3", other], ["/usr/bin/python3", "-c", "import sys; sys.stdin.read()", sync],
                     ["/usr/bin/python3", "-W", "ignore", sync], ["/usr/bin/python3", "-uc", "import sys; sys.stdin.read()", sync],
                     ["/usr/bin/python3"]] {
            let process = try TestProcess(argv, waitForExecutable: python)
            XCTAssertTrue(isRefused(access.decide(threadID: process.pid, item: item, operation: .read, list: rule)), "\(argv)")
        }
        // The script edited is another program.
        _ = try dir.write("import sys\nsys.stdin.read()\n# edited\n", as: "sync.py")
        let edited = try TestProcess(["/usr/bin/python3", sync], waitForExecutable: python)
        XCTAssertTrue(isRefused(access.decide(threadID: edited.pid, item: item, operation: .read, list: rule)))
    }

    func testACommandLineTooLongToReadRecognisesNoScript() throws {
        let dir = directory()
        let sync = try dir.write("import sys\nsys.stdin.read()\n", as: "sync.py")
        _ = try dir.write("import sys\nsys.stdin.read()\n", as: "sync.py.evil")
        // Padding of harmless options puts the 64 KiB cut inside the last word, right after
        // ".../sync.py" of ".../sync.py.evil": read as cut, it would name the allowed script.
        let room = (1 << 16) - sync.utf8.count - ("/usr/bin/python3".utf8.count + 1)
        let k = (room - 4) / 3
        let padding = Array(repeating: "-u", count: k) + ["-" + String(repeating: "u", count: room - 3 * k - 2)]
        let argv = ["/usr/bin/python3"] + padding + [sync + ".evil"]
        XCTAssertEqual(argv.dropLast().map { $0.utf8.count + 1 }.reduce(0, +) + sync.utf8.count, 1 << 16)
        let process = try TestProcess(argv, waitForExecutable: pythonExecutable)
        let facts = try access.identify(threadID: process.pid)
        XCTAssertEqual(facts.commandLine.last, "…")
        XCTAssertNil(facts.scriptPath)
        XCTAssertTrue(isRefused(access.decide(threadID: process.pid, item: item, operation: .read, list: try list("/usr/bin/python3 \(sync)"))))
    }

    func testAShellScriptRunByItsShebangMatchesItsRule() throws {
        let dir = directory()
        let script = try dir.write("#!/bin/bash -e\nread line\n", as: "job.sh", mode: 0o755)
        let process = try TestProcess([script], waitForExecutable: "/usr/bin/bash")
        XCTAssertEqual(try access.identify(threadID: process.pid).commandLine, ["/bin/bash", "-e", script])
        XCTAssertEqual(access.decide(threadID: process.pid, item: item, operation: .read, list: try list("/bin/bash \(script)")), .allowed)
        XCTAssertTrue(isRefused(access.decide(threadID: process.pid, item: item, operation: .read, list: try list("/bin/bash /etc/profile"))))
    }

    func testScriptArgumentsAreRecognisedOnlyAfterOptionsThatRunNoCode() {
        func script(_ argv: [String], _ interpreter: String = pythonExecutable) -> String? {
            CallerFacts.scriptArgument(argv, cwd: "/home/me", interpreter: interpreter)
        }
        XCTAssertEqual(script(["python3", "sync.py", "--flag"]), "/home/me/sync.py")
        XCTAssertEqual(script(["python3", "-uI", "/abs/sync.py"]), "/abs/sync.py")
        XCTAssertNil(script(["python3", "-m", "http.server"]))
        XCTAssertNil(script(["python3", "-X", "dev", "sync.py"]))
        XCTAssertNil(script(["python3", "-", "sync.py"]))
        XCTAssertNil(script(["python3", "-i", "sync.py"]), "interactive: reads code from its input after the script")
        XCTAssertEqual(script(["bash", "-eu", "job.sh"], "/usr/bin/bash"), "/home/me/job.sh")
        XCTAssertNil(script(["bash", "-c", "cat x", "job.sh"], "/usr/bin/bash"))
        XCTAssertNil(script(["perl", "-e", "print 1", "x.pl"], "/usr/bin/perl"))
        XCTAssertNil(script(["node", "--inspect", "x.js"], "/usr/bin/node"))
        XCTAssertEqual(script(["node", "x.js"], "/usr/bin/node"), "/home/me/x.js")
    }

    func testAProcessThatExecsIsIdentifiedAgain() throws {
        let dir = directory()
        let script = try dir.write("import os, sys\nsys.stdin.readline()\nos.execv('/usr/bin/head', ['head'])\n", as: "then-head.py")
        let rule = try list("/usr/bin/python3 \(script)")
        let process = try TestProcess(["/usr/bin/python3", script], waitForExecutable: pythonExecutable)
        XCTAssertEqual(access.decide(threadID: process.pid, item: item, operation: .read, list: rule), .allowed)
        process.send("go")
        try TestProcess.waitUntil("it execs head") { TestProcess.runs(process.pid, "/usr/bin/head") }
        let outcome = access.decide(threadID: process.pid, item: item, operation: .read, list: rule)
        XCTAssertTrue(isRefused(outcome, containing: "not on the item's access list"), "same pid, same pidfd, another program: \(outcome)")
        XCTAssertEqual(try access.identify(threadID: process.pid).executablePath, "/usr/bin/head")
    }

    /// The same binary exec'd again (so the executable's file and its digest, cached by stat,
    /// are unchanged) with a loader variable: another image, identified again and refused.
    /// With an environment (the address space is the witness) and with none (the layout is).
    func testAProcessThatExecsItsOwnBinaryWithALoaderVariableIsIdentifiedAgain() throws {
        let dir = directory()
        let script = try dir.write("""
            import os, sys
            if len(sys.argv) == 1:
                sys.stdin.readline()
                os.execve(sys.executable, [sys.executable, sys.argv[0], 'again'], dict(os.environ, LD_LIBRARY_PATH='/nonexistent'))
            sys.stdin.read()
            """, as: "again.py")
        let rule = try list("/usr/bin/python3 \(script)")
        for environment in [nil, []] as [[String]?] {
            let process = try TestProcess(["/usr/bin/python3", script], environment: environment, waitForExecutable: pythonExecutable)
            XCTAssertEqual(access.decide(threadID: process.pid, item: item, operation: .read, list: rule), .allowed)
            // A second request: with an environment, `pagemap` is the witness from here on.
            XCTAssertEqual(access.decide(threadID: process.pid, item: item, operation: .read, list: rule), .allowed)
            process.send("go")
            try TestProcess.waitUntil("it execs itself with LD_LIBRARY_PATH") {
                let environ = (try? ProcFile.read("/proc/\(process.pid)/environ")) ?? []
                return environ.split(separator: 0).contains { $0.starts(with: Array("LD_LIBRARY_PATH=".utf8)) }
                    && ((try? ProcFile.read("/proc/\(process.pid)/cmdline")) ?? []).split(separator: 0).count == 3
            }
            let outcome = access.decide(threadID: process.pid, item: item, operation: .read, list: rule)
            XCTAssertTrue(isRefused(outcome, containing: "LD_LIBRARY_PATH"), "same pid, same binary, another image (environment \(environment ?? ["inherited"])): \(outcome)")
        }
    }

    /// What tells a vfork child from its parent: the child shares the parent's address
    /// space until it execs, so that space cannot witness the child's image.
    func testSharedAddressSpacesAreToldApart() throws {
        XCTAssertEqual(kcfs_shares_memory(getpid(), getpid()), 1)
        let head = try TestProcess(["/usr/bin/head"], waitForExecutable: "/usr/bin/head")
        XCTAssertEqual(kcfs_shares_memory(head.pid, getpid()), 0)
        XCTAssertEqual(kcfs_shares_memory(head.pid, 0), -1, "no parent to compare with: the layout is the witness")
    }

    func testAThreadIsMappedToItsProcess() throws {
        let dir = directory()
        let script = try dir.write("""
            import sys, threading
            threading.Thread(target=lambda: sys.stdin.read()).start()
            """, as: "threads.py")
        let process = try TestProcess(["/usr/bin/python3", script], waitForExecutable: pythonExecutable)
        var thread: pid_t = 0
        try TestProcess.waitUntil("a second thread") {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(process.pid)/task")) ?? []
            thread = tasks.compactMap { pid_t($0) }.first { $0 != process.pid } ?? 0
            return thread != 0
        }
        let facts = try access.identify(threadID: thread)
        XCTAssertEqual(facts.pid, process.pid)
        XCTAssertEqual(access.decide(threadID: thread, item: item, operation: .read, list: try list("/usr/bin/python3 \(script)")), .allowed)
    }

    func testASocketPeerIsPinnedByItsPidfd() throws {
        let dir = directory()
        let path = dir.path + "/s"
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        defer { close(listener) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8) + [0]) }
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        XCTAssertEqual(bound, 0)
        XCTAssertEqual(listen(listener, 1), 0)
        let client = try TestProcess(["/usr/bin/python3", "-c",
                                      "import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); sys.stdin.read()", path])
        let connection = accept(listener, nil, nil)
        XCTAssertGreaterThanOrEqual(connection, 0)
        defer { close(connection) }
        let peer = try PinnedProcess.forSocketPeer(connection)
        XCTAssertEqual(peer.pid, client.pid)
        XCTAssertTrue(peer.isAlive)
        let outcome = access.decide(process: peer, item: item, operation: .read, list: try list("/usr/bin/head"))
        XCTAssertTrue(isRefused(outcome, containing: "not on the item's access list"))
        XCTAssertEqual(access.decide(process: peer, item: item, operation: .read, list: try list("/usr/bin/python3")), .allowed)
        client.stop()
        XCTAssertFalse(peer.isAlive, "the pidfd sees the peer exit; its pid may now be anyone's")
        XCTAssertTrue(isRefused(access.decide(process: peer, item: item, operation: .read, list: try list("/usr/bin/python3"))))
    }

    /// In a user namespace of its own a process may name any executable as its own (prctl
    /// PR_SET_MM_MAP's exe_fd; Tests/integration/forge_exe.c does it), so even the real head
    /// there is not taken for head, and no Always allow is offered for it.
    func testAProcessInAnotherUserNamespaceMatchesNoExecutableRule() throws {
        let head = try TestProcess(["/usr/bin/unshare", "--user", "--map-current-user", "/usr/bin/head"], waitForExecutable: "/usr/bin/head")
        let facts = try access.identify(threadID: head.pid)
        XCTAssertEqual(facts.executablePath, "/usr/bin/head")
        XCTAssertTrue(facts.inAnotherUserNamespace)
        let outcome = access.decide(threadID: head.pid, item: item, operation: .read, list: try list("/usr/bin/head"))
        XCTAssertTrue(isRefused(outcome, containing: "runs in another user namespace, where a process can name any executable as its own"), "\(outcome)")
        let text = AccessControl.promptText(facts, item, .read, reason: "r", proposed: nil)
        XCTAssertNil(text.alwaysAllow)
        XCTAssertTrue(text.description.contains("in another user namespace"), text.description)
        // The same program in the daemon's namespace still matches.
        let plain = try TestProcess(["/usr/bin/head"], waitForExecutable: "/usr/bin/head")
        XCTAssertEqual(access.decide(threadID: plain.pid, item: item, operation: .read, list: try list("/usr/bin/head")), .allowed)
    }

    /// A Flatpak app runs in a user namespace of its own; its app id, from a `/.flatpak-info`
    /// the sandbox cannot change, still matches a Flatpak rule.
    func testAFlatpakRuleMatchesInTheSandboxesOwnUserNamespace() throws {
        let sandboxed = try fakeFlatpakHead(unshare: ["--user", "--map-root-user"])
        let facts = try access.identify(threadID: sandboxed.pid)
        XCTAssertTrue(facts.inAnotherUserNamespace)
        XCTAssertEqual(facts.flatpakAppID, "org.example.Sandboxed")
        XCTAssertEqual(access.decide(threadID: sandboxed.pid, item: item, operation: .read, list: try list("flatpak:org.example.Sandboxed")), .allowed)
        let byPath = access.decide(threadID: sandboxed.pid, item: item, operation: .read, list: try list("/usr/bin/head"))
        XCTAssertTrue(isRefused(byPath, containing: "another user namespace"), "\(byPath)")
    }

    /// head in a fake Flatpak sandbox (app id org.example.Sandboxed): chrooted into a root with
    /// /usr bound in and a `/.flatpak-info`, in a mount namespace of its own, plus `unshare`.
    private func fakeFlatpakHead(unshare extra: [String]) throws -> TestProcess {
        let dir = directory()
        let root = dir.path + "/root"
        XCTAssertEqual(mkdir(root, 0o755), 0)
        XCTAssertEqual(mkdir(root + "/usr", 0o755), 0)
        for link in ["bin", "lib", "lib64"] { XCTAssertEqual(symlink("usr/" + link, root + "/" + link), 0) }
        _ = try dir.write("[Application]\nname=org.example.Sandboxed\n", as: "root/.flatpak-info")
        let sandboxed = try TestProcess(["/usr/bin/unshare"] + extra + ["--mount", "--propagation", "private", "/bin/sh", "-c",
                                         "mount --bind /usr '\(root)/usr' && exec chroot '\(root)' /usr/bin/head"])
        try TestProcess.waitUntil("the sandboxed head runs") {
            (try? ProcFile.readLink("/proc/\(sandboxed.pid)/root")) == root
                && TestProcess.executable(of: sandboxed.pid)?.hasSuffix("/usr/bin/head") == true && TestProcess.isLaidOut(sandboxed.pid)
        }
        return sandboxed
    }

    func testAFlatpakAppIsKnownByItsSandboxInfo() throws {
        try XCTSkipUnless(geteuid() == 0, "a fake sandbox root needs mount and chroot")
        let sandboxed = try fakeFlatpakHead(unshare: [])
        let facts = try access.identify(threadID: sandboxed.pid)
        XCTAssertEqual(facts.flatpakAppID, "org.example.Sandboxed")
        XCTAssertEqual(access.decide(threadID: sandboxed.pid, item: item, operation: .read, list: try list("flatpak:org.example.Sandboxed")), .allowed)
        XCTAssertTrue(isRefused(access.decide(threadID: sandboxed.pid, item: item, operation: .read, list: try list("flatpak:org.example.Other"))))
        // Outside a sandbox there is no app id to claim.
        let plain = try TestProcess(["/usr/bin/head"], waitForExecutable: "/usr/bin/head")
        XCTAssertNil(try access.identify(threadID: plain.pid).flatpakAppID)
    }

    func testAnAllowedDecisionIsCheapOnceTheProcessIsKnown() throws {
        let head = try TestProcess(["/usr/bin/head"], waitForExecutable: "/usr/bin/head")
        let allowed = try list("/usr/bin/tail", "/usr/bin/head")
        func time(_ n: Int, _ body: () -> Void) -> Double {
            let start = ContinuousClock.now
            for _ in 0..<n { body() }
            let d = (ContinuousClock.now - start).components
            return (Double(d.seconds) * 1e6 + Double(d.attoseconds) / 1e12) / Double(n)
        }
        let cold = time(20) {
            access.forgetProcesses()
            DigestCache.shared.removeAll()
            XCTAssertEqual(access.decide(threadID: head.pid, item: item, operation: .read, list: allowed), .allowed)
        }
        let firstSight = time(200) {
            access.forgetProcesses()
            XCTAssertEqual(access.decide(threadID: head.pid, item: item, operation: .read, list: allowed), .allowed)
        }
        let cached = time(5000) {
            XCTAssertEqual(access.decide(threadID: head.pid, item: item, operation: .read, list: allowed), .allowed)
        }
        let unguarded = time(5000) {
            XCTAssertEqual(access.decide(threadID: head.pid, item: item, operation: .read, list: .anyProgram), .allowed)
        }
        // What the kernel alone charges for the three checks a cached decision makes (status,
        // the witness, the image's file), and the status alone.
        let proc = open("/proc/\(head.pid)", O_RDONLY | O_DIRECTORY)
        let environFD = openat(proc, "environ", O_RDONLY), statusFD = openat(proc, "status", O_RDONLY)
        let exeFD = openat(proc, "exe", O_RDONLY)
        defer { close(proc); close(environFD); close(statusFD); close(exeFD) }
        var byte: UInt8 = 0
        var st = stat()
        let syscalls = time(5000) {
            var ids = kcfs_status_ids()
            _ = kcfs_read_status_ids(statusFD, &ids)
            _ = pread(environFD, &byte, 1, 0)
            _ = fstat(exeFD, &st)
        }
        let status = time(5000) {
            var ids = kcfs_status_ids()
            _ = kcfs_read_status_ids(statusFD, &ids)
        }
        print(String(format: "access decision, allowed: cached %.1f µs (its three /proc system calls alone %.1f µs, "
                     + "the status alone %.1f µs), "
                     + "first sight of a process %.1f µs, first sight with the binary hashed %.1f µs, empty list %.2f µs",
                     cached, syscalls, status, firstSight, cold, unguarded))
    }

    /// A recheck that found nothing counts for `recheckInterval`.
    private func waitOutTheRecheckInterval() {
        usleep(UInt32(CachedProcess.recheckInterval / 1000) + 2000)
    }

    private func tracerPid(_ pid: pid_t) throws -> pid_t {
        ProcStatus(try ProcFile.read("/proc/\(pid)/status")).tracerPID ?? -1
    }
}
