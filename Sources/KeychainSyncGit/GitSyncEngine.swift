import Foundation
import KeychainErrors

/// The git transport of a sync folder (issue 20): the folder is a git work tree, and one
/// exchange commits what this device wrote, fetches and merges the remote's branch, lets the
/// keychain merge what arrived, commits again and pushes.
///
/// Each device writes only its own directory, so a git merge never meets two changes to one
/// file from two devices. Whatever a merge does to this device's own directory (an old tree
/// served again, a forged one, the directory removed, made a file or a link), with a conflict
/// or without, this device's version stands, whole. A conflict in another device's directory (a
/// history the remote rewrote) takes the remote's copy, which the keychain's merge judges as
/// any. Any other conflict means someone wrote where no device does, and the exchange stops
/// (merge aborted, nothing pushed) rather than pick a side. A push refused because another
/// device pushed first is answered by fetching and merging again, up to `rounds` times. Whether
/// what the remote serves is current is not git's question: a remote that serves an old tree
/// fast-forwards cleanly, and the keychain's merge, which checks each device's authenticated
/// manifest and its sequence number, is what refuses it. What the remote can plant to steer git
/// itself is neutralised: in-tree attributes (line-ending or filter conversions that would
/// change sealed files as they are checked out) by the repository's own, which take precedence,
/// and in-tree ignore rules (which would keep this device's files out of its commits) by adding
/// its directory by force.
package struct GitSyncEngine {
    /// The sync folder, which is (or becomes) the top of a git work tree.
    package let folder: String
    /// A URL, a path or a configured remote name: anything `git fetch` and `git push` take.
    package let remote: String
    /// How many times a refused push is retried after a new fetch and merge.
    package var rounds = 5
    /// This device's directory in the folder (`devices/<id>`), which only it writes. When set,
    /// a commit takes only it and `sharedFiles`, never what a merge left elsewhere, and a merge
    /// conflict in another device's directory (`devices/<other>`, a history the remote
    /// rewrote) takes the remote's version: the keychain's merge judges it.
    package var ownDirectory: String?
    /// Files at the folder's top that a device may add (the sync key's envelope, by the
    /// device that made the folder), checked out as in git like the devices' files.
    package let sharedFiles: [String]
    /// The git executable, found on PATH.
    package var git = "git"

    /// The repository's own ignore rules (`.git/info/exclude`, never committed, so no remote
    /// can change them, and no `.gitignore` of the tree can conflict with them): keychainfs's
    /// temporaries (`.<name>.tmp-<pid>`) and Syncthing's.
    static let ignored = [".*.tmp-*", ".syncthing.*.tmp", "~syncthing~*.tmp", ".stfolder", ".stversions/"]
    /// The same temporaries as pathspecs, for adding this device's directory by force.
    static let temporaries = [".*.tmp-*", ".syncthing.*.tmp", "~syncthing~*.tmp"].map { ":(exclude,glob)**/\($0)" }

    /// The repository's own attributes (`.git/info/attributes`, which take precedence over any
    /// `.gitattributes` in the tree) for the folder's files: bytes, no conversion or filter at
    /// checkout, and no line merge (a conflict keeps one side's file, never conflict markers).
    /// Only these paths: a folder that is a linked work tree shares the file with the rest of
    /// its repository.
    var attributes: [String] { (["devices/**"] + sharedFiles).map { "\($0) -text -eol -ident -filter -working-tree-encoding -merge" } }

    package init(folder: String, remote: String, sharedFiles: [String]) {
        self.folder = folder
        self.remote = remote
        self.sharedFiles = sharedFiles
    }

    /// What one exchange did.
    package struct Exchange: Equatable, Sendable {
        /// Whether this device had changes of its own to commit.
        package var committed = false
        /// Whether the remote's branch brought anything new.
        package var received = false
        /// Pushes refused because the remote had moved, each followed by a new fetch and merge.
        package var refusedPushes = 0
        /// Whether a merge changed this device's own directory and it was put back as the
        /// device had committed it: what the keychain wrote there since is then older on disk
        /// than in its state, and its next merge writes it again (`SyncSession`'s "own
        /// directory was rolled back", expected here rather than a sign of a rolled-back remote).
        package var restoredOwnDirectory = false
    }

    /// One exchange; `merge` is the keychain's merge (what `sync now` runs), called after each
    /// fetch and merge of the remote. Throws `KeychainError.syncEngine` for git's failures, and
    /// whatever `merge` throws (then nothing is pushed).
    @discardableResult
    package func exchange(merge: () throws -> Void) throws -> Exchange {
        // git would take it as one of its options (`--upload-pack=...` runs a command).
        guard !remote.hasPrefix("-") else { throw KeychainError.invalidInput("a git remote cannot begin with '-': \(remote)") }
        var done = Exchange()
        let identity = try preparedRepository()
        try abortUnfinishedMerge(identity)
        let branch = try output(["symbolic-ref", "--quiet", "--short", "HEAD"], identity,
                                failure: "git: the sync folder's HEAD is detached; check out a branch")
        // What this device wrote since the last exchange, so that the merge below starts clean.
        if try commitAll(identity) { done.committed = true }
        for round in 0...rounds {
            let before = try head(identity)
            if try fetch(branch, identity), try integrate(identity, before: before) { done.restoredOwnDirectory = true }
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
            "git: \(shownRemote) refused the push \(rounds + 1) times (other devices kept pushing); "
                + "nothing was lost, run 'keychainfs sync git' again")
    }

    /// For `sync join` of a folder that is a clone (the top of a git work tree; nothing
    /// otherwise): the engine's ignore and attribute lines added, and the devices' files and
    /// the envelope checked out again, before the keychain reads the envelope, so that a
    /// `.gitattributes` the remote planted cannot have converted them at the clone.
    package func protectClone() throws {
        let top = try? output(["rev-parse", "--show-toplevel"], [:], failure: "")
        guard top.map(realPath) == realPath(folder) else { return }
        _ = try preparedRepository()
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
        // The common directory's: a linked work tree's own `info` is not read.
        let info = try output(["rev-parse", "--path-format=absolute", "--git-common-dir"], [:],
                              failure: "git: the sync folder's repository cannot be found") + "/info"
        // A file is written as a dot-named temporary and renamed into place (by keychainfs, and
        // by Syncthing if both run): a commit taken meanwhile must not carry the half-written one.
        try addInfo(info, "exclude", Self.ignored)
        if try addInfo(info, "attributes", attributes), try head([:]) != nil {
            // Files checked out before (a clone, as the README has it, is made before any
            // exchange) may have been converted by a `.gitattributes` of the tree: the other
            // devices' files and the envelope are checked out again, as they are in git.
            _ = try? run(["checkout", "HEAD", "--", "devices"] + (ownDirectory.map { [":(exclude)\($0)"] } ?? []), [:], failure: "")
            for name in sharedFiles { _ = try? run(["checkout", "HEAD", "--", name], [:], failure: "") }
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

    /// Adds `lines` to `info/NAME` where missing, at its end (later lines win), keeping the
    /// user's; 0600 from its creation, as every file of the folder is. True when it was written.
    @discardableResult
    private func addInfo(_ info: String, _ name: String, _ lines: [String]) throws -> Bool {
        let path = info + "/" + name
        let old = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        let have = Set(old.split(separator: "\n").map(String.init))
        let missing = lines.filter { !have.contains($0) }
        if missing.isEmpty { return false }
        let text = old + (old.isEmpty || old.hasSuffix("\n") ? "" : "\n") + missing.joined(separator: "\n") + "\n"
        if mkdir(info, 0o700) != 0 && errno != EEXIST { throw KeychainError.syncEngine("git: cannot make \(info)") }
        let temporary = info + "/." + name + ".tmp-\(getpid())"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o600)
        let bytes = Array(text.utf8)
        let written = fd >= 0 && fchmod(fd, 0o600) == 0 ? write(fd, bytes, bytes.count) : -1
        if fd >= 0 { close(fd) }
        guard written == bytes.count, rename(temporary, path) == 0 else {
            unlink(temporary)
            throw KeychainError.syncEngine("git: cannot write \(path)")
        }
        return true
    }

    /// A merge an earlier run left unfinished (killed between the merge and its commit or
    /// abort) is aborted: the next commit would otherwise conclude it with whatever it left.
    private func abortUnfinishedMerge(_ identity: [String: String]) throws {
        if (try? output(["rev-parse", "--quiet", "--verify", "MERGE_HEAD"], identity, failure: "")) != nil {
            _ = try run(["merge", "--abort"], identity, failure: "git: aborting the merge an earlier exchange left unfinished failed")
        }
        guard try output(["ls-files", "--unmerged"], identity, failure: "git ls-files failed").isEmpty else {
            throw KeychainError.syncEngine("git: the sync folder has unmerged files; resolve them or run 'git -C \(folder) reset --merge'")
        }
    }

    /// Commits this device's changes (every change in the folder when `ownDirectory` is not
    /// set); false when there was none.
    private func commitAll(_ identity: [String: String]) throws -> Bool {
        if let own = ownDirectory {
            // By force, but for the temporaries: a .gitignore the remote planted would keep
            // this device's files out of every commit, silently.
            let paths = try ([own] + sharedFiles).filter { try isPresent($0, identity) }
            if !paths.isEmpty {
                _ = try run(["add", "--all", "--force", "--"] + paths + Self.temporaries, identity, failure: "git add failed")
            }
        } else {
            _ = try run(["add", "--all", "."], identity, failure: "git add failed")
        }
        let staged = try run(["diff", "--cached", "--quiet"], identity, failure: "git diff failed", allowed: [0, 1])
        guard staged.status == 1 else { return false }
        _ = try run(["commit", "--quiet", "--no-verify", "-m", "keychainfs sync"], identity, failure: "git commit failed")
        return true
    }

    /// Fetches the remote's branch into FETCH_HEAD; false when the remote has no such branch yet.
    private func fetch(_ branch: String, _ identity: [String: String]) throws -> Bool {
        let listed = try run(["ls-remote", "--exit-code", "--heads", remote, "refs/heads/\(branch)"], identity,
                             failure: "git: cannot reach \(shownRemote)", allowed: [0, 2])
        guard listed.status == 0 else { return false }
        _ = try run(["fetch", "--quiet", "--no-tags", remote, "refs/heads/\(branch)"], identity,
                    failure: "git: fetching \(branch) from \(shownRemote) failed")
        return true
    }

    /// Merges FETCH_HEAD (by path alone: no rename detection, which would carry a file of this
    /// device's to wherever the remote moved its directory). This device's directory then stands
    /// as `before` had it, whatever the merge did there, with a conflict or without; another
    /// device's conflicted directory is taken as the remote has it; any other conflict (or a
    /// merge git refused to start) is aborted, leaving the folder as it was. True when this
    /// device's directory was put back.
    private func integrate(_ identity: [String: String], before: String?) throws -> Bool {
        let merged = try run(["-c", "merge.renames=false", "-c", "merge.directoryRenames=false",
                              "merge", "--quiet", "--no-edit", "--allow-unrelated-histories", "FETCH_HEAD"],
                             identity.merging(["GIT_MERGE_AUTOEDIT": "no"]) { $1 }, failure: "git merge failed",
                             allowed: [0, 1])
        if merged.status != 0 {
            // NUL-separated: git quotes a name with other bytes, which then matched nothing.
            let conflicted = (try? run(["diff", "--name-only", "-z", "--diff-filter=U"], identity, failure: ""))?.output ?? ""
            let paths = conflicted.split(separator: "\0").map(String.init)
            guard let own = ownDirectory, let before, !paths.isEmpty,
                  paths.allSatisfy({ isOwn($0, own) || deviceDirectory(of: $0) != nil }) else {
                if (try? output(["rev-parse", "--quiet", "--verify", "MERGE_HEAD"], identity, failure: "")) != nil {
                    _ = try run(["merge", "--abort"], identity, failure: "git: aborting a merge that conflicts failed")
                }
                throw KeychainError.syncEngine(
                    "git: merging \(shownRemote) conflicts in files no device should share ("
                        + (paths.isEmpty ? merged.error : paths.joined(separator: ", "))
                        + "); the merge was aborted and nothing was pushed")
            }
            // Otherwise every later exchange would meet the same conflict, and this device
            // could never push again. The keychain's merge then writes it as it is now, and
            // refuses another device's directory that the remote rolled back.
            for other in Set(paths.filter { !isOwn($0, own) }.compactMap(deviceDirectory)) {
                try putDirectory(other, as: "MERGE_HEAD", identity)
            }
            // Its own too, conflicted or not: a clean change there, kept by this merge, would be
            // in `before` from now on, and never put back.
            try putDirectory(own, as: before, identity)
            try putBackRemovedSharedFiles(before, identity)
            _ = try run(["commit", "--quiet", "--no-verify", "--no-edit"], identity, failure: "git commit failed")
            return true
        }
        guard let own = ownDirectory, let before else { return false }
        var putBack = try putBackRemovedSharedFiles(before, identity)
        var ownPutBack = false
        let parent = (own as NSString).deletingLastPathComponent
        let parentKept = parent.isEmpty || (try? output(["cat-file", "-t", "HEAD:\(parent)"], identity, failure: "")) == "tree"
        if try !parentKept
            || !output(["diff", "--name-only", before, "HEAD", "--", own, own + "~*"], identity, failure: "git diff failed").isEmpty {
            // A clean merge that changed it: the remote removed it, moved it, made it (or the
            // directory above it) a file or a link.
            try putDirectory(own, as: before, identity)
            putBack = true
            ownPutBack = true
        }
        guard putBack else { return false }
        _ = try run(["commit", "--quiet", "--no-verify", "-m", "keychainfs sync: this device's files as it wrote them"],
                    identity, failure: "git commit failed")
        return ownPutBack
    }

    /// Puts back the shared files (`sharedFiles`) `before` had and the merge removed: the sync
    /// key's envelope is written once, by `sync init`, and a remote that deleted it would leave
    /// every device without it, so that none could join until it was restored from history.
    /// True when one was put back.
    @discardableResult
    private func putBackRemovedSharedFiles(_ before: String, _ identity: [String: String]) throws -> Bool {
        var putBack = false
        for name in sharedFiles {
            // `before:name` in that commit, `:name` in the index (as the merge left it,
            // committed or not).
            func has(_ at: String) throws -> Bool {
                try run(["cat-file", "-e", "\(at):\(name)"], identity, failure: "", allowed: [0, 1, 128]).status == 0
            }
            guard try has(before), try !has("") else { continue }
            removeEntries(beside: name, itself: true)
            _ = try run(["checkout", before, "--", ":(literal)" + name], identity, failure: "git: putting \(name) back after the merge failed")
            putBack = true
        }
        return putBack
    }

    /// Whether a path a merge names is this device's directory, in it, or beside it as git
    /// leaves a file or directory it could not put in place (`<directory>~<branch>`); or the
    /// directory above it (`devices`), made a file or a link, or left beside it likewise.
    private func isOwn(_ path: String, _ own: String) -> Bool {
        if path == own || path.hasPrefix(own + "/") || path.hasPrefix(own + "~") { return true }
        let parent = (own as NSString).deletingLastPathComponent
        return !parent.isEmpty && (path == parent || path.hasPrefix(parent + "~"))
    }

    /// The device directory (`devices/<id>`) a path is in or beside (`devices/<id>~<branch>`).
    private func deviceDirectory(of path: String) -> String? {
        guard let own = ownDirectory else { return nil }
        let parent = (own as NSString).deletingLastPathComponent
        guard !parent.isEmpty, path.hasPrefix(parent + "/") else { return nil }
        let name = path.dropFirst(parent.count + 1).prefix { $0 != "/" && $0 != "~" }
        return name.isEmpty ? nil : parent + "/" + name
    }

    /// Puts a device's directory as `commit` has it, whole, in the index and the work tree
    /// (this device's own as before the merge; another's as the remote has it); whatever the
    /// merge left in it or beside it is removed. The directories above it are made real ones
    /// of the folder first, never followed: a merge can make `devices` a link, and removing
    /// through it would remove wherever it leads. What this device wrote since is written
    /// again by the keychain's merge that follows.
    private func putDirectory(_ directory: String, as commit: String, _ identity: [String: String]) throws {
        let failure = "git: putting \(directory) back after the merge failed"
        var above = ""
        for part in directory.split(separator: "/").dropLast() {
            above += (above.isEmpty ? "" : "/") + part
            _ = try run(["rm", "-r", "-q", "-f", "--cached", "--ignore-unmatch", "--", above + "~*"], identity, failure: failure)
            removeEntries(beside: above, itself: false)
            // An entry of its own name in the index (a link or a file, merged or not) goes.
            let named = try run(["ls-files", "-z", "--stage", "--", ":(literal)" + above], identity, failure: failure).output
            if named.split(separator: "\0").contains(where: { $0.hasSuffix("\t" + above) }) {
                _ = try run(["rm", "-q", "-f", "--cached", "--", ":(literal)" + above], identity, failure: failure)
            }
            var st = stat()
            if lstat(folder + "/" + above, &st) == 0 && (st.st_mode & S_IFMT) != S_IFDIR {
                // A link or a file where a directory belongs: itself removed, never followed.
                guard unlink(folder + "/" + above) == 0 else { throw KeychainError.syncEngine(failure + ": cannot remove \(above)") }
            }
            if lstat(folder + "/" + above, &st) != 0 && mkdir(folder + "/" + above, 0o700) != 0 {
                throw KeychainError.syncEngine(failure + ": cannot make \(above)")
            }
        }
        // Literal pathspecs: another device's directory is named by the remote, and `*` would
        // be every one.
        let parent = ":(literal)" + (directory as NSString).deletingLastPathComponent
        let beside = try run(["ls-files", "-z", "--", parent], identity, failure: failure).output
            .split(separator: "\0").map(String.init).filter { $0.hasPrefix(directory + "~") }
        _ = try run(["rm", "-r", "-q", "-f", "--cached", "--ignore-unmatch", "--", ":(literal)" + directory]
                    + beside.map { ":(literal)" + $0 }, identity, failure: failure)
        removeEntries(beside: directory, itself: true)
        if try run(["cat-file", "-e", "\(commit):\(directory)"], identity, failure: "", allowed: [0, 1, 128]).status == 0 {
            _ = try run(["checkout", commit, "--", ":(literal)" + directory], identity, failure: failure)
        }
    }

    /// Removes from the work tree what a merge left beside `path` (`<name>~<branch>`), and
    /// `path` itself if `itself`; the directory they are in is a real one of the folder. A
    /// link is removed itself, never what it leads to.
    private func removeEntries(beside path: String, itself: Bool) {
        let parent = (folder + "/" + path as NSString).deletingLastPathComponent
        let name = (path as NSString).lastPathComponent
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: parent)) ?? []
        where (itself && entry == name) || entry.hasPrefix(name + "~") {
            try? FileManager.default.removeItem(atPath: parent + "/" + entry)
        }
    }

    /// Whether git has the path in its index or the work tree has it.
    private func isPresent(_ path: String, _ identity: [String: String]) throws -> Bool {
        var st = stat()
        if lstat(folder + "/" + path, &st) == 0 { return true }
        return try !output(["ls-files", "--", path], identity, failure: "git ls-files failed").isEmpty
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
        throw KeychainError.syncEngine("git: pushing to \(shownRemote) failed: \(pushed.error.isEmpty ? pushed.output : pushed.error)")
    }

    /// The remote as messages show it: a URL's user and password (`https://user:token@host/`)
    /// left out, since a message may be logged or pasted where the token should not go.
    var shownRemote: String {
        guard let scheme = remote.range(of: "://") else { return remote }
        let rest = remote[scheme.upperBound...]
        let authority = rest.prefix { $0 != "/" }
        guard let at = authority.lastIndex(of: "@") else { return remote }
        return String(remote[..<scheme.upperBound]) + "…" + String(rest[at...])
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
        // The engine's commits are its own: a user's commit.gpgsign (with no agent at hand)
        // would make every exchange fail.
        process.arguments = ["-c", "umask 077 && exec \"$@\"", "sh", git, "-C", folder, "-c", "commit.gpgsign=false"] + arguments
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
