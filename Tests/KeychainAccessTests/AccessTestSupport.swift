import Foundation
import Glibc
import XCTest
@testable import KeychainAccess
import KeychainModel

/// A real process started for a test, kept alive by a pipe on its standard input (head,
/// python's `sys.stdin.read()` and cat block on it). Stopped by its own pid, never by name.
final class TestProcess {
    let pid: pid_t
    private var input: Int32

    init(_ argv: [String], environment: [String]? = nil, waitForExecutable expected: String? = nil) throws {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { throw TestFailure("pipe") }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, fds[0], 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let cArgs = argv.map { strdup($0) } + [nil]
        defer { cArgs.forEach { free($0) } }
        var pid: pid_t = 0
        let rc: Int32
        if let environment {
            let cEnv = environment.map { strdup($0) } + [nil]
            defer { cEnv.forEach { free($0) } }
            rc = posix_spawn(&pid, argv[0], &actions, nil, cArgs, cEnv)
        } else {
            rc = posix_spawn(&pid, argv[0], &actions, nil, cArgs, environ)
        }
        close(fds[0])
        guard rc == 0 else { close(fds[1]); throw TestFailure("posix_spawn \(argv[0]): \(String(cString: strerror(rc)))") }
        self.pid = pid
        self.input = fds[1]
        if let expected { try TestProcess.waitUntil("pid \(pid) runs \(expected)") { TestProcess.runs(pid, expected) } }
    }

    deinit { stop() }

    /// Writes a line to its standard input.
    func send(_ line: String) {
        let bytes = Array((line + "\n").utf8)
        _ = bytes.withUnsafeBytes { write(input, $0.baseAddress, $0.count) }
    }

    func stop() {
        guard input >= 0 else { return }
        close(input)
        input = -1
        kill(pid, SIGKILL)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    }

    /// Waits for it to exit by itself and returns its wait status. Reaped here, it is never
    /// signalled afterwards: its pid may already be another process's.
    @discardableResult
    func wait() -> Int32 {
        guard input >= 0 else { return -1 }
        close(input)
        input = -1
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return status
    }

    static func executable(of pid: pid_t) -> String? {
        try? ProcFile.readLink("/proc/\(pid)/exe")
    }

    /// The process runs `expected` and its execve is over. /proc shows the new executable
    /// as soon as the new address space is in place (posix_spawn returns then), but argv and
    /// the environment only once the image is laid out, later; under load much later. The
    /// tests ask the gate as a FUSE request does (`decide(threadID:)`, a caller that cannot
    /// be inside an execve), so they must not ask before: an environment read as empty missed
    /// TERM and the loader variables.
    static func runs(_ pid: pid_t, _ expected: String) -> Bool {
        executable(of: pid) == expected && isLaidOut(pid)
    }

    static func isLaidOut(_ pid: pid_t) -> Bool {
        guard let stat = try? ProcFile.read("/proc/\(pid)/stat") else { return false }
        return ProcStat(stat)?.isSettled == true
    }

    static func children(of pid: pid_t) -> [pid_t] {
        guard let text = try? ProcFile.read("/proc/\(pid)/task/\(pid)/children") else { return [] }
        return String(decoding: text, as: UTF8.self).split(separator: " ").compactMap { pid_t($0) }
    }

    static func waitUntil(_ what: String, timeout: Double = 10, _ condition: () -> Bool) throws {
        let end = Date().addingTimeInterval(timeout)
        while !condition() {
            guard Date() < end else { throw TestFailure("timed out waiting until \(what)") }
            usleep(5_000)
        }
    }
}

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

/// The tests' base: every directory made with `directory()` is removed in tearDown (XCTest
/// keeps test case instances alive to the end of the run, so deinit is too late).
class AccessTestCase: XCTestCase {
    private var directories: [TestDirectory] = []

    func directory() -> TestDirectory {
        let d = TestDirectory()
        directories.append(d)
        return d
    }

    override func tearDown() {
        directories.forEach { $0.remove() }
        directories = []
        super.tearDown()
    }
}

/// A private temporary directory.
final class TestDirectory {
    let path: String

    init() {
        let base = NSTemporaryDirectory().hasSuffix("/") ? NSTemporaryDirectory() : NSTemporaryDirectory() + "/"
        var template = Array((base + "kcfs-access-XXXXXX").utf8CString)
        path = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)) }
    }

    func remove() { try? FileManager.default.removeItem(atPath: path) }

    /// Copies a file (an executable stays executable).
    func copy(_ source: String, as name: String) throws -> String {
        let target = path + "/" + name
        try? FileManager.default.removeItem(atPath: target)
        try FileManager.default.copyItem(atPath: source, toPath: target)
        chmod(target, 0o755)
        return target
    }

    func write(_ text: String, as name: String, mode: mode_t = 0o644) throws -> String {
        let target = path + "/" + name
        try Data(text.utf8).write(to: URL(fileURLWithPath: target))
        chmod(target, mode)
        return target
    }
}

/// A pinentry stand-in that speaks Assuan and gives one scripted answer to CONFIRM
/// (`ok`, `slow-ok`, `notok` (then OK to Always allow's confirmation, which has no "not OK"
/// button), `notok-always` (every CONFIRM, as pinentry-tty with no terminal), `cancel`,
/// `never`, `garbage`, `exit`), writing what it was sent to a file.
func scriptedPinentry(in dir: TestDirectory, answer: String) throws -> (path: String, transcript: String) {
    let transcript = dir.path + "/transcript-\(answer)"
    let script = """
    #!/bin/sh
    for f in /proc/$$/fd/*; do echo "FD $(readlink "$f")"; done >> '\(transcript)'
    echo "OK Pleased to meet you"
    notok_button=
    while IFS= read -r line; do
      printf '%s\\n' "$line" >> '\(transcript)'
      case "$line" in
        SETNOTOK*) notok_button=1; echo OK ;;
        CONFIRM*)
          case '\(answer)' in
            ok) echo OK ;;
            slow-ok) sleep 0.5; echo OK ;;
            notok) if [ -n "$notok_button" ]; then echo "ERR 83886194 Not confirmed <Pinentry>"; else echo OK; fi ;;
            notok-always) echo "ERR 83886194 Not confirmed <Pinentry>" ;;
            cancel) echo "ERR 83886179 Operation cancelled <Pinentry>" ;;
            never) exec sleep 1000 ;;
            garbage) echo "HELLO THERE" ;;
            exit) exit 0 ;;
          esac ;;
        BYE*) echo OK; exit 0 ;;
        *) echo OK ;;
      esac
    done
    """
    return (try dir.write(script, as: "pinentry-\(answer)", mode: 0o755), transcript)
}

func genericItem(_ service: String = "svc", _ account: String = "acct") -> AccessItem {
    let key = try! GenericPasswordKey(service: service, account: account)
    return AccessItem(id: "\(service)/\(account)", path: "/mnt/k/\(service)/\(account)", key: .generic(key))
}

func list(_ programs: String...) throws -> AccessList {
    try AccessList.anyProgram.setting(programs.map { try AccessProgram(parsing: $0) })
}

func isRefused(_ outcome: AccessOutcome, containing text: String? = nil) -> Bool {
    guard case .refused(let reason) = outcome else { return false }
    return text.map { reason.contains($0) } ?? true
}

/// What /usr/bin/python3 runs (`/usr/bin/python3.11` on Debian 12): the path /proc/PID/exe shows.
let pythonExecutable: String = {
    guard let resolved = realpath("/usr/bin/python3", nil) else { return "/usr/bin/python3" }
    defer { free(resolved) }
    return String(cString: resolved)
}()
