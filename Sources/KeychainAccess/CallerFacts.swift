import CProcessPin
import Glibc
import KeychainErrors
import KeychainModel

/// Who a pinned process is, read once from `/proc` when it is first seen (and again after it
/// execs): its executable and that file's identity, its command line, what it started with.
/// In two parts: what every decision needs (`read`: the executable, its state, the loader
/// variables), read for every new process; and what only a script or Flatpak rule, a prompt
/// or the log needs (`withDetails`: command line, working directory, parent, Flatpak app),
/// read when first needed. Every caller of a guarded item is a new process most of the time
/// (`head`, `cat`), so this is the cost of a guarded read.
package struct CallerFacts: Sendable {
    package var pid: pid_t
    package var parentPID: pid_t
    /// `PPID (comm)` of the parent, for the prompt and the log.
    package var parent: String
    /// In clock ticks after boot; 0 until the details are read when the identification
    /// did not read `/proc/PID/stat`.
    package var startTime: UInt64
    /// The executable's path as `/proc/PID/exe` names it, without the ` (deleted)` mark.
    package var executablePath: String
    /// The running image's file (opened through `/proc/PID/exe`, so the file it runs even
    /// when the path now names another), hashed only when a rule needs its identity
    /// (`executableIdentity`): most callers (`unmount`, `status`, items with no access list)
    /// never do, and a 28 MB static client took 20 ms to hash at every first connection.
    let image: ExecutableImage
    /// The running image's identity, SHA-256 included; fails when the file changed since the
    /// process was identified.
    package func executableIdentity() throws(KeychainError) -> FileIdentity { try image.identity() }
    package var executableDeleted: Bool
    /// The path now names a different file than the one running (replaced since it started).
    package var executableReplaced: Bool
    /// The process runs in another user namespace than the daemon's. There it may hold
    /// CAP_CHECKPOINT_RESTORE and repoint its own `/proc/PID/exe` at any executable it can
    /// open (prctl PR_SET_MM_MAP's exe_fd, once its image is unmapped), so its executable
    /// says nothing about the code it runs: no executable or script rule matches it. A
    /// process cannot leave a user namespace for its parent, so this is read once.
    package var inAnotherUserNamespace: Bool
    package var commandLine: [String]
    package var workingDirectory: String
    /// The controlling terminal (`/dev/pts/3`), if any.
    package var terminal: String?
    /// The names of the loader variables the process started with set (`LD_PRELOAD`, ...),
    /// which make it run code that is not its executable's.
    package var loaderVariables: [String]
    /// The caller's `TERM`, passed to a terminal pinentry.
    package var terminalType: String?
    /// What the process's first argument names when it is a regular file: the script of an
    /// interpreter. The path is absolute (resolved against the process's working directory).
    package var scriptPath: String?
    /// `flatpak:` app id from the caller's `/.flatpak-info`.
    package var flatpakAppID: String?

    /// The variables that change which code a dynamically linked program runs.
    package static let loaderVariableNames = ["LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH"]

    /// Reads the facts of a pinned process through `/proc/PID`. Fails (and the caller is
    /// refused) when they cannot be read or the process is gone. `stat` (if read: else the
    /// details read it) and `status` are the process's, read by the caller just before; `exe`
    /// is the stat of its `/proc/PID/exe`, `environ` its environment opened, read here.
    /// `settled`: the process cannot change meanwhile (a FUSE caller, blocked in its request
    /// until the daemon answers), so what is read needs no check that it still runs.
    static func read(_ process: PinnedProcess, stat: ProcStat?, status: ProcStatus, exe: stat, inAnotherUserNamespace: Bool,
                     environ: Int32, settled: Bool) throws(KeychainError) -> (facts: CallerFacts, environmentSize: Int) {
        let pid = process.pid
        guard status.tgid == pid else { throw .io("process \(pid) is not a thread group leader") }
        var link: String
        switch ProcFile.readLinkResult(of: pid, "exe") {
        case .success(let target): link = target
        case .failure(let e) where e.code == EACCES || e.code == EPERM:
            // The kernel shows a process's executable, environment and memory only to a
            // reader that may ptrace it: not to us when it is not dumpable (setuid, or a
            // process of ours that made itself so) or another user's.
            throw .io("process \(pid) hides its executable from the daemon (it is not dumpable, or not the user's)")
        case .failure(let e): throw .io("/proc/\(pid)/exe: \(String(cString: strerror(e.code)))")
        }
        // On bytes: a path ending in a combining mark would join it to the suffix's space.
        let suffix = " (deleted)".utf8
        let deleted = link.utf8.count >= suffix.count && link.utf8.suffix(suffix.count).elementsEqual(suffix)
        if deleted { link = String(link.utf8.dropLast(suffix.count))! }
        // A binary already hashed is known by its stat (`DigestCache`); another is held open
        // and hashed only when a rule needs its identity (`ExecutableImage`).
        let image = try ExecutableImage.of(pid: pid, stat: exe, shownAs: link)
        // The whole environment or nothing: a loader variable past a limit would go unseen.
        let (loader, term, environmentSize) = try ProcFile.scanEnvironment(environ, pid: pid, limit: 16 << 20)
        let facts = CallerFacts(
            pid: pid, parentPID: status.parentPID ?? 0,
            parent: "?", startTime: stat?.startTime ?? 0,
            executablePath: link, image: image, executableDeleted: deleted,
            executableReplaced: !deleted && Self.pathNamesAnotherFile(link, than: image.key, pid: pid),
            inAnotherUserNamespace: inAnotherUserNamespace,
            commandLine: [], workingDirectory: "?",
            terminal: stat.flatMap { Self.terminalName($0.terminal) }, loaderVariables: loader, terminalType: term,
            scriptPath: nil, flatpakAppID: nil)
        // Everything above counts only if it was read of the process the pidfd pins.
        guard settled || process.isAlive else { throw .io("process \(pid) exited while it was identified") }
        return (facts, environmentSize)
    }

    /// These facts with the rest read through `/proc/PID` (`proc`): command line, working
    /// directory, parent, script and Flatpak app. The caller checks afterwards that the
    /// process still runs the same image.
    func withDetails(proc: Int32) -> CallerFacts {
        var facts = self
        // The start time and terminal, if the identification did not read them.
        if startTime == 0, let text = try? ProcFile.read(in: proc, "stat", limit: 4096), let stat = ProcStat(text) {
            facts.startTime = stat.startTime
            facts.terminal = Self.terminalName(stat.terminal)
        }
        // A command line longer than we read is cut, its last word perhaps mid-path: it is
        // shown with a mark and no script is recognised in it.
        let cmdlineLimit = 1 << 16
        let cmdline = (try? ProcFile.read(in: proc, "cmdline", limit: cmdlineLimit + 1)) ?? []
        let truncated = cmdline.count > cmdlineLimit
        var argv = cmdline.prefix(cmdlineLimit).split(separator: 0, omittingEmptySubsequences: false)
            .map { String(decoding: $0, as: UTF8.self) }
        if truncated { argv[argv.count - 1] = "…" } else if argv.last == "" { argv.removeLast() }
        facts.commandLine = argv
        facts.workingDirectory = (try? ProcFile.readLink(at: proc, "cwd")) ?? "?"
        facts.parent = Self.describeParent(parentPID)
        facts.scriptPath = truncated ? nil : Self.scriptArgument(argv, cwd: facts.workingDirectory, interpreter: executablePath)
        facts.flatpakAppID = Self.flatpakAppID(proc: proc)
        return facts
    }

    /// The script an interpreter runs: the first argument that is no option, after only
    /// options that take no argument and supply no code (`bash -e x.sh`, `python3 -u x.py`,
    /// as a shebang line with an option runs it). Anything else before it (`-c CODE`, `-m`,
    /// `-W arg`) means no script is recognised, so no script rule can match.
    static func scriptArgument(_ argv: [String], cwd: String, interpreter: String) -> String? {
        guard let index = scriptIndex(argv, interpreter: interpreter) else { return nil }
        let arg = argv[index]
        return PathText.isAbsolute(arg) ? arg : (cwd.utf8.last == UInt8(ascii: "/") ? cwd : cwd + "/") + arg
    }

    static func scriptIndex(_ argv: [String], interpreter: String) -> Int? {
        let safe = Self.flagsWithoutCode(interpreter)
        var i = 1
        while i < argv.count, argv[i].utf8.first == UInt8(ascii: "-") {
            let letters = argv[i].dropFirst()
            guard !letters.isEmpty, letters.allSatisfy({ safe.contains($0) }) else { return nil }
            i += 1
        }
        guard i < argv.count, !argv[i].isEmpty else { return nil }
        return i
    }

    /// Single-letter options of common interpreters that take no argument and run no code
    /// given on the command line or on standard input.
    private static func flagsWithoutCode(_ interpreter: String) -> Set<Character> {
        let name = PathText.lastComponent(interpreter)
        let base = String(name.prefix(while: { !$0.isNumber && $0 != "." }))
        switch base {
        case "python": return Set("BbEIOqsSuv")
        case "sh", "bash", "dash", "zsh", "ksh", "mksh": return Set("aefhmnuvxBCEHPT")
        case "perl": return Set("wWXtTU")
        default: return []
        }
    }

    /// The identity of the script the caller names, opened the way the process would open it:
    /// relative to its working directory or its root. Small files only (a script, not `head`'s
    /// argument, a disk image, is what rules name).
    func scriptIdentity(proc: Int32) -> FileIdentity? {
        guard scriptPath != nil, let index = Self.scriptIndex(commandLine, interpreter: executablePath) else { return nil }
        let arg = commandLine[index]
        // On bytes, as the kernel reads the path (`PathText`).
        let absolute = PathText.isAbsolute(arg)
        let base = absolute ? "root" : "cwd"
        let relative = absolute ? String(arg.utf8.dropFirst())! : arg
        let dir = openat(proc, base, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dir >= 0 else { return nil }
        defer { close(dir) }
        return try? FileIdentity.of(openedAt: dir, relative.isEmpty ? "." : relative, shownAs: arg, sizeLimit: 16 << 20)
    }

    /// Whether the executable's path now names another file than the one running. Only
    /// checked for a process that shares our root: in a chroot or another mount namespace
    /// the path means something else here.
    private static func pathNamesAnotherFile(_ path: String, than identity: FileStatKey, pid: pid_t) -> Bool {
        // Here the path names the running file (the common case): not replaced, wherever the
        // process lives. Only when it does not is it asked whether the path means the same here.
        var now = stat()
        if stat(path, &now) == 0, UInt64(now.st_dev) == identity.device, UInt64(now.st_ino) == identity.inode,
           UInt64(now.st_size) == identity.size, Int64(now.st_mtim.tv_sec) == identity.modifiedSeconds,
           UInt32(now.st_mtim.tv_nsec) == identity.modifiedNanoseconds { return false }
        var theirs = stat()
        guard let ours = ownRoot, kcfs_proc_stat(pid, "root", &theirs) == 0,
              ours.device == theirs.st_dev, ours.inode == theirs.st_ino,
              let namespace = ownMountNamespace, (try? ProcFile.readLinkResult(of: pid, "ns/mnt").get()) == namespace else { return false }
        return true
    }

    /// The loader variables set (non-empty) and `TERM`, from `/proc/PID/environ`'s bytes
    /// (scanned in C, `kcfs_scan_environment`: an environment has dozens of entries, and
    /// every new process is identified).
    static func scanEnvironment(_ bytes: [UInt8]) -> (loader: [String], term: String?) {
        bytes.withUnsafeBufferPointer { b in
            var scan = kcfs_environment()
            kcfs_scan_environment(b.baseAddress, b.count, &scan)
            let term = scan.term_offset >= 0
                ? String(decoding: UnsafeBufferPointer(rebasing: b[scan.term_offset..<(scan.term_offset + scan.term_length)]), as: UTF8.self)
                : nil
            return (loaderNames(scan.loader), term)
        }
    }

    /// The names of the loader variables `kcfs_scan_environment` found set.
    static func loaderNames(_ bits: UInt32) -> [String] {
        guard bits != 0 else { return [] }
        return zip(loaderVariableNames, [KCFS_LD_PRELOAD, KCFS_LD_AUDIT, KCFS_LD_LIBRARY_PATH]).compactMap { bits & $1 != 0 ? $0 : nil }
    }

    /// The daemon's own root and mount namespace, read once: it changes neither.
    private static let ownRoot: (device: dev_t, inode: ino_t)? = {
        var st = stat()
        return stat("/", &st) == 0 ? (st.st_dev, st.st_ino) : nil
    }()
    private static let ownMountNamespace: String? = try? ProcFile.readLink("/proc/self/ns/mnt")

    /// Whether a pinned process runs in another user namespace than the daemon: the nsfs
    /// inode of its namespace, through its pidfd (`kcfs_user_namespace`), on the path of every
    /// new caller. Every thread of a process is in one namespace (only a single-threaded
    /// process may change it). Fails when it cannot be read (the caller is refused).
    static func inAnotherUserNamespace(_ process: PinnedProcess) throws(KeychainError) -> Bool {
        // Ours first: opening it is what makes theirs cheap (below).
        guard let ours = ownUserNamespace else { throw .io("the daemon's own /proc/self/ns/user is unreadable") }
        var theirs = stat()
        guard kcfs_user_namespace(process.pidfd, process.pid, &theirs) == 0 else {
            throw .io("the user namespace of process \(process.pid): \(String(cString: strerror(errno)))")
        }
        return theirs.st_dev != ours.device || theirs.st_ino != ours.inode
    }

    /// The daemon's own user namespace, read once: a process never returns to a parent one,
    /// and the daemon does not unshare one. Its file is held open for the daemon's life: the
    /// kernel keeps one nsfs inode per namespace only while something holds it, so with it
    /// held, the namespace of a caller in ours (nearly every caller) is handed out without
    /// making and freeing an inode: 2.6 against 4.8 µs a new caller (pidfd ioctl, `fstat`,
    /// `close`; measured in C on fresh processes, kernel 6.18).
    private static let ownUserNamespace: (device: dev_t, inode: ino_t)? = {
        let fd = open("/proc/self/ns/user", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            close(fd)
            return nil
        }
        return (st.st_dev, st.st_ino)
    }()

    private static func describeParent(_ ppid: pid_t) -> String {
        guard ppid > 0 else { return "none" }
        let comm = (try? ProcFile.read("/proc/\(ppid)/comm", limit: 64)).map { String(decoding: $0, as: UTF8.self).trimmingSpaces } ?? "?"
        return "\(ppid) (\(comm))"
    }

    /// `tty_nr` as a device name: Unix98 ptys (majors 136–143) and virtual consoles.
    static func terminalName(_ device: UInt64) -> String? {
        guard device != 0 else { return nil }
        let major = (device >> 8) & 0xfff, minor = (device & 0xff) | ((device >> 12) & 0xfff00)
        if (136...143).contains(major) { return "/dev/pts/\((major - 136) * 256 + minor)" }
        if major == 4 && minor < 64 { return "/dev/tty\(minor)" }
        if major == 5 && minor == 1 { return "/dev/console" }
        return "tty \(major):\(minor)"
    }

    /// The app id flatpak writes into every sandbox's `/.flatpak-info` (`[Application]`,
    /// `name=`), read through the caller's own root.
    private static func flatpakAppID(proc: Int32) -> String? {
        let root = openat(proc, "root", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard root >= 0 else { return nil }
        defer { close(root) }
        let fd = openat(root, ".flatpak-info", O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG,
              let text = try? ProcFile.readAll(fd, path: ".flatpak-info", limit: 1 << 16) else { return nil }
        return FlatpakInfo.applicationName(text)
    }
}

/// The keyfile flatpak puts at a sandbox's root.
enum FlatpakInfo {
    static func applicationName(_ text: [UInt8]) -> String? {
        var section = ""
        for raw in String(decoding: text, as: UTF8.self).split(separator: "\n") {
            let line = String(raw).trimmingSpaces
            if line.hasPrefix("[") && line.hasSuffix("]") { section = String(line.dropFirst().dropLast()); continue }
            guard section == "Application", line.hasPrefix("name=") else { continue }
            let name = String(line.dropFirst(5)).trimmingSpaces
            return AccessProgram.isValidAppID(name) ? name : nil
        }
        return nil
    }
}
