// Per-program access: which programs may use an item's secret (issue 17).
//
// What it protects against. Programs of the user that read secrets they were not meant to:
// file grabbers and info stealers, indexers, backup and sync tools, a compromised dependency
// using ordinary reads. An item with a non-empty access list is handed only to the programs
// on it, each pinned by its file's identity (device, inode, size, mtime, SHA-256), so a copy,
// a rebuilt or replaced binary, or another script under an allowed interpreter is another
// program. A caller is refused even when listed if it is being traced (TracerPid), if it
// started with LD_PRELOAD, LD_AUDIT or LD_LIBRARY_PATH, or if its executable was deleted or
// replaced since it started (those are refused outright, not prompted). A program rule
// (executable, or interpreter plus script) matches only a caller in the daemon's own user
// namespace: in one of its own, any process may repoint its /proc/PID/exe at any executable
// (PR_SET_MM_MAP's exe_fd; Tests/integration/forge_exe.c), and none returns to a parent
// namespace; a Flatpak rule still matches. That closes the direct route only: a child that
// shares the process's memory (CLONE_VM, not a thread) can do the same from a namespace of
// its own for the process, which stays in ours (forge_exe --sharer); no /proc file tells
// the daemon it happened. For the rest a human
// decides through a pinentry prompt; with no prompt, or none in time, the answer is no. Every
// refusal and answer is logged. The check is made when a program opens an item or asks the
// control socket; a handle opened while allowed keeps working, as with file permissions.
//
// What it does not protect against. Code of the same user that drives an allowed program:
// its arguments, its input, its environment beyond the loader variables (PYTHONPATH, a
// shell's rc files), ptrace where yama allows it and /proc/PID/mem of an allowed process
// (both need the same uid; a tracer attached after the check is not seen until the next
// request). The loader variables and the command line are read from the process's own
// memory, which its code can rewrite: a preloaded library can erase its LD_PRELOAD, and a
// hostile script run by an allowed interpreter can pose as the allowed script (rewriting
// its arguments, or changing directory under a relative script path). So an interpreter-
// plus-script rule keeps out other programs, not hostile code given to the interpreter. An
// exec is seen by the address space the process was identified in going away: an allowed
// program that has another process share that space (clone with CLONE_VM, not a thread)
// and then execs keeps its identity, by its own code's doing. A
// Flatpak rule trusts `/.flatpak-info`, which a sandbox cannot change but an unsandboxed
// process of the user can fake in a namespace of its own, as it can for
// xdg-desktop-portal. A D-Bus caller is the process that connected to the bus (all the bus
// vouches for): one that keeps its connection in a child and execs a listed program lends the
// child its identity. The same holds for every same-user design on Linux. To go further,
// run the program as its own systemd unit (another uid, or DynamicUser) or in a sandbox.
//
// What it cannot see. A process that is not dumpable (setuid programs, and any that made
// itself so) hides /proc/PID/exe and environ from the daemon of the user, so it cannot be
// identified and is refused by a non-empty list (an empty list identifies no one).

import CProcessPin
import Foundation
import Glibc
import KeychainErrors
import KeychainModel
import Synchronization

/// What a caller wants to do with an item: shown in the prompt and the log; Allow once is
/// granted per process, item and operation.
package enum AccessOperation: String, Sendable, Hashable, CaseIterable {
    case read
    case write
    /// Its attributes (label, comment, class, ...): the tree's xattrs, D-Bus Label and Attributes.
    case attributes
    case delete
    case rename
    case export

    var phrase: String {
        switch self {
        case .read: "read the secret of"
        case .write: "change the secret of"
        case .attributes: "change the attributes of"
        case .delete: "delete"
        case .rename: "rename or replace"
        case .export: "export"
        }
    }
}

/// The item a request names, as the gate knows it.
package struct AccessItem: Sendable, Hashable {
    /// Stable while the item exists (its row id): what Allow once is granted for.
    package var id: String
    /// Its path in the tree, for the prompt and the log.
    package var path: String
    package var key: ItemKey

    package init(id: String, path: String, key: ItemKey) {
        self.id = id
        self.path = path
        self.key = key
    }
}

/// The gate's answer.
package enum AccessOutcome: Sendable, Equatable {
    case allowed
    /// Allowed, and the user chose Always allow: the owner adds `rule` to the item's list
    /// (sealed with the item) before it answers.
    case allowedAlways(AccessRule)
    /// EACCES, or the CLI's access-denied exit code; the reason is for the log and stderr.
    case refused(String)
}

/// Decides per request whether the calling process may use an item, asking the user when a
/// prompt is configured. Its state: the processes it has identified (each with the grants of
/// Allow once) and one prompt slot.
///
/// How the gate calls it: at open() of an item's file, `decide(threadID:)` with the FUSE
/// request's pid (a thread id), `.read` or `.write` by the open flags, once per open, not per
/// read; for the control socket, `PinnedProcess.forSocketPeer` once per connection, then
/// `decide(process:)` per request. `.refused` is EACCES (and the CLI's access-denied exit
/// code); `.allowedAlways(rule)` asks the owner to add `rule` to the item's list, sealed.
///
/// Lock order: `promptSlot`, then `processes`, then `AccessLog`'s. Nothing slow is done under
/// `processes` (identifying a process reads /proc and may hash a binary; that happens outside
/// it), and no lock is held while a prompt waits: only the asking caller waits.
package final class AccessControl: Sendable {
    package let settings: AccessSettings
    private let log: AccessLog?
    private let logLine: (@Sendable (String) -> Void)?
    /// Taken under ServedKeychain's `state` (`allowsAtOnce`), so nothing here calls out while
    /// holding it; a process's `AddressSpaceSlot` is the one lock taken after it.
    private let processes = Mutex(ProcessTable())
    private let promptSlot = PromptSlot()
    /// Readable once the daemon ends (`endPrompts`): an open prompt stops waiting for its answer.
    private let promptsEnd = EndSignal()
    /// The same gate without a prompt (and with its own identity cache), for `prompting: false`.
    private let noPromptGate: AccessControl?
    private var noPrompt: AccessControl { noPromptGate ?? self }

    /// `log` receives every refusal and answer; `logLine` a one-line summary for the
    /// daemon's own log.
    package init(settings: AccessSettings, log: AccessLog?, logLine: (@Sendable (String) -> Void)? = nil) {
        self.settings = settings
        self.log = log
        self.logLine = logLine
        noPromptGate = settings.prompt == nil ? nil : AccessControl(settings: .none, log: log, logLine: logLine)
    }

    /// A FUSE request: the calling thread's id.
    ///
    /// `beforeWaiting` runs before anything that may wait (the FUSE binding passes its lead to
    /// another worker there, so that other requests go on): identifying a process not known
    /// yet (it reads `/proc` and may open and hash files), a prompt, a refusal (it writes the
    /// log), and the check of a known caller past its status (`recheck`: others may hold the
    /// lock of its memory map across a request to this mount; its executable may live on a
    /// slow file system). A known caller allowed by an executable rule whose file was hashed
    /// already (a process reading a guarded item again, the common case) passes it there
    /// only, once: passing the lead costs two context switches.
    package func decide(threadID: pid_t, item: @autoclosure () -> AccessItem, operation: AccessOperation, list: AccessList,
                        beforeWaiting: () -> Void = {}) -> AccessOutcome {
        // An empty list is any program, today's behaviour: nothing to identify, nothing to pay.
        if list.isAnyProgram { return .allowed }
        // The calling thread waits in its request until it is answered (even a fatal signal
        // does not end the wait of a request the daemon has read): its process cannot exit or
        // exec meanwhile, so it is identified with no check afterwards.
        return decide(item: item, operation: operation, list: list, beforeWaiting: beforeWaiting) { () throws(KeychainError) in
            try self.resolve(threadID: threadID, settled: true, beforeWaiting: beforeWaiting)
        }
    }

    /// A socket peer, pinned once per connection (`PinnedProcess.forSocketPeer`).
    package func decide(process: PinnedProcess, item: @autoclosure () -> AccessItem, operation: AccessOperation, list: AccessList,
                        beforeWaiting: () -> Void = {}) -> AccessOutcome {
        if list.isAnyProgram { return .allowed }
        return decide(item: item, operation: operation, list: list, beforeWaiting: beforeWaiting) { () throws(KeychainError) in
            try self.resolve(process: process, beforeWaiting: beforeWaiting)
        }
    }

    /// Any caller (`AccessCaller`): what the gate calls for every channel.
    /// `prompting` false: a caller not listed is refused at once, for a channel whose thread
    /// must not wait for the user (the D-Bus thread serves every client). `beforeWaiting`: as
    /// for `decide(threadID:)`.
    package func decide(_ caller: AccessCaller, item: @autoclosure () -> AccessItem, operation: AccessOperation, list: AccessList,
                        prompting: Bool = true, beforeWaiting: () -> Void = {}) -> AccessOutcome {
        if list.isAnyProgram { return .allowed }
        if !prompting { return noPrompt.decide(caller, item: item(), operation: operation, list: list, beforeWaiting: beforeWaiting) }
        switch caller {
        case .thread(let tid):
            return decide(threadID: tid, item: item(), operation: operation, list: list, beforeWaiting: beforeWaiting)
        case .process(let process):
            return decide(process: process, item: item(), operation: operation, list: list, beforeWaiting: beforeWaiting)
        case .peer(let peer):
            beforeWaiting()
            return decide(item: item, operation: operation, list: list) { () throws(KeychainError) -> Resolved in
                // Identified at accept; the peer may be non-dumpable now, which hides its
                // executable and layout, but not its status: a tracer is still seen. The
                // pidfd says the pid is still that process.
                guard peer.entry.pin.isAlive else { throw .io("process \(peer.entry.pin.pid) exited") }
                guard peer.entry.runsIdentifiedImageAsPeer else {
                    throw .io("process \(peer.entry.pin.pid) runs another program than the one that connected")
                }
                let status = ProcStatus(try ProcFile.read("/proc/\(peer.entry.pin.pid)/status"))
                guard peer.entry.pin.isAlive, let tracer = status.tracerPID else { throw .io("process \(peer.entry.pin.pid) exited") }
                return Resolved(entry: peer.entry, tracer: tracer == 0 ? nil : tracer)
            }
        case .unidentified(let why):
            beforeWaiting()
            return decide(item: item, operation: operation, list: list) { () throws(KeychainError) -> Resolved in throw .io(why) }
        }
    }

    /// A control-socket peer, identified as its connection is accepted: the client waits for
    /// the daemon's `identified` before it makes itself non-dumpable (which hides its /proc
    /// entries from the daemon). A peer that is already non-dumpable is the process identified
    /// by an earlier connection if that process still runs (its pidfd says so): a client that
    /// makes several calls hardens after its first. Only while it uses the address space it
    /// was identified in: the descriptors of its witness, opened while it was dumpable, are
    /// read without a permission check. An exec is seen, unless another process holds the old
    /// address space in use (`test_access_exec`'s holder): a hardened process's executable and
    /// layout cannot be read to tell.
    package func identifyPeer(_ socket: Int32) -> AccessCaller {
        let pin: PinnedProcess
        do { pin = try PinnedProcess.forSocketPeer(socket) } catch { return .unidentified("the peer: \(error.description)") }
        do throws(KeychainError) {
            let resolved = try resolve(process: pin)
            // The details too, now: once the client hardens they cannot be read. So for the
            // witness of its address space, which it cannot hide once opened.
            _ = resolved.entry.facts
            resolved.entry.armAddressSpace()
            return .peer(IdentifiedPeer(entry: resolved.entry))
        } catch {
            // Hardened since it was identified (by the mount or an earlier connection): the
            // process identified, if it has not exec'd since (test_access_socket).
            if let entry = processes.withLock({ $0.lookup(pin.pid) }), entry.pin.isAlive, entry.usesIdentifiedAddressSpace {
                return .peer(IdentifiedPeer(entry: entry))
            }
            return .unidentified(error.description)
        }
    }

    /// Whether a FUSE or D-Bus caller may use an item of `list` with nothing to wait for:
    /// `decide`'s common case alone, for a process checked within `recheckInterval`
    /// (`holdsAtOnce`: one 1-byte read of `pagemap`, no lock of the caller's, no log). Cheap
    /// enough to run under the served keychain's `state`, so that an allowed open is one hold
    /// of it, as an open of an unguarded item is; and on the D-Bus thread, which must not wait
    /// on one client. False says only "ask `decide`".
    package func allowsAtOnce(_ caller: AccessCaller, list: AccessList) -> Bool {
        if list.isAnyProgram { return true }
        let pid: pid_t
        switch caller {
        case .thread(let tid): pid = tid
        // The entry's address space still in use (`holdsAtOnce`) says its process still runs,
        // so the pid is not another's yet: the pinned process is that one.
        case .process(let process): pid = process.pid
        case .peer, .unidentified: return false
        }
        guard let entry = processes.withLock({ $0.lookup(pid) }), entry.pin.pid == pid else { return false }
        return entry.holdsAtOnce && entry.isListedWithNothingToAsk(list)
    }

    /// Who a thread's process is now (read through the cache): for tests and `status`.
    package func identify(threadID: pid_t) throws(KeychainError) -> CallerFacts { try resolve(threadID: threadID, settled: false).entry.facts }

    /// Forgets every identified process and every Allow once; for tests.
    package func forgetProcesses() { processes.withLock { $0.removeAll() } }

    package var cachedProcessCount: Int { processes.withLock { $0.entries.count } }

    // MARK: Deciding

    /// `item` is made only when needed (a refusal, a prompt, an Allow once): the common case
    /// does not build its path.
    private func decide(item makeItem: () -> AccessItem, operation: AccessOperation, list: AccessList,
                        beforeWaiting: () -> Void = {}, resolve: () throws(KeychainError) -> Resolved) -> AccessOutcome {
        let caller: Resolved
        do {
            caller = try resolve()
        } catch {
            beforeWaiting()
            return refuse(nil, makeItem(), operation, reason: "cannot identify the caller: \(error)", allow: nil)
        }
        // The common case, answered without waiting. (Read through the entry: a copy of its
        // facts was a dozen reference counts per open.)
        if caller.tracer == nil, caller.entry.isListedWithNothingToAsk(list) { return .allowed }
        // What every other decision needs; the rest (`facts`) only for a refusal, a prompt or a
        // script or Flatpak rule.
        let core = caller.entry.core
        beforeWaiting()
        let item = makeItem()
        var facts: CallerFacts { caller.entry.facts }
        if let tracer = caller.tracer {
            return refuse(facts, item, operation, reason: "it is being traced by \(Self.describe(tracer))", allow: nil)
        }
        if !core.loaderVariables.isEmpty {
            return refuse(facts, item, operation, reason: "it started with \(core.loaderVariables.joined(separator: ", ")) set", allow: nil)
        }
        if core.executableDeleted {
            return refuse(facts, item, operation, reason: "its executable \(core.executablePath) was deleted since it started", allow: nil)
        }
        if core.executableReplaced {
            return refuse(facts, item, operation, reason: "its executable \(core.executablePath) was replaced since it started", allow: nil)
        }
        if matches(caller.entry, list) || hasGrant(caller.entry, item, operation) { return .allowed }
        // An executable that cannot be hashed in time (huge, or on a slow file system) is
        // refused with that reason, not prompted for: no rule could be proposed for it.
        if !core.inAnotherUserNamespace, list.rules.contains(where: { if case .flatpak = $0.program { false } else { true } }) {
            do { _ = try core.executableIdentity() } catch {
                return refuse(facts, item, operation, reason: "it cannot be identified: \(error)", allow: nil)
            }
        }
        let reason = notListedReason(facts, list)
        let proposed = proposedRule(caller.entry)
        let allowCommand = proposed.map { AllowCommand.line(for: item.key, list: list, adding: $0.program) }
        guard let prompt = settings.prompt else {
            return refuse(facts, item, operation, reason: reason + "; no prompt is configured", allow: allowCommand)
        }
        return ask(prompt, caller.entry, item, operation, reason: reason, proposed: proposed, allowCommand: allowCommand)
    }

    private func matches(_ entry: CachedProcess, _ list: AccessList) -> Bool {
        let core = entry.core
        for rule in list.rules {
            switch rule.program {
            case .executable:
                // In another user namespace its executable is its own word
                // (`CallerFacts.inAnotherUserNamespace`); so for a script rule below.
                guard !core.inAnotherUserNamespace else { continue }
                if let exe = try? core.executableIdentity(), rule.executable == exe { return true }
            case .script:
                guard !core.inAnotherUserNamespace else { continue }
                if let exe = try? core.executableIdentity(), rule.executable == exe,
                   let script = entry.scriptIdentity(), script == rule.script { return true }
            case .flatpak(let id):
                if entry.facts.flatpakAppID.map({ $0.isSame(as: id) }) == true { return true }
            }
        }
        return false
    }

    private func hasGrant(_ entry: CachedProcess, _ item: AccessItem, _ operation: AccessOperation) -> Bool {
        processes.withLock { _ in entry.grants.contains(Grant(item: item.id, operation: operation)) }
    }

    private func notListedReason(_ facts: CallerFacts, _ list: AccessList) -> String {
        if facts.inAnotherUserNamespace {
            return "it runs in another user namespace, where a process can name any executable as its own: only a Flatpak rule can match it"
        }
        let changed = list.rules.contains { rule in
            switch rule.program {
            case .executable(let p), .script(let p, _):
                return rule.executable != (try? facts.executableIdentity()) && (p.isSame(as: facts.executablePath) || Self.sameFile(p, facts.image.key))
            case .flatpak: return false
            }
        }
        return changed ? "\(facts.executablePath) changed since it was allowed" : "it is not on the item's access list"
    }

    /// Whether a rule's path names, now, the file the caller runs (`/usr/bin/python3` is a
    /// link to the running `/usr/bin/python3.11`).
    private static func sameFile(_ path: String, _ identity: FileStatKey) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && UInt64(st.st_dev) == identity.device && UInt64(st.st_ino) == identity.inode
    }

    /// What Always allow adds: the Flatpak app, an interpreter with its script, or the
    /// executable, pinned as it runs now (not as its path reads later). Nothing for an
    /// interpreter whose script is not recognised (`python3 -u x.py`, `python3 -c ...`):
    /// the interpreter alone would allow every script.
    private func proposedRule(_ entry: CachedProcess) -> AccessRule? {
        let facts = entry.facts
        if let id = facts.flatpakAppID { return AccessRule(program: .flatpak(id), executable: nil, script: nil) }
        // An executable rule would never match it: its executable is its own word there.
        if facts.inAnotherUserNamespace { return nil }
        // No rule for an executable changed since the process was identified.
        guard let executable = try? facts.executableIdentity() else { return nil }
        if Self.isInterpreter(facts.executablePath) {
            guard let scriptPath = facts.scriptPath, let script = entry.scriptIdentity() else { return nil }
            return AccessRule(program: .script(interpreter: facts.executablePath, script: scriptPath),
                              executable: executable, script: script)
        }
        return AccessRule(program: .executable(facts.executablePath), executable: executable, script: nil)
    }

    /// Programs whose first argument is the code they run, so that allowing the program
    /// alone would allow every script.
    static func isInterpreter(_ path: String) -> Bool {
        let name = PathText.lastComponent(path)
        let base = String(name.prefix(while: { !$0.isNumber && $0 != "." }))
        return ["python", "perl", "ruby", "node", "nodejs", "sh", "bash", "dash", "zsh", "ksh", "mksh", "fish",
                "lua", "luajit", "php", "tclsh", "Rscript", "pwsh", "deno", "bun", "awk", "gawk", "mawk"].contains(base)
    }

    // MARK: Asking

    private func ask(_ prompt: Pinentry, _ entry: CachedProcess, _ item: AccessItem, _ operation: AccessOperation,
                     reason: String, proposed: AccessRule?, allowCommand: String?) -> AccessOutcome {
        let facts = entry.facts
        let deadline = ContinuousClock.now + prompt.timeout
        // Prompts come one at a time (two on one terminal would garble each other); a caller
        // queued behind one gives up at its own deadline, and one that finds the queue full is
        // refused at once.
        switch promptSlot.acquire(until: deadline) {
        case .acquired: break
        case .timedOut:
            return record(facts, item, operation, .timedOut, reason: reason + "; no answer in time (another prompt was open)", allow: allowCommand)
        case .queueFull:
            return record(facts, item, operation, .refused, reason: reason + "; refused at once: \(PromptSlot.maxWaiting) callers already wait for another prompt", allow: allowCommand)
        case .ended:
            return record(facts, item, operation, .refused, reason: reason + "; the mount is ending", allow: allowCommand)
        }
        defer { promptSlot.release() }
        // Asked and answered for this process while it waited.
        if hasGrant(entry, item, operation) { return .allowed }
        guard entry.pin.isAlive else { return .refused("the caller exited") }
        var timed = prompt
        timed.timeout = max(.milliseconds(1), deadline - ContinuousClock.now)
        timed.ending = promptsEnd.fd
        let text = Self.promptText(facts, item, operation, reason: reason, proposed: proposed)
        switch timed.ask(text, terminal: facts.terminal, terminalType: facts.terminalType) {
        case .allowOnce:
            processes.withLock { _ in _ = entry.grants.insert(Grant(item: item.id, operation: operation)) }
            _ = record(facts, item, operation, .allowedOnce, reason: reason, allow: allowCommand)
            return .allowed
        case .alwaysAllow:
            guard let proposed else { return record(facts, item, operation, .refused, reason: reason + "; nothing to add", allow: nil) }
            _ = record(facts, item, operation, .alwaysAllowed, reason: reason + "; added \(proposed.program)", allow: nil)
            return .allowedAlways(proposed)
        case .deny:
            return record(facts, item, operation, .denied, reason: reason, allow: allowCommand)
        case .timedOut:
            return record(facts, item, operation, .timedOut, reason: reason + "; no answer in time", allow: allowCommand)
        case .unavailable(let why):
            return record(facts, item, operation, .refused, reason: reason + "; the prompt failed: \(why)", allow: allowCommand)
        case .ended:
            return record(facts, item, operation, .refused, reason: reason + "; the mount is ending", allow: allowCommand)
        }
    }

    /// The daemon is ending (its FUSE session ended): the open prompt is closed and the callers
    /// queued behind it are refused, now and from now on, instead of each waiting out its
    /// timeout and holding the daemon (and, after a stop signal, the mount) meanwhile.
    package func endPrompts() {
        promptsEnd.signal()
        promptSlot.end()
    }

    static func promptText(_ facts: CallerFacts, _ item: AccessItem, _ operation: AccessOperation,
                           reason: String, proposed: AccessRule?) -> PromptText {
        var lines = [
            "\(Shown.text(facts.executablePath)) wants to \(operation.phrase) \(Shown.text(item.path)).",
            "",
            "Program: \(Shown.text(facts.executablePath))",
            "Command: \(Shown.commandLine(facts.commandLine))",
            "Process: \(facts.pid), parent \(Shown.text(facts.parent)), terminal \(facts.terminal ?? "none")",
            "Item: \(Shown.text(item.path)) (\(operation.rawValue))",
            "Why asked: \(Shown.text(reason))",
        ]
        if let proposed {
            lines.append("Always allow adds: \(Shown.text(proposed.program.description))")
        } else if facts.inAnotherUserNamespace {
            lines.append("Always allow is not offered: in another user namespace a process names its own executable, so no rule for it would mean anything.")
        } else {
            lines.append("Always allow is not offered: no script was recognised, and the interpreter alone would allow every script.")
        }
        lines.append("Allow once lasts while this process runs.")
        var text = PromptText(title: "keychainfs: a program asks for a secret", description: lines.joined(separator: "\n"),
                              prompt: "Allow?")
        if proposed == nil { text.alwaysAllow = nil }
        return text
    }

    // MARK: Logging

    private func refuse(_ facts: CallerFacts?, _ item: AccessItem, _ operation: AccessOperation,
                        reason: String, allow: String?) -> AccessOutcome {
        record(facts, item, operation, .refused, reason: reason, allow: allow)
    }

    /// Logs a decision; returns the refusal for every decision but the two allows.
    @discardableResult
    private func record(_ facts: CallerFacts?, _ item: AccessItem, _ operation: AccessOperation,
                        _ decision: AccessLogEntry.Decision, reason: String, allow: String?) -> AccessOutcome {
        let entry = AccessLogEntry(program: facts?.executablePath ?? "?", pid: facts?.pid ?? 0, commandLine: facts?.commandLine ?? [],
                                   item: item.path, operation: operation.rawValue, decision: decision, reason: reason,
                                   allowCommand: allow)
        logLine?(entry.summary)
        if let log {
            do { try log.append(entry) } catch { logLine?("access log: \(error)") }
        }
        switch decision {
        case .allowedOnce, .alwaysAllowed: return .allowed
        default: return .refused(reason)
        }
    }

    private static func describe(_ tracer: pid_t) -> String {
        let comm = (try? ProcFile.read("/proc/\(tracer)/comm", limit: 64)).map { String(decoding: $0, as: UTF8.self).trimmingSpaces }
        return "\(tracer) (\(Shown.text(comm ?? "?")))"
    }

    // MARK: The identity cache

    struct Resolved {
        var entry: CachedProcess
        /// The tracer of the asking thread or of its process, if any: read on every request,
        /// since a tracer can attach at any time.
        var tracer: pid_t?
    }

    private func resolve(threadID tid: pid_t, settled: Bool, beforeWaiting: () -> Void = {}) throws(KeychainError) -> Resolved {
        guard tid > 0 else { throw .invalidInput("no caller (pid \(tid))") }
        // A single-threaded caller (the common case: cat, head) is its own leader; its kept
        // status descriptor answers both "which process" and "traced?" in one read.
        if let entry = processes.withLock({ $0.lookup(tid) }),
           let check = entry.recheck(settled: settled, beforeWaiting: beforeWaiting), check.tgid == tid {
            return Resolved(entry: entry, tracer: check.tracer)
        }
        beforeWaiting()
        // A leader not seen before (a new process's first open): its status is read once, by
        // the check after it is identified, not also here.
        if let leader = PinnedProcess.leader(tid) { return try resolveNew(leader, threadTracer: nil, settled: settled) }
        let status = ProcStatus(try ProcFile.read("/proc/\(tid)/status"))
        guard let tgid = status.tgid else { throw .io("/proc/\(tid)/status has no Tgid") }
        let threadTracer = (status.tracerPID ?? 0) != 0 ? status.tracerPID : nil
        if let entry = processes.withLock({ $0.lookup(tgid) }), let check = entry.recheck(settled: settled), check.tgid == tgid {
            return Resolved(entry: entry, tracer: threadTracer ?? check.tracer)
        }
        return try resolveNew(PinnedProcess.forThread(tid, tgid: tgid), threadTracer: threadTracer, settled: settled)
    }

    /// A process not in the table: identified (outside the table's lock: it may hash a
    /// binary), and its tracer as identifying it read it. The caller has passed the lead.
    private func resolveNew(_ pin: PinnedProcess, threadTracer: pid_t?, settled: Bool) throws(KeychainError) -> Resolved {
        guard let fresh = try CallerWaits.shared.holding({ () throws(KeychainError) in try CachedProcess.identify(pin, settled: settled) }) else {
            throw .io(CallerWaits.busyReason)
        }
        // Two requests of one process may have identified it at once: they share one entry,
        // so that an Allow once given to either counts for both.
        // What the table drops is let go of after its lock, and off this request's path
        // (`DroppedProcesses`): closing the descriptors of a sweep of the dead (a hundred and
        // more processes) is neither done under the lock nor charged to the caller that made it.
        let (entry, dropped) = processes.withLock { $0.insert(fresh) }
        DroppedProcesses.shared.release(dropped)
        // Another request identified it at once: that entry's state is checked afresh, and
        // if it is of an image the process ran before, this one replaces it.
        if entry !== fresh {
            if let check = entry.recheck(settled: settled) { return Resolved(entry: entry, tracer: threadTracer ?? check.tracer) }
            let replaced = processes.withLock { $0.replace(fresh) }
            DroppedProcesses.shared.release(replaced)
        }
        return Resolved(entry: fresh, tracer: threadTracer ?? fresh.identifiedTracer)
    }

    private func resolve(process: PinnedProcess, beforeWaiting: () -> Void = {}) throws(KeychainError) -> Resolved {
        // The cached entry is this process only while both pins live: a pid names one
        // running process at a time.
        if process.isAlive, let entry = processes.withLock({ $0.lookup(process.pid) }),
           let check = entry.recheck(settled: false, beforeWaiting: beforeWaiting), check.tgid == process.pid {
            return Resolved(entry: entry, tracer: check.tracer)
        }
        beforeWaiting()
        return try resolveNew(process, threadTracer: nil, settled: false)
    }
}

/// Who asks the gate, for any channel.
package enum AccessCaller: Sendable {
    /// A FUSE request: the calling thread's id (fuse_req_ctx).
    case thread(pid_t)
    /// A pinned process (the CLI's own, with no daemon; D-Bus callers).
    case process(PinnedProcess)
    /// A control-socket peer identified at accept (`AccessControl.identifyPeer`).
    case peer(IdentifiedPeer)
    /// A caller that could not be identified: refused by every non-empty list.
    case unidentified(String)
}

/// This process as a caller of the gate, for a command that opens the store itself (no
/// daemon): identified as a control-socket peer is, while its /proc entries are still its
/// user's to read. Opening the store or reading a passphrase makes the process non-dumpable,
/// and then its own environ and memory map are root's: identified only then, a normal
/// user's CLI was refused every item whose list names it. So the CLI calls `identify()`
/// before anything hardens it.
package enum ThisProcess {
    package static func identify() { _ = caller }

    package static let caller: AccessCaller = {
        do throws(KeychainError) {
            let entry = try CachedProcess.identify(try PinnedProcess.forProcess(getpid()), settled: false)
            _ = entry.facts
            entry.armAddressSpace()
            return .peer(IdentifiedPeer(entry: entry))
        } catch {
            return .unidentified(error.description)
        }
    }()
}

/// A control-socket peer as identified when its connection was accepted.
package struct IdentifiedPeer: Sendable {
    let entry: CachedProcess
    package var pid: pid_t { entry.pin.pid }
    package var executablePath: String { entry.core.executablePath }
}

/// An Allow once: this item, this operation, for the life of the process that holds it.
struct Grant: Hashable {
    var item: String
    var operation: AccessOperation
}

/// A process identified once, with descriptors kept open so that a later request checks it
/// is still the same image (`recheck`): `/proc/PID/status` (tracer), the image witness
/// (`ImageWitness`: the same address space, or the same layout) and an `fstat` of the image's
/// file (unchanged, not deleted or replaced since); within `recheckInterval` of such a check,
/// the witness alone. A caller that is not blocked in its request also polls its pidfd (alive?).
// @unchecked Sendable: `facts` and the descriptors are set in init; `grants` and
// `script` are changed only under AccessControl's `processes` lock (or its own).
final class CachedProcess: @unchecked Sendable {
    let pin: PinnedProcess
    /// What every decision needs, read when the process is identified.
    let core: CallerFacts
    /// Nothing in `core` refuses the process (no loader variable, its executable neither
    /// deleted nor replaced, not in a user namespace of its own): the allowed open's test.
    let refusesNothing: Bool
    /// `core` with the details (`CallerFacts.withDetails`), read when first asked for.
    private let details = Mutex<CallerFacts?>(nil)
    /// The tracer as the identification read it (the status is read once for both).
    let identifiedTracer: pid_t?
    private let statusFD: Int32
    private let witness: ImageWitness
    let exeKey: FileStatKey
    /// The running image's file, opened through `/proc/PID/exe` at the first recheck (a
    /// process that opens a guarded item once, as `head` does, never pays for it), or -1. Its
    /// `fstat` is what a later request checks: the stat of `/proc/PID/exe` by path walks
    /// `/proc` and follows the link at every request, about five times the cost. While the
    /// witness holds, the process runs the same address space, whose executable is this file
    /// (only the process's own code can repoint it: PR_SET_MM_EXE_FILE, and only once its
    /// image is unmapped).
    private let exeFD = Atomic<Int32>(-1)
    /// Whether an `fstat` of `exeFD` is answered from memory (`kcfs_stat_is_local`): then a
    /// recheck never waits, and keeps the FUSE lead. Set before `exeFD` is published.
    private let exeStatIsLocal = Atomic<Bool>(false)
    /// The address-space witness, set at the process's first recheck
    /// (`imageHolds`): not at its identification, as most new callers (`head`) never ask again.
    private let addressSpace = AddressSpaceSlot()
    /// When a recheck last found the process untraced and its executable, on a local file
    /// system, unchanged (CLOCK_MONOTONIC ns; 0: not yet).
    private let checkedAt = Atomic<UInt64>(0)
    /// How long such a recheck is taken as still true, while the witness holds. The status
    /// costs the kernel about 6 µs (it renders all of it), a fifth of a whole read of a
    /// secret, and the `fstat` 0.5 µs; once in 10 ms they are nothing, and the witness (0.3 µs)
    /// is what a read of a known caller adds. A tracer that attaches to a process already
    /// identified is seen by the requests it makes from 10 ms later on. The check at an open
    /// never closed that window anyway: the secret leaves at the read, after the open, and a
    /// tracer attached in between reads it from the process (the threat model's "ptrace where
    /// yama allows it"). A program started under a tracer (`strace head`) is seen at its first
    /// request, always. An executable deleted or replaced since is seen 10 ms later too; the
    /// process runs the code it was allowed with all the same, as the running file cannot be
    /// written (ETXTBSY) and its address space is the one the witness holds; on a file system
    /// that does not answer `fstat` from memory (FUSE, NFS), where another machine may write
    /// it, every request checks it.
    static let recheckInterval: UInt64 = 10_000_000
    var grants: Set<Grant> = []
    var lastUse: UInt64 = 0
    private let script = Mutex<FileIdentity??>(nil)

    /// What tells a later request that the process still runs the image identified.
    private enum ImageWitness {
        /// Its `/proc/PID/environ`, held open: it reads the address space it was opened on,
        /// and once no process uses that space (the process exec'd or exited) it reads
        /// nothing. Taken when the process shares its address space with no parent (a vfork
        /// child shares its parent's, which outlives the child's exec) and has an environment.
        /// Its read takes the lock of the process's memory map, so the first recheck puts an
        /// `AddressSpaceWitness` in its place, which tells the same without it.
        /// A process that made a child share its address space and then exec'd would go
        /// unseen: that is the program's own code at work, as the threat model says.
        case addressSpace(Int32)
        /// Its `/proc/PID/stat`, held open, and what it read: the start time and the addresses
        /// an execve sets afresh.
        case layout(Int32, ProcStat)

        var descriptor: Int32 {
            switch self {
            case .addressSpace(let fd), .layout(let fd, _): fd
            }
        }

        /// Whether the process runs the image it ran when the witness was taken.
        var holds: Bool {
            switch self {
            case .addressSpace(let fd):
                var byte: UInt8 = 0
                return pread(fd, &byte, 1, 0) == 1
            case .layout(let fd, let layout):
                return recheckLayout(fd, layout)
            }
        }
    }

    /// Identifies a pinned process. A process caught in the middle of an execve (its new
    /// image not yet laid out) is read again; a request cannot come from one, but a test or
    /// a peer racing its own exec can. `settled`: the process cannot exec or exit while it is
    /// read, so nothing read needs checking afterwards (`AccessCaller.thread`).
    static func identify(_ pin: PinnedProcess, settled: Bool) throws(KeychainError) -> CachedProcess {
        for _ in 0..<20 {
            if let entry = try CachedProcess(pin: pin, settled: settled) { return entry }
            sched_yield()
        }
        throw .io("process \(pin.pid) keeps changing while it is identified")
    }

    /// Nil when the process was mid-exec or exec'd while it was read. Every new caller of a
    /// guarded item comes through here: `head` of a guarded item costs what this costs more
    /// than of an open one, and most of that is the kernel making `/proc` entries for a pid
    /// it has not shown before (and dropping them when the process exits). So it reads what
    /// a decision needs and no more, each file by its `/proc/PID/...` path (a directory
    /// descriptor would cost an open and a close more than the lookups it saves): `status`
    /// (tracer; kept open for the checks of later requests), a stat and a readlink of `exe`,
    /// the environment (kept open as the witness), the executable's path stat'ed to see that
    /// it still names the running file, its user namespace (an ioctl on the pidfd, an fstat
    /// and a close), and `stat` only where the witness must be the layout.
    private init?(pin: PinnedProcess, settled: Bool) throws(KeychainError) {
        self.pin = pin
        let pid = pin.pid
        let statusFD = kcfs_proc_open(pid, "status", O_RDONLY)
        guard statusFD >= 0 else { throw .io("/proc/\(pid)/status: \(String(cString: strerror(errno)))") }
        var statFD: Int32 = -1, environFD: Int32 = -1
        func fail(_ e: KeychainError) -> KeychainError {
            close(statusFD)
            if statFD >= 0 { close(statFD) }
            if environFD >= 0 { close(environFD) }
            return e
        }
        var exe = stat()
        guard kcfs_proc_stat(pid, "exe", &exe) == 0 else {
            let code = errno
            // The kernel shows a process's executable, environment and memory layout only to
            // a reader that may ptrace it: not to a daemon of the user when the process is not
            // dumpable (setuid, or one of ours that made itself so) or another user's.
            if code == EACCES || code == EPERM {
                throw fail(.io("process \(pid) hides its executable from the daemon (it is not dumpable, or not the user's)"))
            }
            if code == ENOENT, Self.leaderExited(pid) { throw fail(.io(Self.leaderExitedReason(pid))) }
            throw fail(.io("/proc/\(pid)/exe: \(String(cString: strerror(code)))"))
        }
        let foreignUserNamespace: Bool
        do { foreignUserNamespace = try CallerFacts.inAnotherUserNamespace(pin) } catch { throw fail(error) }
        // Status once, through the descriptor kept for the checks (tgid, parent, tracer).
        guard let status = ProcStatus.reread(statusFD) else { throw fail(.io("/proc/\(pid)/status is unreadable")) }
        guard let tracer = status.tracerPID else { throw fail(.io("/proc/\(pid)/status has no TracerPid")) }
        // A caller that is not settled is read between two looks at its layout, to see that
        // it did not exec meanwhile; so is one that shares its parent's address space (or
        // whose parent the kernel will not compare it with), whose witness is the layout.
        let needsLayout = !settled || kcfs_shares_memory(pid, status.parentPID ?? 0) != 0
        var layout: ProcStat?
        var buffer: [UInt8] = []
        if needsLayout {
            buffer = [UInt8](repeating: 0, count: 2048)
            statFD = kcfs_proc_open(pid, "stat", O_RDONLY)
            guard statFD >= 0 else { throw fail(.io("/proc/\(pid)/stat: \(String(cString: strerror(errno)))")) }
            let n = ProcFile.reread(statFD, into: &buffer)
            guard n > 0, let read = ProcStat(buffer, count: n) else { throw fail(.io("/proc/\(pid)/stat is unreadable")) }
            guard read.isSettled else { _ = fail(.io("")); return nil }
            layout = read
        }
        environFD = kcfs_proc_open(pid, "environ", O_RDONLY | O_NOFOLLOW)
        guard environFD >= 0 else { throw fail(.io("/proc/\(pid)/environ: \(String(cString: strerror(errno)))")) }
        let facts: CallerFacts, environmentSize: Int
        do {
            (facts, environmentSize) = try CallerFacts.read(pin, stat: layout, status: status, exe: exe, inAnotherUserNamespace: foreignUserNamespace,
                                                           environ: environFD, settled: settled)
        } catch { throw fail(error) }
        // The facts were read after the layout and the executable's stat: if the process
        // exec'd in between they would belong to another image than the one those pin.
        if !settled, let layout {
            var exeAfter = stat()
            guard recheckLayout(statFD, layout), kcfs_proc_stat(pid, "exe", &exeAfter) == 0,
                  FileStatKey(exeAfter) == FileStatKey(exe) else {
                _ = fail(.io(""))
                return nil
            }
        }
        if let layout, needsLayout || environmentSize == 0 {
            close(environFD)
            witness = .layout(statFD, layout)
        } else if environmentSize > 0 {
            witness = .addressSpace(environFD)
        } else {
            // An empty environment reads nothing either way: the layout, read now, is the
            // witness. The caller is settled, so it is the layout of the image just read, if
            // that image is laid out: a process inside an execve (one that opens its new
            // program's interpreter from the mount) is not, and has no environment yet.
            close(environFD)
            environFD = -1
            statFD = kcfs_proc_open(pid, "stat", O_RDONLY)
            guard statFD >= 0 else { throw fail(.io("/proc/\(pid)/stat: \(String(cString: strerror(errno)))")) }
            if buffer.isEmpty { buffer = [UInt8](repeating: 0, count: 2048) }
            let n = ProcFile.reread(statFD, into: &buffer)
            guard n > 0, let read = ProcStat(buffer, count: n) else { throw fail(.io("/proc/\(pid)/stat is unreadable")) }
            guard read.isSettled else { _ = fail(.io("")); return nil }
            witness = .layout(statFD, read)
        }
        self.statusFD = statusFD
        self.exeKey = FileStatKey(exe)
        self.core = facts
        self.refusesNothing = facts.loaderVariables.isEmpty && !facts.executableDeleted && !facts.executableReplaced
            && !facts.inAnotherUserNamespace
        self.identifiedTracer = tracer == 0 ? nil : tracer
    }

    /// Whether `pid`'s main thread has exited while others run (a zombie leader): the kernel
    /// then shows no executable, environment or memory map for the process, and the pid and
    /// pidfd that name it are those of the exited thread.
    static func leaderExited(_ pid: pid_t) -> Bool {
        guard let text = try? ProcFile.read("/proc/\(pid)/status", limit: 4096) else { return false }
        return String(decoding: text, as: UTF8.self).contains("\nState:\tZ")
    }

    /// Why such a process is refused even when listed. Its other threads' `/proc/PID/task/TID/exe`
    /// would name the executable, but the witnesses of an exec since (environ, the address
    /// space) and the pidfd are the exited leader's; an exec by another thread makes it the
    /// leader again, so the process could change program unseen between two requests.
    static func leaderExitedReason(_ pid: pid_t) -> String {
        "its main thread has exited (process \(pid) runs on in other threads): its executable cannot be read safely, so it is not identified"
    }

    /// All the facts: `core` and the details, read once. Read while the process still runs
    /// the image identified; if it does not, the details stay unknown ("?"), and a rule that
    /// needs them (Flatpak) does not match.
    /// Reading them may wait on the process (its command line takes its memory map's lock),
    /// so it counts among the callers held (`CallerWaits`); past them, `core` alone.
    var facts: CallerFacts {
        if let known = details.withLock({ $0 }) { return known }
        return CallerWaits.shared.holding(readFacts) ?? core
    }

    private func readFacts() -> CallerFacts {
        let proc = open("/proc/\(pin.pid)", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard proc >= 0 else { return core }
        defer { close(proc) }
        let full = core.withDetails(proc: proc)
        guard pin.isAlive, witness.holds else { return core }
        details.withLock { $0 = full }
        return full
    }

    deinit {
        close(witness.descriptor)
        close(statusFD)
        let exe = exeFD.load(ordering: .relaxed)
        if exe >= 0 && exe != core.image.descriptor { close(exe) }
    }

    /// Nil when the process is gone or runs another image now; else its tgid and tracer.
    /// Every later request of a known process comes through here. It reads the status (a
    /// tracer attached since; the one file that says so, and most of the cost), the witness
    /// and `/proc/PID/exe` with the user namespace (an exec since: `runsIdentifiedExecutable`)
    /// and an `fstat` of the image's file (deleted, replaced or changed since);
    /// within `recheckInterval` of a check that found nothing, the witness alone: one system
    /// call.
    ///
    /// `settled`: the caller is blocked in its request (a FUSE caller), so it runs; the pidfd
    /// is not polled. Should the pid be another process's now (the one identified exited and
    /// was reaped), the status and the witness, both opened on the one identified, read nothing.
    ///
    /// `beforeWaiting` runs before what may wait on what the caller and others do (the FUSE
    /// binding passes the lead to another worker there, so that other requests go on; passing
    /// it costs two context switches, a third of a read): the `fstat`, unless the executable's
    /// file system answers it from memory (`kcfs_stat_is_local`; a FUSE or NFS one may be slow),
    /// and the first look at the witness (`imageHolds`). Later looks take no lock, so that a
    /// process holding the caller's memory map (across a slow page fault: reading
    /// `/proc/PID/mem` at an address mapped from a slow file system, or from this mount)
    /// cannot stall the requests behind it. test_access.
    func recheck(settled: Bool, beforeWaiting: () -> Void = {}) -> (tgid: pid_t, tracer: pid_t?)? {
        guard settled || pin.isAlive else { return nil }
        let now = kcfs_monotonic_ns()
        if now &- checkedAt.load(ordering: .relaxed) < Self.recheckInterval {
            if let space = addressSpace.load() { return space.inUse ? (pin.pid, nil) : nil }
        }
        // TracerPid is near the top; the rest need not be copied out.
        guard let status = ProcStatus.reread(statusFD) else { return nil }
        // Not found is not "untraced": fail closed. The status was opened on this process:
        // any Tgid but its pid is another's.
        guard let tgid = status.tgid, tgid == pin.pid, let tracer = status.tracerPID else { return nil }
        // The lead is passed once at most.
        var passed = false
        func passLead() { if !passed { passed = true; beforeWaiting() } }
        // What may wait on the caller (the first look at its witness takes its memory map's
        // lock; its executable's file system may not answer) passes the lead first, and counts
        // among the callers held (`CallerWaits`): past them, the process is not known now, and
        // is refused.
        func check(mayWait: Bool, _ body: () -> Bool) -> Bool {
            guard mayWait else { return body() }
            passLead()
            return CallerWaits.shared.holding(body) ?? false
        }
        guard check(mayWait: addressSpace.load() == nil, imageHolds), runsIdentifiedExecutable() else { return nil }
        // Deleting or replacing the file drops its link count and so changes its ctime.
        let known = exeFD.load(ordering: .acquiring)
        func fileUnchanged() -> Bool {
            var exe = stat()
            guard let fd = known >= 0 ? known : imageDescriptor(), fstat(fd, &exe) == 0, FileStatKey(exe) == exeKey,
                  exe.st_nlink > 0 || core.executableDeleted else { return false }
            return true
        }
        guard check(mayWait: known < 0 || !exeStatIsLocal.load(ordering: .relaxed), fileUnchanged) else { return nil }
        if tracer == 0 && exeStatIsLocal.load(ordering: .relaxed) { checkedAt.store(now, ordering: .relaxed) }
        return (pin.pid, tracer == 0 ? nil : tracer)
    }

    /// Nothing refuses the process and an executable rule of `list` names its file, hashed
    /// already: the common case of a decision, which waits for nothing.
    func isListedWithNothingToAsk(_ list: AccessList) -> Bool {
        guard refusesNothing, let exe = core.image.knownIdentity else { return false }
        return list.rules.contains(where: { if case .executable = $0.program { $0.executable == exe } else { false } })
    }

    /// `recheck`'s first step alone, for a caller blocked in its request: a full check within
    /// `recheckInterval` found nothing, and the address space it saw is still in use. False
    /// when either is not known (then `recheck` looks further).
    var holdsAtOnce: Bool {
        guard kcfs_monotonic_ns() &- checkedAt.load(ordering: .relaxed) < Self.recheckInterval,
              let space = addressSpace.load() else { return false }
        return space.inUse
    }

    /// Whether the process runs the image identified: through `addressSpace` once it is set
    /// (its address space in use, and its layout unchanged), else through the witness (which
    /// may wait: `recheck` passes the lead first), and then `addressSpace` is set
    /// (`keepAddressSpace`).
    private func imageHolds() -> Bool {
        if let space = addressSpace.load() { return space.inUse && space.sameLayout }
        guard witness.holds else { return false }
        guard case .addressSpace = witness else { return true }
        return keepAddressSpace()
    }

    /// Opens the address-space witness and sets `addressSpace`, kept only if the image witness
    /// still holds after it (so it was opened on the same address space) and `alsoRequired`;
    /// false when the environment says the process is no longer the one identified.
    /// Held in use by another process, the first address space says nothing of an exec since:
    /// the environment the process shows now must be the one identified (the loader variables
    /// were read there). A program of another executable is seen apart from this
    /// (`runsIdentifiedExecutable`); this is the same one run again (test_access_exec).
    private func keepAddressSpace(alsoRequired: () -> Bool = { true }) -> Bool {
        let space = AddressSpaceWitness(pin.pid)
        let keep = space != nil && witness.holds && alsoRequired()
        if case .addressSpace(let environ) = witness, !environmentUnchanged(environ) { return false }
        if keep, let space { _ = addressSpace.storeIfNil(space) }
        return true
    }

    /// Whether `/proc/PID/environ` reads now as through `environ`, opened when the process
    /// was identified (on the address space it then ran). Read once per process: at its
    /// first recheck.
    private func environmentUnchanged(_ environ: Int32) -> Bool {
        let fd = kcfs_proc_open(pin.pid, "environ", O_RDONLY)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        guard let identified = ProcFile.preadAll(environ, limit: 16 << 20), let now = ProcFile.preadAll(fd, limit: 16 << 20) else { return false }
        return identified == now
    }

    /// For a process that has since made itself non-dumpable (its executable and layout hidden
    /// from the daemon): whether it still uses the address space identified, through the
    /// witness's descriptors, opened while it was dumpable.
    var usesIdentifiedAddressSpace: Bool {
        if let space = addressSpace.load() { return space.inUse }
        if case .addressSpace = witness { return witness.holds }
        return false
    }

    /// Opens the address-space witness now, for a control-socket peer, which may harden before
    /// its next connection (`AccessControl.identifyPeer`); kept only if the process still runs
    /// the image identified.
    func armAddressSpace() {
        guard addressSpace.load() == nil else { return }
        _ = keepAddressSpace(alsoRequired: { runsIdentifiedExecutable() })
    }

    /// Whether `/proc/PID/exe` still names the executable identified, from the user namespace
    /// the process was identified in. The witnesses say the address space identified is in
    /// use and laid out as it was, which another process (holding it) and the new program
    /// (PR_SET_MM_MAP sets its layout, unprivileged) can make true after an exec: the link is
    /// the current image's own, and only a process in a user namespace of its own can repoint
    /// it (PR_SET_MM_MAP's exe_fd), which it cannot leave (test_access_exec). A readlink and
    /// the namespace's inode through the pidfd: neither takes the memory map's lock nor asks
    /// the executable's file system. An exec of the same executable is not told apart here.
    private func runsIdentifiedExecutable(hiddenPasses: Bool = false) -> Bool {
        switch ProcFile.readLinkResult(of: pin.pid, "exe") {
        case .success(let link):
            // As bytes: a path canonically equivalent to the one identified is another file.
            guard link.isSame(as: core.executableDeleted ? core.executablePath + " (deleted)" : core.executablePath) else { return false }
        case .failure(let e):
            // Hidden (non-dumpable): so is its user namespace.
            return hiddenPasses && (e.code == EACCES || e.code == EPERM)
        }
        return core.inAnotherUserNamespace || (try? CallerFacts.inAnotherUserNamespace(pin)) == false
    }

    /// For a control-socket peer's request: whether it still runs the image identified at
    /// accept (a connection outlives an exec). A peer that has hardened since hides its
    /// executable: then its address space says it.
    var runsIdentifiedImageAsPeer: Bool { usesIdentifiedAddressSpace && runsIdentifiedExecutable(hiddenPasses: true) }

    /// The image's file: the one `ExecutableImage` holds, or one opened now through
    /// `/proc/PID/exe` and kept. Opened after the witness held, so it is the file of the image
    /// identified (a caller that is not settled may exec in between; its file then has
    /// another key, or is the same file).
    private func imageDescriptor() -> Int32? {
        let known = exeFD.load(ordering: .acquiring)
        if known >= 0 { return known }
        let held = core.image.descriptor
        let fd = held >= 0 ? held : kcfs_proc_open(pin.pid, "exe", O_RDONLY)
        guard fd >= 0 else { return nil }
        exeStatIsLocal.store(kcfs_stat_is_local(fd) == 1, ordering: .relaxed)
        let (stored, current) = exeFD.compareExchange(expected: -1, desired: fd, ordering: .acquiringAndReleasing)
        if stored { return fd }
        if fd != held { close(fd) }
        return current
    }

    /// The identity of the script the process names, read once (lazily: only a list with
    /// an interpreter-plus-script rule for its interpreter needs it).
    /// The script's file may be on a file system that does not answer: reading it counts among
    /// the callers held (`CallerWaits`); past them, nil (no script rule matches).
    func scriptIdentity() -> FileIdentity? {
        if let known = script.withLock({ $0 }) { return known }
        // `facts` first: it takes a place among the callers held of its own.
        let facts = self.facts
        return CallerWaits.shared.holding { readScriptIdentity(facts) } ?? nil
    }

    private func readScriptIdentity(_ facts: CallerFacts) -> FileIdentity? {
        let proc = open("/proc/\(pin.pid)", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard proc >= 0 else { return nil }
        defer { close(proc) }
        let identity = facts.scriptIdentity(proc: proc)
        // Read of this process only if it still runs (its pid is not yet anyone else's).
        guard pin.isAlive else { return nil }
        script.withLock { $0 = .some(identity) }
        return identity
    }
}

private func recheckLayout(_ fd: Int32, _ layout: ProcStat) -> Bool {
    var buffer = [UInt8](repeating: 0, count: 2048)
    let n = ProcFile.reread(fd, into: &buffer)
    guard n > 0, let now = ProcStat(buffer, count: n) else { return false }
    return now.startTime == layout.startTime && now.imageLayout == layout.imageLayout
}

/// A process's address space, told apart from the next without taking its lock. `pagemap`
/// says whether the address space it was opened on is still in use (`kcfs_address_space_in_use`:
/// a 1-byte read is refused, EINVAL, while it is, and reads nothing once no process uses it;
/// 0.3 µs, where a byte of `environ` costs 1.2 µs and waits for whoever holds the memory map's
/// lock). Another process can keep that address space in use after the process exec'd: any
/// process, of any user, reading its `/proc/PID/cmdline` into a page of a slow file system
/// holds it for as long as the page takes (`test_access_exec`). So the full check also reads
/// the layout (`/proc/PID/stat`: the addresses an execve sets afresh, which follow the
/// process's current address space) against the one read with `pagemap`.
final class AddressSpaceWitness: @unchecked Sendable {
    private let pagemap: Int32
    private let stat: Int32
    private let layout: ProcStat

    /// Nil when either file cannot be read as expected, or the process is mid-exec.
    init?(_ pid: pid_t) {
        pagemap = kcfs_proc_open(pid, "pagemap", O_RDONLY)
        stat = kcfs_proc_open(pid, "stat", O_RDONLY)
        var buffer = [UInt8](repeating: 0, count: 2048)
        let n = stat >= 0 ? ProcFile.reread(stat, into: &buffer) : -1
        guard pagemap >= 0, n > 0, let read = ProcStat(buffer, count: n), read.isSettled,
              kcfs_address_space_in_use(pagemap) == 1 else {
            if pagemap >= 0 { close(pagemap) }
            if stat >= 0 { close(stat) }
            return nil
        }
        layout = read
    }

    deinit {
        close(pagemap)
        close(stat)
    }

    var inUse: Bool { kcfs_address_space_in_use(pagemap) == 1 }
    var sameLayout: Bool { recheckLayout(stat, layout) }
}

/// `CachedProcess.addressSpace`: set once, then read at every request of its process.
/// `AtomicLazyReference`'s `load` ran unspecialized here (a generic metadata lookup and an
/// `Optional.map` per call: a fifth of what a cached guarded open added over a plain one,
/// `perf record`); a leaf lock costs less.
final class AddressSpaceSlot: Sendable {
    private let space = Mutex<AddressSpaceWitness?>(nil)

    func load() -> AddressSpaceWitness? { space.withLock { $0 } }

    /// Sets it unless it is set; returns the one kept.
    func storeIfNil(_ new: AddressSpaceWitness) -> AddressSpaceWitness {
        space.withLock { current in
            if let current { return current }
            current = new
            return new
        }
    }
}

/// The identified processes by pid. An entry whose process has gone or exec'd is dropped on
/// its next lookup. Each entry holds three descriptors (pidfd, status, witness), and three
/// more (the image's file, its pagemap and stat) once its process asks again, so the table is
/// small: past `capacity` the dead are swept, then the least recently used of those holding no
/// Allow once (a grant is the user's answer; it is not dropped to make room).
struct ProcessTable {
    static let capacity = 128
    private(set) var entries: [pid_t: CachedProcess] = [:]
    private var clock: UInt64 = 0

    mutating func lookup(_ pid: pid_t) -> CachedProcess? {
        guard let entry = entries[pid] else { return nil }
        clock += 1
        entry.lastUse = clock
        return entry
    }

    /// Inserts `entry`, or returns the entry already there for the same process running the
    /// same file (identified by a concurrent request; the caller checks it is the same image:
    /// a pid names one running process at a time). `dropped`: the entries it took out, for the
    /// caller to let go of after the lock (each closes its descriptors as it goes).
    mutating func insert(_ entry: CachedProcess) -> (entry: CachedProcess, dropped: [CachedProcess]) {
        clock += 1
        if let existing = entries[entry.pin.pid], existing !== entry, existing.exeKey == entry.exeKey, existing.pin.isAlive {
            existing.lastUse = clock
            return (existing, [])
        }
        // A process seen again after an exec starts with no grants: it is another program.
        return (entry, replace(entry))
    }

    /// Puts `entry` in place of whatever the table holds for its pid; returns what it took out.
    mutating func replace(_ entry: CachedProcess) -> [CachedProcess] {
        clock += 1
        entry.lastUse = clock
        var dropped: [CachedProcess] = []
        if let earlier = entries.updateValue(entry, forKey: entry.pin.pid) { dropped.append(earlier) }
        evictBeyondCapacity(into: &dropped)
        return dropped
    }

    private mutating func evictBeyondCapacity(into dropped: inout [CachedProcess]) {
        guard entries.count > Self.capacity else { return }
        for pid in entries.filter({ !$0.value.pin.isAlive }).keys {
            if let gone = entries.removeValue(forKey: pid) { dropped.append(gone) }
        }
        while entries.count > Self.capacity,
              let oldest = entries.filter({ $0.value.grants.isEmpty }).min(by: { $0.value.lastUse < $1.value.lastUse }) {
            if let gone = entries.removeValue(forKey: oldest.key) { dropped.append(gone) }
        }
    }

    mutating func removeAll() { entries.removeAll() }
}

/// Lets go of the processes the table dropped (nearly all of them exited) on a thread of its
/// own in the idle scheduling class, instead of on the request that made room. Each holds
/// three descriptors or more of `/proc` and pidfs files, and closing those of a process that
/// has exited frees what the kernel made for it (its `/proc` inodes and dentries, its pidfs
/// inode, its memory map's last reference): about 9 µs a process (measured in C on fresh
/// processes, kernel 6.18), 128 of them at once every 128 new callers. The thread runs when
/// its CPU has nothing else to do, so the work leaves the callers' path even when the daemon
/// and its callers share one CPU. At most `limit` processes wait (their descriptors count
/// against RLIMIT_NOFILE, beside the table's own); past it, the caller lets go of them itself,
/// as before.
final class DroppedProcesses: @unchecked Sendable {
    static let shared = DroppedProcesses()
    static let limit = ProcessTable.capacity

    // Guards `pending`, `releasing` and `started`; a leaf, taken with no other lock held
    // (the table's is let go of first), and nothing is released under it.
    private let condition = NSCondition()
    private var pending: [CachedProcess] = []
    private var releasing = false
    private var started = false

    /// Takes `dropped` over (the caller lets go of its own references after this returns).
    func release(_ dropped: [CachedProcess]) {
        guard !dropped.isEmpty else { return }
        condition.lock()
        let queued = pending.count + dropped.count <= Self.limit
        if queued {
            pending += dropped
            if !started {
                started = true
                Thread.detachNewThread { [self] in run() }
            }
            condition.signal()
        }
        condition.unlock()
        // Not queued: released here, after the lock, when the caller's array goes.
        withExtendedLifetime(dropped) {}
    }

    /// For tests: no process waits to be let go of, nor is being let go of.
    var isIdle: Bool {
        condition.lock()
        defer { condition.unlock() }
        return pending.isEmpty && !releasing
    }

    private func run() {
        // Should the class be refused, the thread still takes the work off the callers' path.
        _ = kcfs_idle_thread("kcfs-dropped")
        while true {
            condition.lock()
            while pending.isEmpty { condition.wait() }
            var batch: [CachedProcess] = []
            swap(&batch, &pending)
            releasing = true
            condition.unlock()
            // Each entry's deinit closes its descriptors, here, with no lock held.
            batch.removeAll()
            condition.lock()
            releasing = false
            condition.unlock()
        }
    }
}

/// Callers that hold the thread serving them on something they may make slow: identifying a
/// new caller (its `/proc` files, a stat and an open of its executable: a caller can make
/// them wait, with its executable on a file system that does not answer, or its memory map's
/// lock held across a fault on one) and waiting for its executable's hash (`DigestJobs`).
/// Those threads serve everyone (the mount's 10 workers, the control socket's 6), so at most
/// `max` such callers at once; past it, a new caller is refused at once (and logged), and the
/// threads left serve the rest. Two atomic operations per new caller; none for a known one.
enum CallerWaits {
    /// With the prompt's five (`PromptSlot`), 9 of the mount's 10 workers at most.
    static let max = 4
    static let shared = HolderLimit(max: max)

    static var busyReason: String {
        "\(max) other callers are being identified or wait for their executables to be hashed (executables on a slow file system?)"
    }
}

/// At most `max` holders at once, counted without a lock: past it, `enter` says no at once
/// (the caller is refused or served otherwise, never queued).
package final class HolderLimit: Sendable {
    package let max: Int
    private let held = Atomic<Int>(0)

    package init(max: Int) { self.max = max }

    /// Nil when `max` are held already. The hold is given back with `end()`, once.
    package func enter() -> Hold? {
        var n = held.load(ordering: .relaxed)
        while n < max {
            let (exchanged, current) = held.compareExchange(expected: n, desired: n + 1, ordering: .acquiringAndReleasing)
            if exchanged { return Hold(limit: self) }
            n = current
        }
        return nil
    }

    /// `body`'s result while holding a place, or nil when `max` are held already.
    package func holding<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T? {
        guard let hold = enter() else { return nil }
        defer { hold.end() }
        return try body()
    }

    package struct Hold: Sendable {
        fileprivate let limit: HolderLimit
        package func end() { limit.held.subtract(1, ordering: .releasing) }
    }
}

/// A value one thread delivers and another waits for, with a deadline: the waiter may give up,
/// and the deliverer still finishes (what it delivers then goes unread).
package final class OneShot<T: Sendable>: @unchecked Sendable {
    // @unchecked Sendable: `value` is a Mutex; DispatchSemaphore is thread-safe.
    private let value = Mutex<T?>(nil)
    private let done = DispatchSemaphore(value: 0)

    package init() {}

    package func deliver(_ v: T) {
        value.withLock { $0 = v }
        done.signal()
    }

    /// The value, or nil when none came within `seconds`.
    package func wait(seconds: Double) -> T? {
        guard done.wait(timeout: .now() + seconds) == .success else { return nil }
        return value.withLock { $0 }
    }
}

/// One prompt at a time, waited for with a deadline (pthread condition, which
/// `Synchronization.Mutex` lacks). Only callers that need a prompt ever wait here.
final class PromptSlot: @unchecked Sendable {
    private let condition = NSCondition()
    private var busy = false
    private var waiting = 0

    /// Callers queued behind the open prompt, at most. Each waits on the thread that asked,
    /// and the FUSE loop has 10 workers (`KCFS_MAX_WORKERS`): ten processes asking at once
    /// held every one of them, and the mount stopped answering everyone else until the
    /// prompts timed out. With one prompting and four queued, five always remain.
    static let maxWaiting = 4

    private var ended = false

    enum Acquired { case acquired, timedOut, queueFull, ended }

    func acquire(until deadline: ContinuousClock.Instant) -> Acquired {
        condition.lock()
        defer { condition.unlock() }
        if ended { return .ended }
        if busy && waiting >= Self.maxWaiting { return .queueFull }
        waiting += 1
        defer { waiting -= 1 }
        while busy {
            if ended { return .ended }
            let left = deadline - ContinuousClock.now
            guard left > .zero else { return .timedOut }
            let seconds = Double(left.components.seconds) + Double(left.components.attoseconds) / 1e18
            _ = condition.wait(until: Date(timeIntervalSinceNow: seconds))
        }
        busy = true
        return .acquired
    }

    func release() {
        condition.lock()
        busy = false
        condition.signal()
        condition.unlock()
    }

    func end() {
        condition.lock()
        ended = true
        condition.broadcast()
        condition.unlock()
    }
}

/// A descriptor that becomes readable, for good, once `signal` is called: a prompt's wait
/// polls it beside the pinentry's socket.
final class EndSignal: Sendable {
    /// The read end of a pipe (-1 if none could be made: prompts then end at their timeout).
    let fd: Int32
    private let writeEnd: Int32

    init() {
        var fds: [Int32] = [-1, -1]
        // Made with the owner, before any pinentry is spawned, so `pipe` then FD_CLOEXEC is
        // not raced by a spawn.
        if pipe(&fds) == 0 {
            for f in fds { _ = fcntl(f, F_SETFD, FD_CLOEXEC) }
            (fd, writeEnd) = (fds[0], fds[1])
        } else {
            (fd, writeEnd) = (-1, -1)
        }
    }

    func signal() {
        guard writeEnd >= 0 else { return }
        var b: UInt8 = 1
        _ = write(writeEnd, &b, 1)
    }

    deinit {
        if fd >= 0 { close(fd) }
        if writeEnd >= 0 { close(writeEnd) }
    }
}
