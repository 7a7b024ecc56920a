// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif

/// Starts the programs keychainfs runs itself (`fusermount3`, its daemon, its login helper)
/// with `posix_spawn`, not Foundation's `Process`, whose threads and descriptor sweep cost
/// tens of milliseconds where a command waits for its child.
public enum ChildProcess {
    /// Spawns `argv[0]` with `argv`. The child gets /dev/null for standard input, output and
    /// error, then each of `descriptors` (a descriptor of ours → the number the child sees
    /// it as), and with `newSession` a session of its own, apart from the terminal. The
    /// caller's descriptors should be close-on-exec, so that only these copies pass.
    /// Returns the child's pid.
    public static func spawn(_ argv: [String], descriptors: [(Int32, Int32)] = [], newSession: Bool = false) throws(SpawnFailure) -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        for (source, target) in descriptors { posix_spawn_file_actions_adddup2(&actions, source, target) }
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        if newSession { posix_spawnattr_setflags(&attr, 0x80) }  // POSIX_SPAWN_SETSID, hidden behind _GNU_SOURCE
        let cArguments = argv.map { strdup($0) } + [nil]
        defer { cArguments.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, argv[0], &actions, &attr, cArguments, environ)
        guard rc == 0 else { throw SpawnFailure(reason: String(cString: strerror(rc))) }
        return pid
    }

    /// Why `posix_spawn` refused, as `strerror` words it.
    public struct SpawnFailure: Error {
        public let reason: String
    }

    /// This program's own path, so that a child started from it shows in `ps` by its name
    /// rather than as "exe".
    public static var ownExecutable: String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard n > 0 else { return "/proc/self/exe" }
        return String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
