import Foundation
import KeychainStore

/// The few Unix-domain stream socket calls the control protocol needs.
enum UnixSocket {
    private static func address(_ path: String) throws -> sockaddr_un {
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: addr.sun_path)
        guard bytes.count < capacity else {
            throw KeychainError.io("the socket path \(path) is longer than \(capacity - 1) bytes; set a shorter XDG_RUNTIME_DIR")
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
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw KeychainError.io("socket: \(String(cString: strerror(errno)))") }
        return fd
    }

    /// A connected socket, or nil when nothing listens at `path`.
    static func connect(path: String) throws -> Int32? {
        var addr = try address(path)
        let fd = try newSocket()
        let rc = withSockaddr(&addr) { Glibc.connect(fd, $0, $1) }
        guard rc == 0 else {
            close(fd)
            return nil
        }
        return fd
    }

    /// A listening socket at `path`. A socket file nobody listens on is a leftover and is replaced.
    static func listen(path: String) throws -> Int32 {
        if let fd = try connect(path: path) {
            close(fd)
            throw KeychainError.storeBusy("another daemon already listens on \(path)")
        }
        unlink(path)
        var addr = try address(path)
        let fd = try newSocket()
        // Owner-only from the start, not after a chmod that would leave a window.
        let oldMask = umask(0o177)
        let rc = withSockaddr(&addr) { bind(fd, $0, $1) }
        umask(oldMask)
        guard rc == 0, Glibc.listen(fd, 16) == 0 else {
            let message = String(cString: strerror(errno))
            close(fd)
            throw KeychainError.io("cannot listen on \(path): \(message)")
        }
        return fd
    }

    /// The uid of the process at the other end, from the kernel (SO_PEERCRED).
    static func peerUID(_ fd: Int32) -> uid_t? {
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

    static func setTimeout(_ fd: Int32, seconds: Int) {
        var tv = timeval(tv_sec: seconds, tv_usec: 0)
        let size = socklen_t(MemoryLayout<timeval>.size)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, size)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, size)
    }
}
