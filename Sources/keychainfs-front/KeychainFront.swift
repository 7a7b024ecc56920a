import Glibc
import KeychainClient
import KeychainControlProtocol
import KeychainCrypto
import KeychainModel

/// `keychainfs`: answers `find-generic-password -s S -a A -w` from a mounted keychain's daemon
/// itself, and asks a live daemon to unmount; it hands every other command line (and these,
/// when there is no live daemon to ask) to the full tool (`keychainfs-full`, beside this
/// binary or in `../libexec/keychainfs/`) by exec, with the same arguments.
///
/// The lookup is what scripts run most, and the full tool's start-up (its size, ArgumentParser's
/// reflection, Foundation and GRDB) costs several times the lookup itself. This binary links
/// only the control client. Whatever it does not recognise exactly — another option, a value
/// that looks like an option, no daemon serving the store, a locked item — goes to the full
/// tool, so that help, errors and the store opened in-process stay in one place.
@main
enum KeychainFront {
    static func main() {
        // An argument (or a path variable) that is not UTF-8 would be changed by its decoding:
        // the full tool refuses it.
        if CommandArguments.firstNotUTF8() != nil || CommandArguments.firstVariableNotUTF8() != nil { FullTool.exec() }
        let arguments = CommandLine.arguments
        if let lookup = SecretLookup(arguments: arguments.dropFirst()) { lookup.run() }
        if let unmount = DaemonUnmount(arguments: arguments.dropFirst()) { unmount.run() }
        FullTool.exec()
    }
}

/// `find-generic-password` with `-w`, and only `-s`, `-a` and `--store` besides, each at most once.
struct SecretLookup {
    var service: String?
    var account: String?
    var store: String?

    init?(arguments: ArraySlice<String>) {
        guard arguments.first == "find-generic-password" else { return nil }
        var passwordOnly = false
        var rest = arguments.dropFirst()
        while let option = rest.popFirst() {
            if option == "-w" {
                guard !passwordOnly else { return nil }
                passwordOnly = true
                continue
            }
            // A value that starts with "-" is left to ArgumentParser, which may read it as an option.
            guard let value = rest.popFirst(), !value.hasPrefix("-") else { return nil }
            switch option {
            case "-s" where service == nil: service = value
            case "-a" where account == nil: account = value
            case "--store" where store == nil: store = value
            default: return nil
            }
        }
        guard passwordOnly else { return nil }
    }

    /// Writes the secret and exits, or returns when the full tool should take the command.
    func run() {
        let path = KeychainLocations.store(store)
        do {
            // The daemon identifies this process as it accepts the connection (per-program
            // access), which it cannot once the process is non-dumpable: so connect first.
            guard case .daemon(let keychain, _) = try DaemonLocator.route(forStore: path) else { return }
            // The secret will be in this process's memory: no core dump or ptrace by the user's other processes.
            ProcessProtection.makeNotDumpable()
            let query = ItemQuery(kind: .generic, account: account, service: service)
            guard let item = try keychain.find(query: query, withSecrets: true, limit: 1).first else {
                throw KeychainError.itemNotFound
            }
            let secret = try item.secretBytes()
            secret.withUnsafeBytes { writeAll($0, to: 1) }
            exit(0)
        } catch KeychainError.unavailable {
            // The full tool says whether a missing device key is the reason.
            return
        } catch let error as KeychainError {
            fail(error)
        } catch {
            return
        }
    }
}

/// `unmount [MOUNTPOINT] [--store P]` of a mount whose daemon answers: the daemon detaches its
/// mount, wipes every key and secret and exits, and this returns once it has exited, as the
/// full tool does. A stale mount, a daemon that does not answer, or one of another version is
/// the full tool's to handle (it detaches the mount itself).
struct DaemonUnmount {
    var mountpoint: String?
    var store: String?

    init?(arguments: ArraySlice<String>) {
        guard arguments.first == "unmount" else { return nil }
        var rest = arguments.dropFirst()
        while let argument = rest.popFirst() {
            if argument == "--store" {
                guard store == nil, let value = rest.popFirst(), !value.hasPrefix("-") else { return nil }
                store = value
            } else {
                guard mountpoint == nil, !argument.hasPrefix("-") else { return nil }
                mountpoint = argument
            }
        }
    }

    func run() {
        // A mountpoint names its store through the mount table, whatever --store says.
        let canonicalMountpoint = mountpoint.map(MountRegistry.canonicalPath)
        let path: String
        if let canonicalMountpoint {
            guard let entry = MountTable.keychainfsMount(at: canonicalMountpoint) else { return }
            path = entry.source
        } else {
            path = KeychainLocations.store(store)
        }
        guard access(path, F_OK) == 0,
              let (keychain, record) = try? DaemonLocator.daemon(forStore: path),
              record.mountpoint.matches(canonicalMountpoint) else { return }
        do {
            try keychain.unmount()
        } catch let error as KeychainError {
            fail(error)
        } catch {
            return
        }
        do {
            try ProcessState.awaitDaemonExit(record.pid, note: errorLine)
        } catch {
            fail(error)
        }
        exit(0)
    }
}

/// One line on standard error and the error's exit status, as the full tool reports it.
func fail(_ error: KeychainError) -> Never {
    errorLine(error.description)
    exit(error.exitCode)
}

/// "keychainfs: TEXT" on standard error.
func errorLine(_ text: String) {
    let line = "keychainfs: \(text)\n"
    line.utf8CString.withUnsafeBytes { writeAll(UnsafeRawBufferPointer(rebasing: $0.dropLast()), to: 2) }
}

func writeAll(_ raw: UnsafeRawBufferPointer, to fd: Int32) {
    var offset = 0
    while offset < raw.count {
        let n = write(fd, raw.baseAddress! + offset, raw.count - offset)
        if n < 0 { if errno == EINTR { continue }; return }
        offset += n
    }
}

/// The full command-line tool, which this binary becomes for every other command.
enum FullTool {
    static let name = "keychainfs-full"

    /// The arguments go as the kernel gave them, bytes and all (`CommandArguments`); argv[0]
    /// becomes this binary's real path, which the whole tool writes into the systemd unit it
    /// installs: the unit then runs `keychainfs`, not the tool behind it.
    static func exec() -> Never {
        let own = ownPath()
        let directory = parent(of: own)
        let candidates = [directory + "/" + name, directory + "/../libexec/keychainfs/" + name]
        let argv = [strdup(own)] + (1..<max(1, Int(CommandLine.argc))).map { CommandLine.unsafeArgv[$0] } + [nil]
        // Every library of the full tool (and of the daemon it starts) binds its symbols at
        // start, not lazily: the loader's lazy resolver saves the vector registers on the stack
        // at each first call, and a copy of a secret may just have gone through them. Its own
        // `-z now` covers only the executable's references; this covers libc's and the rest.
        setenv("LD_BIND_NOW", "1", 1)
        for path in candidates where access(path, X_OK) == 0 {
            execv(path, argv)
        }
        let why = String(cString: strerror(errno))
        let line = "keychainfs: cannot run \(candidates[0]) or \(candidates[1]): \(why); "
            + "install keychainfs-full in one of them (scripts/run puts it in ~/.local/libexec/keychainfs)\n"
        line.utf8CString.withUnsafeBytes { _ = write(2, $0.baseAddress, $0.count - 1) }
        exit(KeychainError.io("").exitCode)
    }

    /// This executable, symlinks resolved, so that a link on PATH finds its full tool.
    private static func ownPath() -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/self/exe", &buffer, Int(PATH_MAX))
        guard n > 0 else { return "keychainfs" }
        return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static func parent(of path: String) -> String {
        guard path.utf8.contains(UInt8(ascii: "/")) else { return "." }
        return PathText.parent(path)
    }
}
