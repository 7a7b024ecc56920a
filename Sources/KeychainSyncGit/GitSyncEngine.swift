import Foundation
import KeychainErrors

/// The git transport of a sync folder (issue 20): the folder is a git work tree, and one
/// exchange commits what this device wrote, fetches and merges the remote's branch, lets the
/// keychain merge what arrived, commits again and pushes.
///
/// Each device writes only its own directory, so a git merge never meets two changes to one
/// file from two devices. A conflict in this device's own directory means the remote serves
/// another version of it (an old tree served again, or a forged one) while this device wrote
/// on: this device's version stands. Any other conflict means someone wrote where no device
/// does, and the exchange stops (merge aborted, nothing pushed) rather than pick a side. A push refused because another device
/// pushed first is answered by fetching and merging again, up to `rounds` times. Whether what
/// the remote serves is current is not git's question: a remote that serves an old tree
/// fast-forwards cleanly, and the keychain's merge, which checks each device's authenticated
/// manifest and its sequence number, is what refuses it.
package struct GitSyncEngine {
    /// The sync folder, which is (or becomes) the top of a git work tree.
    package let folder: String
    /// A URL, a path or a configured remote name: anything `git fetch` and `git push` take.
    package let remote: String
    /// How many times a refused push is retried after a new fetch and merge.
    package var rounds = 5
    /// This device's directory in the folder (`devices/<id>`), which only it writes.
    package var ownDirectory: String?
    /// The git executable, found on PATH.
    package var git = "git"

    /// The folder's .gitignore, written when it has none: keychainfs's temporaries
    /// (`.<name>.tmp-<pid>`) and Syncthing's.
    static let ignored = ".*.tmp-*\n.syncthing.*.tmp\n~syncthing~*.tmp\n.stfolder\n.stversions/\n"

    package init(folder: String, remote: String) {
        self.folder = folder
        self.remote = remote
    }

    /// What one exchange did.
    package struct Exchange: Equatable, Sendable {
        /// Whether this device had changes of its own to commit.
        package var committed = false
        /// Whether the remote's branch brought anything new.
        package var received = false
        /// Pushes refused because the remote had moved, each followed by a new fetch and merge.
        package var refusedPushes = 0
    }

    /// One exchange; `merge` is the keychain's merge (what `sync now` runs), called after each
    /// fetch and merge of the remote. Throws `KeychainError.syncEngine` for git's failures, and
    /// whatever `merge` throws (then nothing is pushed).
    @discardableResult
    package func exchange(merge: () throws -> Void) throws -> Exchange {
        var done = Exchange()
        let identity = try preparedRepository()
        let branch = try output(["symbolic-ref", "--quiet", "--short", "HEAD"], identity,
                                failure: "git: the sync folder's HEAD is detached; check out a branch")
        // What this device wrote since the last exchange, so that the merge below starts clean.
        if try commitAll(identity) { done.committed = true }
        for round in 0...rounds {
            let before = try head(identity)
            if try fetch(branch, identity) { try integrate(identity) }
            let arrived = try head(identity) != before
            done.received = done.received || arrived
            // The first round also lets the keychain write what changed here (without a daemon,
            // nothing has yet); later rounds only when the fetch brought something.
            if round == 0 || arrived { try merge() }
            if try commitAll(identity) { done.committed = true }
            if try push(branch, identity) { return done }
            done.refusedPushes += 1
        }
        throw KeychainError.syncEngine(
            "git: \(remote) refused the push \(rounds + 1) times (other devices kept pushing); "
                + "nothing was lost, run 'keychainfs sync git' again")
    }

    // MARK: - Steps

    /// Makes the folder the top of a git work tree (a new repository on branch main if it is
    /// not one, even inside another repository such as a home directory kept in git), and
    /// returns the environment that gives commits an author when git has none configured.
    private func preparedRepository() throws -> [String: String] {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: folder, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw KeychainError.syncEngine("git: the sync folder \(folder) does not exist")
        }
        let top = try? output(["rev-parse", "--show-toplevel"], [:], failure: "")
        if top.map(realPath) != realPath(folder) {
            _ = try run(["init", "--quiet", "--initial-branch=main"], [:], failure: "git init in \(folder) failed")
        }
        // A file is written as a dot-named temporary and renamed into place (by keychainfs, and
        // by Syncthing if both run): a commit taken meanwhile must not carry the half-written one.
        let ignore = folder + "/.gitignore"
        if !FileManager.default.fileExists(atPath: ignore) {
            // 0600 from its creation, as every file of the folder is.
            let fd = open(ignore, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
            let bytes = Array(Self.ignored.utf8)
            let written = fd >= 0 ? write(fd, bytes, bytes.count) : -1
            if fd >= 0 { close(fd) }
            guard written == bytes.count else { throw KeychainError.syncEngine("git: cannot write \(ignore)") }
        }
        // A machine with no git identity (a server) still syncs; the author says only that
        // keychainfs made the commit.
        var identity: [String: String] = [:]
        if (try? output(["config", "user.email"], [:], failure: "")) == nil
            || (try? output(["config", "user.name"], [:], failure: "")) == nil {
            identity = ["GIT_AUTHOR_NAME": "keychainfs", "GIT_AUTHOR_EMAIL": "keychainfs@localhost",
                        "GIT_COMMITTER_NAME": "keychainfs", "GIT_COMMITTER_EMAIL": "keychainfs@localhost"]
        }
        return identity
    }

    /// Commits every change in the folder; false when there was none.
    private func commitAll(_ identity: [String: String]) throws -> Bool {
        _ = try run(["add", "--all", "."], identity, failure: "git add failed")
        let staged = try run(["diff", "--cached", "--quiet"], identity, failure: "git diff failed", allowed: [0, 1])
        guard staged.status == 1 else { return false }
        _ = try run(["commit", "--quiet", "--no-verify", "-m", "keychainfs sync"], identity, failure: "git commit failed")
        return true
    }

    /// Fetches the remote's branch into FETCH_HEAD; false when the remote has no such branch yet.
    private func fetch(_ branch: String, _ identity: [String: String]) throws -> Bool {
        let listed = try run(["ls-remote", "--exit-code", "--heads", remote, "refs/heads/\(branch)"], identity,
                             failure: "git: cannot reach \(remote)", allowed: [0, 2])
        guard listed.status == 0 else { return false }
        _ = try run(["fetch", "--quiet", "--no-tags", remote, "refs/heads/\(branch)"], identity,
                    failure: "git: fetching \(branch) from \(remote) failed")
        return true
    }

    /// Merges FETCH_HEAD. A conflict only in this device's directory keeps the directory as
    /// HEAD has it; any other conflict is aborted, leaving the folder as it was.
    private func integrate(_ identity: [String: String]) throws {
        let merged = try run(["merge", "--quiet", "--no-edit", "--allow-unrelated-histories", "FETCH_HEAD"],
                             identity.merging(["GIT_MERGE_AUTOEDIT": "no"]) { $1 }, failure: "git merge failed",
                             allowed: [0, 1])
        guard merged.status != 0 else { return }
        let conflicted = (try? output(["diff", "--name-only", "--diff-filter=U"], identity, failure: "")) ?? ""
        let paths = conflicted.split(separator: "\n").map(String.init)
        if let own = ownDirectory, !paths.isEmpty, paths.allSatisfy({ $0.hasPrefix(own + "/") }) {
            // The whole directory as HEAD has it, the remote's other files there removed too:
            // otherwise every later exchange would meet the same conflict, and this device
            // could never push again. The keychain's merge then writes it as it is now.
            _ = try run(["restore", "--source=HEAD", "--staged", "--worktree", "--", own], identity,
                        failure: "git: keeping this device's directory in the merge failed")
            _ = try run(["commit", "--quiet", "--no-verify", "--no-edit"], identity, failure: "git commit failed")
            return
        }
        _ = try? run(["merge", "--abort"], identity, failure: "")
        throw KeychainError.syncEngine(
            "git: merging \(remote) conflicts in files no device should share ("
                + (conflicted.isEmpty ? merged.error : conflicted.split(separator: "\n").joined(separator: ", "))
                + "); the merge was aborted and nothing was pushed")
    }

    /// Pushes HEAD to the branch; false when the remote refused because it has moved on.
    private func push(_ branch: String, _ identity: [String: String]) throws -> Bool {
        let pushed = try run(["push", "--porcelain", "--quiet", remote, "HEAD:refs/heads/\(branch)"], identity,
                             failure: "", allowed: nil)
        if pushed.status == 0 { return true }
        // --porcelain marks a refused ref with "!". The remote has moved on when it says
        // "[rejected]" (fetch first, non-fast-forward), or "[remote rejected] (failed to update
        // ref)" when another device's push took the ref between our compare and our swap. Any
        // other refusal (a hook, permissions) and no answer at all are failures to report.
        let moved = pushed.output.split(separator: "\n").contains { line in
            line.hasPrefix("!") && (line.contains("[rejected]")
                || (line.contains("[remote rejected]") && line.contains("failed to update ref")))
        }
        if moved { return false }
        throw KeychainError.syncEngine("git: pushing to \(remote) failed: \(pushed.error.isEmpty ? pushed.output : pushed.error)")
    }

    private func head(_ identity: [String: String]) throws -> String? {
        try? output(["rev-parse", "--verify", "--quiet", "HEAD"], identity, failure: "")
    }

    // MARK: - Running git

    struct Result {
        var status: Int32
        var output: String
        var error: String
    }

    /// Runs git in the folder; its trimmed standard output, or throws `failure` with git's own
    /// message when it exits non-zero.
    private func output(_ arguments: [String], _ environment: [String: String], failure: String) throws -> String {
        try run(arguments, environment, failure: failure).output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Runs git in the folder. An exit status outside `allowed` (nil: any) throws `failure`
    /// with git's message. Standard input stays the terminal's, for an ssh key's passphrase.
    private func run(_ arguments: [String], _ environment: [String: String], failure: String,
                     allowed: Set<Int32>? = [0]) throws -> Result {
        let process = Process()
        // Under umask 077, whatever the user's: what git makes (`.git`, its objects, and the
        // other devices' directories and files a merge checks out) is private from its creation,
        // as the folder is (git keeps no modes but the executable bit).
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "umask 077 && exec \"$@\"", "sh", git, "-C", folder] + arguments
        var env = ProcessInfo.processInfo.environment
        // Messages in English (they are shown to the user, and --porcelain is parsed), and no
        // editor or pager waiting for a terminal.
        env["LC_ALL"] = "C"
        env["GIT_EDITOR"] = "true"
        env["GIT_PAGER"] = "cat"
        env.merge(environment) { $1 }
        process.environment = env
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        do { try process.run() } catch {
            throw KeychainError.syncEngine("git: cannot run \(git): \(error.localizedDescription)")
        }
        // Both pipes are drained at once, so that a chatty stderr cannot stall the child.
        let errorData = LockedBox(Data())
        let reading = DispatchGroup()
        DispatchQueue.global().async(group: reading) { errorData.value = err.fileHandleForReading.readDataToEndOfFile() }
        let outputData = out.fileHandleForReading.readDataToEndOfFile()
        reading.wait()
        process.waitUntilExit()
        let result = Result(status: process.terminationStatus, output: String(decoding: outputData, as: UTF8.self),
                            error: String(decoding: errorData.value, as: UTF8.self)
                                .trimmingCharacters(in: .whitespacesAndNewlines))
        if let allowed, !allowed.contains(result.status) {
            throw KeychainError.syncEngine(failure + (result.error.isEmpty ? "" : ": \(result.error)"))
        }
        return result
    }

    private func realPath(_ path: String) -> String {
        URL(fileURLWithPath: path).resolvingSymlinksInPath().standardizedFileURL.path
    }
}

/// A value handed from the thread that reads git's stderr to the one that waits for it.
private final class LockedBox<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}
