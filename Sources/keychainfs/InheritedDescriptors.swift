import Glibc

/// The descriptors this process was started with, noted before it opens anything: a
/// `--passphrase-fd N` the caller did not open would otherwise read whatever the process
/// itself opened as N by then (a /proc file, the store), and count as a wrong passphrase.
enum InheritedDescriptors {
    /// Up to this many are noted; a higher N is taken as given.
    static let checked: Int32 = 256

    /// Open descriptors below `checked` at start, from one poll(2): a closed one is POLLNVAL.
    static let atStart: Set<Int32> = {
        var fds = (0..<checked).map { pollfd(fd: $0, events: 0, revents: 0) }
        guard poll(&fds, nfds_t(fds.count), 0) >= 0 else { return Set(0..<checked) }
        return Set(fds.filter { $0.revents & Int16(POLLNVAL) == 0 }.map(\.fd))
    }()

    /// Notes them; `main`'s first act.
    static func note() { _ = atStart }

    /// Whether `fd` was open when the process started.
    static func wasInherited(_ fd: Int32) -> Bool { fd >= checked || atStart.contains(fd) }
}
