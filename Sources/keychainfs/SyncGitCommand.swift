import ArgumentParser
import Foundation
import KeychainControlProtocol
import KeychainStore
import KeychainSync
import KeychainSyncGit

/// `keychainfs sync git REMOTE`: the sync folder exchanged through a git remote, with the
/// keychain's own exchange (`sync now`) run after every fetch and merge.
struct SyncGitCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "git",
        abstract: "Exchange the sync folder through a git remote: commit, fetch, merge, push.",
        discussion: """
            The sync folder becomes a git work tree (a new repository on branch main unless it is \
            one already, such as a clone of REMOTE). Each run commits this device's changes, \
            fetches and merges REMOTE's branch, merges what arrived into the keychain as 'sync now' \
            does, commits and pushes. Devices write only their own directories, and whatever a \
            merge does to this device's own (REMOTE serving an old copy of it, removing or \
            moving it), this device's version stands; a commit takes only that directory and sync.key. One run of a keychain goes at a time. A push \
            refused because another device pushed first is fetched, merged and retried. Git's failures (REMOTE unreachable, a conflict in a file no device \
            writes, pushes refused 6 times) exit 85 with nothing pushed, a REMOTE beginning with '-' 65; refused files (a tampered \
            file, a directory an old tree rolled back) exit 93 after the rest is merged and pushed. \
            Git history keeps every old sealed file: see the README's caveat.
            """)

    @Argument(help: ArgumentHelp("Anything git fetch and git push take: a URL, a path or a remote's name.", valueName: "remote"))
    var remote: String
    @OptionGroup var owner: SyncOwnerOptions

    func run() throws {
        guard let state = try SyncLocalState.load(forStore: owner.storeOptions.path) else {
            throw KeychainError.notMounted("this keychain does not sync (set it up with 'keychainfs sync init DIR' or 'sync join DIR')")
        }
        // The keychain's side goes through the store's owner: its daemon when mounted (which
        // also merges on its own as git's files land), this process otherwise. Reached before
        // git runs, so that a wrong passphrase stops it first.
        let service = try owner.service()
        var refusals: [String] = []
        var rewritten: String?
        var total = SyncOutcome()
        // One git exchange of this keychain at a time: two in one work tree at once concluded
        // each other's merges and failed on git's index lock. Not the exchange's own lock,
        // which the keychain's merge below takes (through the daemon, when mounted).
        let lock = try ExchangeLock(path: SyncLocalState.path(forStore: owner.storeOptions.path) + ".git.lock")
        defer { lock.release() }
        var engine = GitSyncEngine(folder: state.folder, remote: remote, sharedFiles: [SyncFolder.envelopeName])
        engine.ownDirectory = "devices/" + state.device.hex
        let done = try engine.exchange {
            let report = try service.sync(.exchange, folder: nil, passphrase: nil, scryptLogN: nil)
            refusals = report.refusals
            rewritten = report.ownDirectoryRewritten
            total.published += report.published; total.applied += report.applied; total.deleted += report.deleted
            total.conflictCopies += report.conflictCopies
            // What waits is what the last merge left.
            total.deferred = report.deferred
            total.heldByItemThatDoesNotSync = report.heldByItemThatDoesNotSync
        }
        Output.line(SyncNowCommand.counts(total) + "; "
            + (done.received ? "received from" : "nothing new from") + " \(remote)"
            + (done.refusedPushes > 0 ? ", pushed after \(done.refusedPushes) refused push\(done.refusedPushes == 1 ? "" : "es")" : ", pushed"))
        SyncNowCommand.sayWaiting(total.heldByItemThatDoesNotSync)
        // This run put the device's own directory back after a merge changed it: what the
        // keychain wrote there meanwhile (its daemon merges as files land) was older on disk
        // than in its state, and the merge wrote it again. Said, not a failure.
        if let note = rewritten, done.restoredOwnDirectory {
            FileHandle.standardError.write(Data("keychainfs: note: \(note) (this run put it back after the merge)\n".utf8))
            rewritten = nil
        }
        // What the last merge refused is what the folder now holds: reported as `sync now` does.
        let refused = refusals + [rewritten].compactMap { $0 }
        if !refused.isEmpty {
            for r in refused { FileHandle.standardError.write(Data("keychainfs: refused: \(r)\n".utf8)) }
            throw KeychainError.integrityFailure("\(refused.count) refused in the sync folder (the rest was merged and pushed)")
        }
    }
}
