// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif
import KeychainControlProtocol
import KeychainCrypto

/// Starts the programs keychainfs runs itself (`fusermount3`, its daemon, its login helper)
/// with `posix_spawn`, not Foundation's `Process`, whose threads and descriptor sweep cost
/// tens of milliseconds where a command waits for its child.
package enum ChildProcess {
    /// Spawns `argv[0]` with `argv`. The child gets /dev/null for standard input, output and
    /// error, then each of `descriptors` (a descriptor of ours → the number the child sees
    /// it as), and with `newSession` a session of its own, apart from the terminal. The
    /// caller's descriptors should be close-on-exec, so that only these copies pass.
    /// Returns the child's pid.
    package static func spawn(_ argv: [String], descriptors: [(Int32, Int32)] = [], newSession: Bool = false) throws(SpawnFailure) -> pid_t {
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
    package struct SpawnFailure: Error {
        package let reason: String
    }

    /// This program's own path, so that a child started from it shows in `ps` by its name
    /// rather than as "exe".
    package static var ownExecutable: String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard n > 0 else { return "/proc/self/exe" }
        return String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// Handing a secret (the login password, the passphrase) to a child we start, so that no
/// other process can copy it on the way.
///
/// The channel is a socket pair, not a pipe: `/proc/PID/fd/N` of a socket cannot be opened by
/// anyone, so a process of the same user cannot take a copy of the child's end while the child
/// is still dumpable (from its exec until it hardens) and read the secret through it later.
/// And the parent writes nothing until the child says, with one byte on the channel, that it
/// is non-dumpable and not traced: only then is its memory and its descriptor table closed to
/// the user's other processes.
package enum SecretHandover {
    /// The byte a hardened child sends.
    static let hardened: UInt8 = 0x48
    /// How long a parent waits for it: a child hardens before it does anything else.
    static let handshakeSeconds: Double = 10

    /// The parent's side: spawns `argv` with the child's end of a new channel as `childFD`
    /// (plus `descriptors`), and waits until the child reports that it is hardened. Returns
    /// the child's pid and the parent's end of the channel (close-on-exec), to write the secret
    /// to and close. Throws if the child exits without reporting: then nothing was written.
    package static func spawn(_ argv: [String], childFD: Int32, descriptors: [(Int32, Int32)] = [],
                             newSession: Bool = false) throws(ChildProcess.SpawnFailure) -> (pid: pid_t, channel: Int32) {
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            throw ChildProcess.SpawnFailure(reason: String(cString: strerror(errno)))
        }
        let pid: pid_t
        do {
            defer { close(pair[1]) }
            pid = try ChildProcess.spawn(argv, descriptors: [(pair[1], childFD)] + descriptors, newSession: newSession)
        } catch {
            close(pair[0])
            throw error
        }
        // Bounded, so that a child that hangs before it hardens never holds up a login.
        var ready = pollfd(fd: pair[0], events: Int16(POLLIN), revents: 0)
        let deadline = Deadline.after(seconds: handshakeSeconds)
        var polled: Int32
        repeat {
            polled = poll(&ready, 1, max(1, deadline.remainingMilliseconds))
        } while polled < 0 && errno == EINTR && !deadline.hasPassed
        var byte: UInt8 = 0
        var n = -1
        if polled > 0 { repeat { n = read(pair[0], &byte, 1) } while n < 0 && errno == EINTR }
        guard n == 1, byte == hardened else {
            close(pair[0])
            throw ChildProcess.SpawnFailure(reason: "the child exited or hung before it could receive a secret safely")
        }
        return (pid, pair[0])
    }

    /// Writes all of `bytes` to the channel; false if the child is gone. No SIGPIPE.
    @discardableResult
    package static func send(_ bytes: UnsafeRawBufferPointer, on channel: Int32) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = Glibc.send(channel, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            if n < 0 { if errno == EINTR { continue }; return false }
            offset += n
        }
        return true
    }

    /// The child's side, its first act: makes this process non-dumpable and, if that held and
    /// no tracer attached while it was dumpable, tells the parent on `channel` that the secret
    /// may come. False when it must not be sent (the child should then exit).
    package static func reportHardened(on channel: Int32) -> Bool {
        guard ProcessProtection.makeNotDumpable(), !isTraced else { return false }
        var byte = hardened
        return write(channel, &byte, 1) == 1
    }

    /// A tracer that attached before `PR_SET_DUMPABLE` 0 stays attached after it and could read
    /// the secret from memory.
    static var isTraced: Bool {
        let fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC)
        // No /proc: nothing can have copied the descriptor through it either, but a tracer
        // cannot be ruled out; refuse.
        guard fd >= 0 else { return true }
        defer { close(fd) }
        let text = Descriptor.readToEnd(fd)
        for line in String(decoding: text, as: UTF8.self).split(separator: "\n") where line.hasPrefix("TracerPid:") {
            return line.dropFirst("TracerPid:".count).filter { $0 != " " && $0 != "\t" } != "0"
        }
        return true
    }
}
