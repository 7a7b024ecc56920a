import Foundation
import XCTest
import KeychainErrors
@testable import KeychainSyncGit

/// The git transport against real git: a bare repository in a temporary directory and sync
/// folders of "devices" that each write only their own directory, as the keychain does.
final class GitSyncEngineTests: XCTestCase {
    private var root = ""
    private var remote = ""

    override func setUpWithError() throws {
        root = FileManager.default.temporaryDirectory.appendingPathComponent("kcfs-syncgit-\(UUID().uuidString)").path
        remote = root + "/remote.git"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        // No git configuration of the machine's or the user's: the engine must work without an
        // identity, and nothing here may depend on the developer's settings.
        setenv("GIT_CONFIG_GLOBAL", root + "/no-gitconfig", 1)
        setenv("GIT_CONFIG_NOSYSTEM", "1", 1)
        try git(root, "init", "--quiet", "--bare", "--initial-branch=main", remote)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: root)
        unsetenv("GIT_CONFIG_GLOBAL")
        unsetenv("GIT_CONFIG_NOSYSTEM")
    }

    // MARK: - Helpers

    /// A device's sync folder (a plain directory until the engine makes it a work tree).
    private func device(_ name: String) throws -> String {
        let path = root + "/" + name
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// Writes `text` at `folder/relative`, making the directories.
    private func write(_ folder: String, _ relative: String, _ text: String) throws {
        let url = URL(fileURLWithPath: folder + "/" + relative)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(text.utf8).write(to: url)
    }

    private func read(_ folder: String, _ relative: String) -> String? {
        (try? Data(contentsOf: URL(fileURLWithPath: folder + "/" + relative))).map { String(decoding: $0, as: UTF8.self) }
    }

    @discardableResult
    private func git(_ directory: String, _ arguments: String...) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["git", "-C", directory] + arguments
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw NSError(domain: "git", code: Int(process.terminationStatus),
                          userInfo: [NSLocalizedDescriptionKey: "git \(arguments) failed"])
        }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The files of the remote's main branch.
    private func remoteFiles() throws -> [String] {
        try git(remote, "ls-tree", "-r", "--name-only", "main").split(separator: "\n").map(String.init)
    }

    private func engine(_ folder: String) -> GitSyncEngine { GitSyncEngine(folder: folder, remote: remote, sharedFiles: ["sync.key"]) }

    private func expectSyncEngineError(_ needle: String, _ body: () throws -> Void,
                                       file: StaticString = #filePath, line: UInt = #line) {
        do {
            try body()
            XCTFail("expected a sync engine error with '\(needle)'", file: file, line: line)
        } catch let KeychainError.syncEngine(message) {
            XCTAssertTrue(message.contains(needle), "'\(message)' lacks '\(needle)'", file: file, line: line)
            XCTAssertEqual(KeychainError.syncEngine(message).exitCode, 85, file: file, line: line)
        } catch {
            XCTFail("expected a sync engine error, got \(error)", file: file, line: line)
        }
    }

    // MARK: - Tests

    func testTwoDevicesConvergeThroughABareRepository() throws {
        let a = try device("a"), b = try device("b")
        try write(a, "envelope", "key")
        try write(a, "dev-a/1", "one")
        let first = try engine(a).exchange {}
        XCTAssertTrue(first.committed)
        XCTAssertFalse(first.received, "the remote was empty")
        XCTAssertEqual(try remoteFiles(), ["dev-a/1", "envelope"])

        let second = try engine(b).exchange { }
        XCTAssertTrue(second.received)
        XCTAssertEqual(read(b, "dev-a/1"), "one")
        try write(b, "dev-b/1", "two")
        try FileManager.default.removeItem(atPath: b + "/dev-b/1")
        try write(b, "dev-b/2", "three")
        try engine(b).exchange {}

        try write(a, "dev-a/1", "one, changed")
        let third = try engine(a).exchange {}
        XCTAssertTrue(third.received)
        try engine(b).exchange {}
        XCTAssertEqual(read(a, "dev-b/2"), "three")
        XCTAssertEqual(read(b, "dev-a/1"), "one, changed")
        XCTAssertNil(read(a, "dev-b/1"))
        XCTAssertEqual(try remoteFiles(), ["dev-a/1", "dev-b/2", "envelope"])
        // Without any identity configured, the commits say keychainfs made them.
        XCTAssertEqual(try git(a, "log", "-1", "--format=%an <%ae>"), "keychainfs <keychainfs@localhost>")
    }

    func testTheMergeRunsAfterTheFetchAndWhatItWritesIsPushed() throws {
        let a = try device("a"), b = try device("b")
        try write(a, "dev-a/1", "one")
        try engine(a).exchange {}
        var seen: String?
        try engine(b).exchange {
            seen = read(b, "dev-a/1")
            // What the keychain's merge writes (this device's own files) goes out in the same exchange.
            try write(b, "dev-b/state", "merged")
        }
        XCTAssertEqual(seen, "one", "the merge saw what the fetch brought")
        XCTAssertEqual(try remoteFiles(), ["dev-a/1", "dev-b/state"])
    }

    func testARefusedPushIsFetchedMergedAndRetried() throws {
        let a = try device("a"), b = try device("b")
        try write(a, "dev-a/1", "one")
        try engine(a).exchange {}
        try engine(b).exchange {}
        try write(a, "dev-a/2", "two")
        var merges = 0
        // B pushes while A is between its fetch and its push: A's push is refused.
        let result = try engine(a).exchange {
            merges += 1
            if merges == 1 {
                try write(b, "dev-b/1", "from b")
                try engine(b).exchange {}
            }
        }
        XCTAssertEqual(result.refusedPushes, 1)
        XCTAssertEqual(merges, 2, "the merge ran again over what the second fetch brought")
        XCTAssertEqual(read(a, "dev-b/1"), "from b")
        XCTAssertEqual(try remoteFiles(), ["dev-a/1", "dev-a/2", "dev-b/1"])
        try engine(b).exchange {}
        XCTAssertEqual(read(b, "dev-a/2"), "two")
    }

    func testAPushThatLosesTheRaceForTheRefIsRetried() throws {
        let a = try device("a"), b = try device("b")
        try write(a, "dev-a/1", "one")
        try engine(a).exchange {}
        try engine(b).exchange {}
        try write(b, "dev-b/1", "from b")
        try git(b, "add", "-A")
        try git(b, "-c", "user.name=b", "-c", "user.email=b@x", "commit", "-qm", "b")
        // B's push lands while A's push is being received, after A's was checked against the
        // remote's ref and before it is written: git answers "[remote rejected] (failed to
        // update ref)", as when two devices push at the same instant.
        let hook = remote + "/hooks/update"
        try Data("""
            #!/bin/sh
            [ -e "\(root)/raced" ] && exit 0
            touch "\(root)/raced"
            env -u GIT_DIR -u GIT_QUARANTINE_PATH -u GIT_OBJECT_DIRECTORY -u GIT_ALTERNATE_OBJECT_DIRECTORIES \\
                git -C "\(b)" push -q "\(remote)" HEAD:refs/heads/main >/dev/null 2>&1
            exit 0

            """.utf8).write(to: URL(fileURLWithPath: hook))
        chmod(hook, 0o755)
        try write(a, "dev-a/2", "two")
        let result = try engine(a).exchange {}
        XCTAssertTrue(FileManager.default.fileExists(atPath: root + "/raced"), "the race was staged")
        XCTAssertEqual(result.refusedPushes, 1)
        XCTAssertEqual(try remoteFiles(), ["dev-a/1", "dev-a/2", "dev-b/1"])
    }

    func testARemoteThatRefusesForAnotherReasonIsAFailure() throws {
        let a = try device("a")
        try write(a, "dev-a/1", "one")
        let hook = remote + "/hooks/pre-receive"
        try Data("#!/bin/sh\necho 'pushes are closed' >&2\nexit 1\n".utf8).write(to: URL(fileURLWithPath: hook))
        chmod(hook, 0o755)
        expectSyncEngineError("pushing to \(remote) failed") { try engine(a).exchange {} }
    }

    func testARemoteThatKeepsMovingIsGivenUpAfterTheRounds() throws {
        let a = try device("a"), b = try device("b")
        try write(a, "dev-a/1", "one")
        try engine(a).exchange {}
        try engine(b).exchange {}
        var engineA = engine(a)
        engineA.rounds = 1
        var n = 0
        try write(a, "dev-a/2", "two")
        expectSyncEngineError("refused the push 2 times") {
            try engineA.exchange {
                n += 1
                try write(b, "dev-b/\(n)", "x")
                try engine(b).exchange {}
            }
        }
        XCTAssertFalse(try remoteFiles().contains("dev-a/2"), "nothing of A's was pushed")
        try engine(a).exchange {}
        XCTAssertTrue(try remoteFiles().contains("dev-a/2"), "the next exchange pushes it")
    }

    func testAConflictAbortsTheMergeAndPushesNothing() throws {
        let a = try device("a"), b = try device("b")
        try write(a, "shared", "from a")
        try engine(a).exchange {}
        try write(b, "shared", "from b")
        let remoteHead = try git(remote, "rev-parse", "main")
        expectSyncEngineError("conflicts in files no device should share (shared)") { try engine(b).exchange {} }
        XCTAssertEqual(try git(remote, "rev-parse", "main"), remoteHead, "nothing pushed")
        XCTAssertEqual(read(b, "shared"), "from b", "B's file as it was, without conflict markers")
        XCTAssertEqual(try git(b, "status", "--porcelain"), "", "no merge left in progress")
    }

    /// A remote that serves an old copy of this device's own directory, in a commit on top,
    /// while this device wrote on: the merge conflicts there only, and this device's directory
    /// stands, whole, so that its exchanges go on (before, every later one met the same conflict).
    func testAConflictInThisDevicesOwnDirectoryKeepsItsVersion() throws {
        let a = try device("a"), b = try device("b")
        try write(a, "devices/a/state", "1")
        try write(a, "devices/a/items/x", "x1")
        try engine(a).exchange {}
        try engine(b).exchange {}
        // The remote rolls A's directory back and adds a file there; B writes its own too.
        try write(b, "devices/a/state", "0")
        try write(b, "devices/a/items/planted", "p")
        try write(b, "devices/b/state", "b1")
        try engine(b).exchange {}
        // A wrote on meanwhile.
        try write(a, "devices/a/state", "2")
        try FileManager.default.removeItem(atPath: a + "/devices/a/items/x")
        var own = engine(a)
        own.ownDirectory = "devices/a"
        XCTAssertTrue(try own.exchange {}.restoredOwnDirectory, "the exchange says it put A's directory back")
        XCTAssertEqual(read(a, "devices/a/state"), "2", "A's directory as A wrote it")
        XCTAssertNil(read(a, "devices/a/items/x"))
        XCTAssertNil(read(a, "devices/a/items/planted"), "the remote's file in A's directory is not kept")
        XCTAssertEqual(read(a, "devices/b/state"), "b1", "B's directory merged")
        XCTAssertEqual(try git(remote, "show", "main:devices/a/state"), "2", "and pushed")
        XCTAssertEqual(try git(a, "status", "--porcelain"), "", "no merge left in progress")
        // Without its directory named, the same conflict stops the exchange, as any other.
        try engine(b).exchange {}
        try write(b, "devices/a/state", "0, again")
        try engine(b).exchange {}
        try write(a, "devices/a/state", "3")
        expectSyncEngineError("conflicts in files no device should share (devices/a/state)") { try engine(a).exchange {} }
    }

    /// A device's engine as the keychain runs it: its own directory named.
    private func ownEngine(_ folder: String, _ device: String) -> GitSyncEngine {
        var e = engine(folder)
        e.ownDirectory = "devices/" + device
        return e
    }

    /// Whoever can push to the remote: a plain clone that changes what `change` changes and pushes.
    private func pushFromElsewhere(_ change: (String) throws -> Void) throws {
        let other = root + "/elsewhere"
        if !FileManager.default.fileExists(atPath: other) { try git(root, "clone", "--quiet", remote, other) }
        try git(other, "pull", "--quiet", "--no-rebase")
        try change(other)
        try git(other, "add", "--all", "--force", ".")
        try git(other, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "--quiet", "-m", "elsewhere")
        try git(other, "push", "--quiet", "origin", "HEAD:main")
    }

    /// Whoever can push rewrites the remote's history: a clone reset to `base` (a new history
    /// when nil), changed by `change`, force-pushed.
    private func forcePushRewritten(from base: String?, _ change: (String) throws -> Void) throws {
        let fork = root + "/fork"
        if let base {
            try git(root, "clone", "--quiet", remote, fork)
            try git(fork, "reset", "--quiet", "--hard", base)
        } else {
            try git(root, "init", "--quiet", "--initial-branch=main", fork)
        }
        try change(fork)
        try git(fork, "add", "--all")
        try git(fork, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "--quiet", "-m", "rewritten")
        try git(fork, "push", "--quiet", "--force", remote, "HEAD:main")
    }

    /// A run killed between its merge and the merge's abort left a conflict in another
    /// device's directory: the next run aborts it instead of committing it (it pushed the
    /// conflict, markers and all, into that device's directory), then merges again.
    func testAMergeAnEarlierRunLeftUnfinishedIsAbortedNotPushed() throws {
        let a = try device("a"), b = try device("b")
        try write(a, "devices/a/state", "1")
        try ownEngine(a, "a").exchange {}
        try ownEngine(b, "b").exchange {}
        try write(a, "devices/a/state", "2")
        try ownEngine(a, "a").exchange {}
        // B's copy of A's file changed and committed (by anything), then a merge left half done.
        try write(b, "devices/a/state", "changed in b")
        try git(b, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "--quiet", "-am", "x")
        try git(b, "fetch", "--quiet", remote, "main")
        XCTAssertThrowsError(try git(b, "-c", "user.name=x", "-c", "user.email=x@x", "merge", "--quiet", "FETCH_HEAD"), "the merge conflicts")
        XCTAssertNoThrow(try git(b, "rev-parse", "--verify", "MERGE_HEAD"), "and is left half done")
        try ownEngine(b, "b").exchange {}
        XCTAssertEqual(try git(remote, "show", "main:devices/a/state"), "2", "A's file as A pushed it, no conflict markers")
        XCTAssertEqual(read(b, "devices/a/state"), "2", "and B has A's copy (a conflict in another device's directory takes the remote's)")
        XCTAssertEqual(try git(b, "ls-files", "--unmerged"), "", "no merge left in progress")
    }

    /// Whatever the remote does to this device's directory, with a conflict or without, this
    /// device's version stands and its exchanges go on: made a file or a link while the device
    /// was idle (a clean merge), its `state` made a directory or the directory moved while it
    /// wrote on (conflicts git leaves as `name~branch` paths).
    func testARemoteThatRemakesThisDevicesDirectoryIsUndone() throws {
        let a = try device("a"), b = try device("b")
        try write(b, "devices/b/state", "b1")
        try write(b, "devices/b/items/x", "x")
        try ownEngine(b, "b").exchange {}
        try ownEngine(a, "a").exchange {}
        let outside = root + "/outside"
        try write(outside, "b/items/keep", "precious")
        try write(outside, "b~old/keep", "precious")
        let remakes: [(String, Bool, (String) throws -> Void)] = [
            ("a file", false, { o in
                try FileManager.default.removeItem(atPath: o + "/devices/b")
                try self.write(o, "devices/b", "junk")
            }),
            ("a link", false, { o in
                try FileManager.default.removeItem(atPath: o + "/devices/b")
                try FileManager.default.createSymbolicLink(atPath: o + "/devices/b", withDestinationPath: outside)
            }),
            ("its state a directory", true, { o in
                try FileManager.default.removeItem(atPath: o + "/devices/b/state")
                try self.write(o, "devices/b/state/x", "junk")
            }),
            ("moved", true, { o in try self.git(o, "mv", "devices/b", "devices/moved") }),
            ("devices a file", true, { o in
                try FileManager.default.removeItem(atPath: o + "/devices")
                try self.write(o, "devices", "junk")
            }),
            // Listing or removing through the link would act outside the folder.
            ("devices a link", false, { o in
                try FileManager.default.removeItem(atPath: o + "/devices")
                try FileManager.default.createSymbolicLink(atPath: o + "/devices", withDestinationPath: outside)
            }),
        ]
        for (n, (what, writesOn, remake)) in remakes.enumerated() {
            try pushFromElsewhere(remake)
            if writesOn { try write(b, "devices/b/state", "b\(n + 2)") }
            let state = read(b, "devices/b/state")
            XCTAssertTrue(try ownEngine(b, "b").exchange {}.restoredOwnDirectory, "put back (\(what))")
            XCTAssertEqual(read(b, "devices/b/state"), state, "B's directory stands when the remote made it \(what)")
            XCTAssertEqual(try git(remote, "show", "main:devices/b/state"), state, "and is pushed (\(what))")
            XCTAssertEqual(try git(remote, "show", "main:devices/b/items/x"), "x", "whole (\(what))")
            let files = try remoteFiles()
            XCTAssertFalse(files.contains { $0.hasPrefix("devices/b~") }, "\(files)")
            XCTAssertEqual(try git(b, "status", "--porcelain"), "", "no merge left in progress (\(what))")
            XCTAssertEqual(read(outside, "b/items/keep"), "precious", "nothing outside the folder is touched (\(what))")
            XCTAssertEqual(read(outside, "b~old/keep"), "precious")
            XCTAssertNil(read(outside, "b/state"))
            XCTAssertFalse(try ownEngine(a, "a").exchange {}.restoredOwnDirectory, "A's own directory was not touched (\(what))")
            XCTAssertEqual(read(a, "devices/b/state"), state, "A gets B's directory back (\(what))")
        }
    }

    /// The sync key's envelope is written once, by `sync init`: a remote that deleted it gets
    /// it back from the next device that exchanges, whether the merge also conflicts (in that
    /// device's own directory) or not. Before, no device put it back, and none could join.
    func testTheEnvelopeTheRemoteRemovedIsPutBack() throws {
        let a = try device("a"), b = try device("b")
        let ea = ownEngine(a, "a"), eb = ownEngine(b, "b")
        try write(a, "sync.key", "envelope")
        try write(a, "devices/a/state", "a1")
        try ea.exchange {}
        try write(b, "devices/b/state", "b1")
        try eb.exchange {}
        XCTAssertEqual(read(b, "sync.key"), "envelope")
        try pushFromElsewhere { o in try FileManager.default.removeItem(atPath: o + "/sync.key") }
        try eb.exchange {}
        XCTAssertEqual(read(b, "sync.key"), "envelope", "B puts it back")
        XCTAssertEqual(try git(remote, "show", "main:sync.key"), "envelope", "and pushes it")

        try pushFromElsewhere { o in
            try FileManager.default.removeItem(atPath: o + "/sync.key")
            try self.write(o, "devices/b/state", "the remote's")
        }
        try write(b, "devices/b/state", "b2")
        try eb.exchange {}
        XCTAssertEqual(read(b, "sync.key"), "envelope", "put back in a merge that conflicts too")
        XCTAssertEqual(try git(remote, "show", "main:sync.key"), "envelope")
        XCTAssertEqual(try git(remote, "show", "main:devices/b/state"), "b2", "B's own directory as it wrote it")
        try ea.exchange {}
        XCTAssertEqual(read(a, "sync.key"), "envelope")
        XCTAssertEqual(try git(b, "status", "--porcelain"), "", "no merge left in progress")
    }

    /// What the remote can plant to steer git has no effect: a .gitignore that would keep this
    /// device's files out of its commits (each exchange said it pushed), and attributes that
    /// would convert the other devices' files as they are checked out.
    func testPlantedIgnoreRulesAndAttributesChangeNothing() throws {
        let a = try device("a"), b = try device("b")
        try write(a, "devices/a/state", "a1")
        try ownEngine(a, "a").exchange {}
        try ownEngine(b, "b").exchange {}
        try pushFromElsewhere { o in
            try self.write(o, ".gitignore", "devices/b/\n")
            try self.write(o, "devices/b/.gitignore", "*\n")
            try self.write(o, ".gitattributes", "* text eol=crlf\n")
        }
        try ownEngine(b, "b").exchange {}
        try write(b, "devices/b/items/y", "line 1\nline 2\n")
        try ownEngine(b, "b").exchange {}
        XCTAssertEqual(try git(remote, "show", "main:devices/b/items/y"), "line 1\nline 2", "B's file was pushed")
        try write(a, "devices/a/items/z", "line 1\nline 2\n")
        try ownEngine(a, "a").exchange {}
        try ownEngine(b, "b").exchange {}
        XCTAssertEqual(read(b, "devices/a/items/z"), "line 1\nline 2\n", "checked out as A wrote it, not with CRLF")
    }

    /// A history the remote rewrote (a force-push of another one) conflicts in every device's
    /// directory: each device keeps its own and takes the remote's copy of the others' (which
    /// the keychain's merge then judges), so that exchanges go on; before, every device
    /// stopped at the conflicts in the others' directories, for good.
    func testARewrittenHistoryConflictsNoDeviceIntoStopping() throws {
        let a = try device("a"), b = try device("b")
        try write(a, "devices/a/state", "a1")
        try ownEngine(a, "a").exchange {}
        try write(b, "devices/b/state", "b1")
        try ownEngine(b, "b").exchange {}
        try ownEngine(a, "a").exchange {}
        try forcePushRewritten(from: nil) { fork in
            try self.write(fork, "devices/a/state", "forged a")
            try self.write(fork, "devices/b/state", "forged b")
        }
        try write(a, "devices/a/state", "a2")
        try ownEngine(a, "a").exchange {}
        XCTAssertEqual(read(a, "devices/a/state"), "a2", "A's own stands")
        XCTAssertEqual(read(a, "devices/b/state"), "forged b", "B's as the remote has it, for the keychain to judge")
        try ownEngine(b, "b").exchange {}
        XCTAssertEqual(read(b, "devices/b/state"), "b1")
        XCTAssertEqual(read(b, "devices/a/state"), "a2")
        try ownEngine(a, "a").exchange {}
        XCTAssertEqual(try git(remote, "show", "main:devices/a/state"), "a2")
        XCTAssertEqual(try git(remote, "show", "main:devices/b/state"), "b1")
        XCTAssertEqual(read(a, "devices/b/state"), "b1", "and B's own reaches A again")
    }

    /// A rewritten history that conflicts in another device's directory, and changes this
    /// device's own cleanly (a path it had not touched since): its own is put back too (it was
    /// kept, and from then on was in every `before`). Directories the remote names with bytes
    /// git quotes, or with glob characters, are another device's like any (the quoted ones
    /// stopped the exchange for good; `*` put every directory back as the remote had it).
    func testARewrittenHistoryCannotChangeThisDevicesDirectoryNorNameEveryOne() throws {
        let a = try device("a")
        try write(a, "devices/a/state", "a1")
        try write(a, "devices/a/items/x", "x1")
        try ownEngine(a, "a").exchange {}
        let base = try git(remote, "rev-parse", "main")
        try pushFromElsewhere { o in
            for name in ["b", "é", "*"] { try self.write(o, "devices/\(name)/f", "1") }
        }
        try ownEngine(a, "a").exchange {}
        try write(a, "devices/a/state", "a2")
        try ownEngine(a, "a").exchange {}
        try forcePushRewritten(from: base) { fork in
            for name in ["b", "é", "*"] { try self.write(fork, "devices/\(name)/f", "2") }
            try FileManager.default.removeItem(atPath: fork + "/devices/a/items")
            try self.write(fork, "devices/a/items", "a file now")
        }
        try ownEngine(a, "a").exchange {}
        XCTAssertEqual(read(a, "devices/a/items/x"), "x1", "A's own directory as A wrote it")
        XCTAssertEqual(read(a, "devices/a/state"), "a2")
        XCTAssertEqual(try git(remote, "show", "main:devices/a/items/x"), "x1", "and pushed")
        for name in ["b", "é", "*"] { XCTAssertEqual(read(a, "devices/\(name)/f"), "2", "\(name) as the remote has it") }
        try ownEngine(a, "a").exchange {}
    }

    /// A .gitignore the remote removes, changes or makes a dangling link stops nothing (before,
    /// the engine wrote its own again, which then conflicted with the remote's, or failed on
    /// the link, at every exchange); nor does a user's commit.gpgsign without a working gpg.
    func testTheFoldersGitignoreAndTheUsersSigningStopNothing() throws {
        let a = try device("a"), b = try device("b")
        try write(a, ".gitignore", "old rules\n")
        try write(a, "devices/a/state", "a1")
        try engine(a).exchange {}
        try ownEngine(b, "b").exchange {}
        try git(b, "config", "commit.gpgsign", "true")
        try git(b, "config", "gpg.program", "false")
        let changes: [(String) throws -> Void] = [
            { o in try FileManager.default.removeItem(atPath: o + "/.gitignore") },
            { o in try self.write(o, ".gitignore", "*.tmp\n") },
            { o in
                try FileManager.default.removeItem(atPath: o + "/.gitignore")
                try FileManager.default.createSymbolicLink(atPath: o + "/.gitignore", withDestinationPath: "/nonexistent/x")
            },
        ]
        for n in changes.indices {
            try pushFromElsewhere(changes[n])
            try write(b, "devices/b/state", "b\(n)")
            try ownEngine(b, "b").exchange {}
            try ownEngine(b, "b").exchange {}
            XCTAssertEqual(try git(remote, "show", "main:devices/b/state"), "b\(n)", "change \(n)")
        }
    }

    /// A clone made before any exchange (as the README has it) was checked out with the
    /// conversions a `.gitattributes` the remote planted asked for: the first exchange checks
    /// the other devices' files out again, as they are in git.
    func testAFolderClonedWithPlantedAttributesIsCheckedOutAgain() throws {
        let a = try device("a")
        try write(a, "devices/a/items/z", "line 1\nline 2\n")
        try ownEngine(a, "a").exchange {}
        try pushFromElsewhere { o in try self.write(o, ".gitattributes", "* text eol=crlf\n") }
        let c = root + "/c"
        try git(root, "clone", "--quiet", remote, c)
        XCTAssertEqual(read(c, "devices/a/items/z"), "line 1\r\nline 2\r\n", "the clone converted it")
        try ownEngine(c, "c").exchange {}
        XCTAssertEqual(read(c, "devices/a/items/z"), "line 1\nline 2\n", "checked out again as written")
    }

    /// `sync join` of a clone made with planted attributes: the envelope and the devices' files
    /// are as in git before the keychain reads them (the join read a converted envelope).
    func testAClonePreparedForJoiningHasItsFilesAsInGit() throws {
        let a = try device("a")
        let e = ownEngine(a, "a")
        try write(a, "sync.key", "envelope\nline 2\n")
        try write(a, "devices/a/items/z", "line 1\nline 2\n")
        try e.exchange {}
        try pushFromElsewhere { o in try self.write(o, ".gitattributes", "* text eol=crlf\n") }
        let c = root + "/c"
        try git(root, "clone", "--quiet", remote, c)
        XCTAssertEqual(read(c, "sync.key"), "envelope\r\nline 2\r\n", "the clone converted it")
        try engine(c).protectClone()
        XCTAssertEqual(read(c, "sync.key"), "envelope\nline 2\n", "checked out again as written")
        XCTAssertEqual(read(c, "devices/a/items/z"), "line 1\nline 2\n")
        // A folder that is not a work tree's top is left alone: no repository made in it.
        let plain = try device("plain")
        try engine(plain).protectClone()
        XCTAssertFalse(FileManager.default.fileExists(atPath: plain + "/.git"))
    }

    /// A remote beginning with '-' would be one of git's options (`--upload-pack` runs a command).
    func testARemoteThatLooksLikeAnOptionIsRefused() throws {
        let a = try device("a")
        try write(a, "dev-a/1", "one")
        XCTAssertThrowsError(try GitSyncEngine(folder: a, remote: "--upload-pack=touch \(root)/ran;", sharedFiles: []).exchange {}) {
            XCTAssertEqual(($0 as? KeychainError)?.exitCode, 65)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: root + "/ran"))
    }

    /// A token in the remote's URL stays out of the messages (they may be logged or pasted).
    func testMessagesLeaveOutAURLsCredentials() throws {
        XCTAssertEqual(GitSyncEngine(folder: root, remote: "https://me:t0ken@example.org/r.git", sharedFiles: []).shownRemote, "https://…@example.org/r.git")
        XCTAssertEqual(GitSyncEngine(folder: root, remote: "https://example.org/a@b.git", sharedFiles: []).shownRemote, "https://example.org/a@b.git")
        XCTAssertEqual(GitSyncEngine(folder: root, remote: "git@example.org:me/r.git", sharedFiles: []).shownRemote, "git@example.org:me/r.git")
        let a = try device("a")
        try write(a, "dev-a/1", "one")
        expectSyncEngineError("cannot reach file://…@") {
            try GitSyncEngine(folder: a, remote: "file://me:t0ken@" + root + "/nowhere.git", sharedFiles: []).exchange {}
        }
    }

    func testAFailedMergeOfTheKeychainPushesNothing() throws {
        let a = try device("a")
        try write(a, "dev-a/1", "one")
        struct Refused: Error {}
        XCTAssertThrowsError(try engine(a).exchange { throw Refused() }) { XCTAssertTrue($0 is Refused) }
        XCTAssertThrowsError(try remoteFiles(), "the remote has no branch: nothing was pushed")
    }

    func testAnUnreachableRemoteIsAClearError() throws {
        let a = try device("a")
        try write(a, "dev-a/1", "one")
        expectSyncEngineError("cannot reach \(root)/nowhere.git") {
            try GitSyncEngine(folder: a, remote: root + "/nowhere.git", sharedFiles: []).exchange {}
        }
    }

    func testAMissingFolderIsAClearError() throws {
        expectSyncEngineError("does not exist") { try engine(root + "/missing").exchange {} }
    }

    func testAFolderInsideAnotherRepositoryGetsItsOwn() throws {
        let home = try device("home")
        try git(home, "init", "--quiet")
        let folder = home + "/sync"
        try write(folder, "dev-a/1", "one")
        try engine(folder).exchange {}
        XCTAssertEqual(try git(folder, "rev-parse", "--show-toplevel"),
                       URL(fileURLWithPath: folder).resolvingSymlinksInPath().path)
        XCTAssertEqual(try git(home, "status", "--porcelain", "--untracked-files=no"), "", "the outer repository is untouched")
        XCTAssertEqual(try remoteFiles(), ["dev-a/1"])
    }

    func testTemporariesBeingWrittenAreNotCommitted() throws {
        let a = try device("a"), b = try device("b")
        try write(a, "devices/a/items/.x.tmp-123", "half")
        try write(a, "devices/a/.syncthing.state.tmp", "half")
        try write(a, "devices/a/items/x", "whole")
        try engine(a).exchange {}
        XCTAssertEqual(try remoteFiles(), ["devices/a/items/x"])
        // The ignore rules are the repository's own (.git/info/exclude), never committed.
        let exclude = (read(a, ".git/info/exclude") ?? "").split(separator: "\n").map(String.init)
        XCTAssertTrue(GitSyncEngine.ignored.allSatisfy(exclude.contains), "\(exclude)")
        try write(b, "devices/b/items/y", "whole")
        try engine(b).exchange {}
        XCTAssertEqual(try remoteFiles(), ["devices/a/items/x", "devices/b/items/y"])
    }
}
