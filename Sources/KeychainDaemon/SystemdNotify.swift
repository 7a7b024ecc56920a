import Foundation

/// sd_notify(3) without libsystemd: one datagram to $NOTIFY_SOCKET, which systemd sets for a
/// Type=notify service, so the unit becomes active only once the mount serves.
package enum SystemdNotify {
    package static func send(_ message: String) {
        guard let socketPath = ProcessInfo.processInfo.environment["NOTIFY_SOCKET"], !socketPath.isEmpty else { return }
        var path = Array(socketPath.utf8)
        // A leading '@' names an abstract socket, whose address starts with a NUL.
        if path.first == UInt8(ascii: "@") { path[0] = 0 }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        guard path.count < MemoryLayout.size(ofValue: addr.sun_path) else { return }
        withUnsafeMutableBytes(of: &addr.sun_path) { $0.copyBytes(from: path) }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + path.count)
        let bytes = Array(message.utf8)
        _ = withUnsafePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                bytes.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), sa, length) }
            }
        }
    }
}
