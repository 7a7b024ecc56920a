// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif
import KeychainModel

/// The few Unix-domain stream socket calls the control protocol needs.
package enum UnixSocket {
    /// What `sun_path` holds, terminating NUL included.
    package static let maxPathBytes = MemoryLayout.size(ofValue: sockaddr_un().sun_path)

    private static func address(_ path: String) throws -> sockaddr_un {
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < maxPathBytes else {
            throw KeychainError.io("the socket path \(path) is longer than \(maxPathBytes - 1) bytes")
        }
        withUnsafeMutableBytes(of: &addr.sun_path) { dst in
            dst.copyBytes(from: bytes)
            dst[bytes.count] = 0
        }
        return addr
    }

    private static func withSockaddr<R>(_ addr: inout sockaddr_un, _ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        withUnsafePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }

    private static func newSocket() throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw KeychainError.io("socket: \(String(cString: strerror(errno)))") }
        return fd
    }

    /// A connected, non-blocking socket, or nil when nothing listens at `path`. A listener whose
    /// backlog is full is retried until `deadline`.
    package static func connect(path: String, deadline: Deadline = .after(seconds: 5)) throws -> Int32? {
        var addr = try address(path)
        let fd = try newSocket()
        while true {
            if withSockaddr(&addr, { Glibc.connect(fd, $0, $1) }) == 0 { return fd }
            let e = errno
            if e == EINTR { continue }
            if e == EAGAIN && !deadline.hasPassed {
                usleep(10_000)
                continue
            }
            close(fd)
            return nil
        }
    }

    /// A non-blocking listening socket at `path`, which must not exist or be a socket nobody
    /// listens on (a leftover of a killed daemon, replaced here).
    package static func listen(path: String, backlog: Int32 = 128) throws -> Int32 {
        if let fd = try connect(path: path, deadline: .after(seconds: 0.5)) {
            close(fd)
            throw KeychainError.storeBusy("another daemon already listens on \(path)")
        }
        var st = stat()
        if lstat(path, &st) == 0 {
            guard st.st_mode & S_IFMT == S_IFSOCK else {
                throw KeychainError.io("\(path) exists and is not a socket; refusing to replace it")
            }
            unlink(path)
        }
        var addr = try address(path)
        let fd = try newSocket()
        // Owner-only from the start, not after a chmod that would leave a window.
        let oldMask = umask(0o177)
        let rc = withSockaddr(&addr) { bind(fd, $0, $1) }
        umask(oldMask)
        guard rc == 0, Glibc.listen(fd, backlog) == 0 else {
            let message = String(cString: strerror(errno))
            close(fd)
            throw KeychainError.io("cannot listen on \(path): \(message)")
        }
        return fd
    }

    /// The uid of the process at the other end, from the kernel (SO_PEERCRED).
    package static func peerUID(_ fd: Int32) -> uid_t? {
        var cred = PeerCredentials()
        var len = socklen_t(MemoryLayout<PeerCredentials>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0,
              len == MemoryLayout<PeerCredentials>.size else { return nil }
        return cred.uid
    }

    /// Linux's `struct ucred`, which Glibc only declares under _GNU_SOURCE.
    private struct PeerCredentials {
        var pid: pid_t = 0
        var uid: uid_t = 0
        var gid: gid_t = 0
    }
}
