import Foundation
import KeychainFileSystem
import KeychainModel
import Logging
import Synchronization

/// The daemon's sync: an exchange (`SyncSession.exchange`) after every change committed here
/// (it hears the owner's one `ItemChange` stream, as the kernel notifier and the Secret Service
/// do), and whenever another device's manifest arrives in the folder (inotify on each device's
/// directory, and on `devices/` for new devices). The exchange merges through the owner, so the
/// mount shows what arrived at once (the kernel notifier hears the merge's changes).
///
/// One thread runs the exchanges, so a commit never waits for the folder: it only wakes the
/// thread (a pipe). Changes of origin `.sync` are the merge's own and wake nothing.
package final class SyncWatcher: ItemChangeObserver, @unchecked Sendable {
    private let session: SyncSession
    private let log = Logger(label: "keychainfs.sync")
    /// Wakes the thread: one byte per local change (coalesced), or `stopByte`.
    private let wake: (read: Int32, write: Int32)
    private let inotify: Int32
    /// The store's sync state (`SyncLocalState.path`), resolved once: a commit of a store
    /// that does not sync wakes nothing (an exchange would find no state and stop).
    private let statePath: String
    private static let stopByte: UInt8 = 0xff
    /// What the other devices' manifests looked like at the last exchange (`folderFingerprint`):
    /// the periodic round exchanges only when it changed. The thread's alone.
    private var lastFingerprint: [String] = []
    /// Exchanges run so far (tests wait on it).
    package let exchanges = Atomic<Int>(0)
    /// Wakes by a commit so far (tests count them).
    package let commitWakes = Atomic<Int>(0)

    package init(session: SyncSession) throws {
        self.session = session
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw KeychainError.io("pipe: \(String(cString: strerror(errno)))") }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, O_NONBLOCK)
        }
        wake = (fds[0], fds[1])
        statePath = SyncLocalState.path(forStore: session.storePath)
        inotify = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
        guard inotify >= 0 else { throw KeychainError.io("inotify_init1: \(String(cString: strerror(errno)))") }
    }

    /// Starts the thread, which exchanges once at once (what changed while no daemon ran).
    package func start() {
        session.owner.addObserver(self)
        let thread = Thread { [self] in run() }
        thread.name = "keychainfs-sync"
        thread.start()
    }

    package func stop() {
        var b = Self.stopByte
        _ = write(wake.write, &b, 1)
    }

    package func keychainDidChange(_ changes: [ItemChange], origin: ChangeOrigin) {
        guard origin != .sync else { return }
        // Any change may be of a synchronizable item (or make one so, or not); an unlock makes
        // items readable that a locked exchange had to leave.
        guard changes.contains(where: { if case .lockStateChanged(let s) = $0 { s == .unlocked } else { true } }) else { return }
        // Without a state there is nothing to exchange: the wake, the thread's switch and its
        // look for the state were a tenth of the daemon's time in a loop of creates. A
        // `sync init` or `join` meanwhile is taken up by the periodic round, as before.
        guard access(statePath, F_OK) == 0 else { return }
        commitWakes.add(1, ordering: .sequentiallyConsistent)
        var b: UInt8 = 1
        _ = write(wake.write, &b, 1)
    }

    private func run() {
        var due = true
        // While an exchange waits for files a manifest named, it runs again soon, then less
        // often (milliseconds): the manifest it heard does not change when they land (and an
        // item file's landing is not watched: a first sync lands thousands).
        var retry: Int32?
        while true {
            if due {
                retry = exchangeOnce() ? min(2 * (retry ?? 125), 5_000) : nil
                due = false
            }
            var fds = [pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: inotify, events: Int16(POLLIN), revents: 0)]
            // Every few seconds, a look at the folder: a folder made or joined after the daemon
            // started, a watch that could not be set, an engine that replaced a directory whole.
            let n = poll(&fds, 2, retry ?? 5_000)
            // The round itself costs a few stats; an exchange reads every row's version and
            // every manifest (it decrypts only what changed).
            if n == 0 { due = retry != nil || folderFingerprint() != lastFingerprint; continue }
            if n < 0 { continue }
            if fds[0].revents != 0 {
                var buf = [UInt8](repeating: 0, count: 256)
                let got = read(wake.read, &buf, buf.count)
                if got > 0, buf[0..<got].contains(Self.stopByte) { return }
                due = true
            }
            if fds[1].revents != 0 {
                var buf = [UInt8](repeating: 0, count: 16 * 1024)
                while read(inotify, &buf, buf.count) > 0 {}
                due = true
                // An engine writes a manifest and its files close together: let them land.
                usleep(20_000)
                while read(inotify, &buf, buf.count) > 0 {}
            }
        }
    }

    /// The other devices' manifests (inode, size, modification time) and whether this store
    /// syncs at all: what tells the periodic round that something arrived unseen.
    private func folderFingerprint() -> [String] { fingerprint(of: try? SyncLocalState.load(forStore: session.storePath)) }

    private func fingerprint(of state: SyncLocalState?) -> [String] {
        guard let state else { return [] }
        let folder = SyncFolder(path: state.folder)
        return [state.folder, state.device.hex] + folder.devices().filter { $0 != state.device }.map { d in
            var st = stat()
            guard stat(folder.manifestPath(d), &st) == 0 else { return d.hex }
            return "\(d.hex) \(st.st_ino) \(st.st_size) \(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec)"
        }
    }

    /// Whether the exchange waits for files a manifest named (`SyncReport.waitingForFiles`).
    private func exchangeOnce() -> Bool {
        // Loaded once for both: every commit of a mount wakes this thread, with sync or without.
        let state = try? SyncLocalState.load(forStore: session.storePath)
        lastFingerprint = fingerprint(of: state)
        guard let state else { return false }
        watchFolder(state)
        var waiting = false
        do {
            let report = try session.exchange()
            waiting = report.waitingForFiles
            if report.published + report.applied + report.deleted + report.conflictCopies > 0 {
                log.info("sync: published \(report.published), applied \(report.applied), deleted \(report.deleted), conflict copies \(report.conflictCopies)")
            }
        } catch KeychainError.unavailable {
            // Before the first unlock nothing can be merged; the unlock wakes this thread.
        } catch KeychainError.notMounted {
            // `sync leave` ran meanwhile.
        } catch {
            log.error("sync: the exchange failed: \((error as? KeychainError)?.description ?? "\(error)")")
        }
        exchanges.add(1, ordering: .sequentiallyConsistent)
        return waiting
    }

    /// Watches `devices/` and every other device's directory (for its manifest's rename).
    /// Added again before every exchange: the same directory keeps its watch, and one an engine
    /// replaced whole (a new inode) gets a new one.
    private func watchFolder(_ state: SyncLocalState) {
        let folder = SyncFolder(path: state.folder)
        let mask = UInt32(IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE | IN_ONLYDIR)
        _ = inotify_add_watch(inotify, folder.devicesPath, mask)
        for d in folder.devices() where d != state.device {
            _ = inotify_add_watch(inotify, folder.devicePath(d), mask)
        }
    }
}
