import Foundation
import KeychainStore

/// What keeps this user from mounting, said with the command that fixes it.
enum FuseDevice {
    static let path = "/dev/fuse"
    static let fusermount = "/bin/fusermount3"

    /// Nil when /dev/fuse opens for reading and writing (and, for a normal user, the setuid
    /// fusermount3 is there); else the cause and its fix.
    static func problem() -> String? {
        let fd = open(path, O_RDWR | O_CLOEXEC)
        let err = errno
        if fd >= 0 {
            close(fd)
            return getuid() == 0 ? nil : fusermountProblem()
        }
        switch err {
        case ENOENT:
            if moduleLoaded {
                return "\(path) does not exist, though the fuse module is loaded; as root: mknod -m 666 \(path) c 10 229"
            }
            return "\(path) does not exist: the fuse kernel module is not loaded; as root: modprobe fuse (Debian: apt-get install fuse3)"
        case ENODEV, ENXIO:
            return "\(path) exists but no driver answers: the fuse kernel module is not loaded; as root: modprobe fuse"
        case EACCES, EPERM:
            return "\(path) is \(describe(path)), so \(userName) cannot open it. udev normally makes it 0666; "
                + "without udev (a container, a chroot), as root: chmod 666 \(path), or to keep it after reboots add a udev rule: "
                + "echo 'KERNEL==\"fuse\", MODE=\"0666\"' > /etc/udev/rules.d/99-fuse.rules"
        default:
            return "cannot open \(path): \(String(cString: strerror(err)))"
        }
    }

    /// A normal user mounts through the setuid helper from the fuse3 package.
    private static func fusermountProblem() -> String? {
        var st = stat()
        guard stat(fusermount, &st) == 0 else {
            return "\(fusermount) is missing; as root: apt-get install fuse3"
        }
        guard st.st_uid == 0, st.st_mode & S_ISUID != 0 else {
            return "\(fusermount) is not setuid root, so a normal user cannot mount; as root: chmod u+s \(fusermount)"
        }
        return nil
    }

    static var moduleLoaded: Bool {
        if FileManager.default.fileExists(atPath: "/sys/module/fuse") { return true }
        let filesystems = (try? String(contentsOfFile: "/proc/filesystems", encoding: .utf8)) ?? ""
        return filesystems.split(separator: "\n").contains { $0.hasSuffix("\tfuse") }
    }

    /// "mode 0600, owned by root:root".
    private static func describe(_ path: String) -> String {
        var st = stat()
        guard stat(path, &st) == 0 else { return "not accessible" }
        let owner = getpwuid(st.st_uid).map { String(cString: $0.pointee.pw_name) } ?? String(st.st_uid)
        let group = getgrgid(st.st_gid).map { String(cString: $0.pointee.gr_name) } ?? String(st.st_gid)
        return "mode " + String(format: "%04o", st.st_mode & 0o7777) + ", owned by \(owner):\(group)"
    }

    private static var userName: String {
        getpwuid(getuid()).map { String(cString: $0.pointee.pw_name) } ?? "uid \(getuid())"
    }
}

/// /etc/fuse.conf, which decides whether a normal user may pass allow_other or allow_root.
enum FuseConfiguration {
    static let path = "/etc/fuse.conf"

    static func allowsOtherUsers(text: String) -> Bool {
        text.split(separator: "\n").contains { $0.trimmingCharacters(in: .whitespaces) == "user_allow_other" }
    }

    /// `--allow-root` as a normal user needs `user_allow_other`; fusermount3 would refuse with a
    /// message nobody sees behind the background daemon, so say it here.
    static func checkAllowRoot() throws {
        guard getuid() != 0 else { return }
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        guard allowsOtherUsers(text: text) else {
            throw KeychainError.mountFailed(
                "--allow-root (or allow-root in the config) needs the line 'user_allow_other' in \(path) "
                + "when a normal user mounts; as root: echo user_allow_other >> \(path)")
        }
    }
}
