// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif

/// Where keychainfs keeps its files, after the XDG base directory spec.
public enum KeychainLocations {
    /// One variable with getenv, rather than ProcessInfo's dictionary of all of them.
    static func env(_ name: String) -> String? { getenv(name).map { String(cString: $0) } }
    package static var home: String { env("HOME") ?? passwdHome ?? "/" }

    /// The home directory of this user's passwd entry, for an environment without HOME.
    private static var passwdHome: String? {
        // A static executable (the front, the git helper) reads /etc/passwd itself: glibc's
        // getpwuid would load the NSS modules nsswitch.conf names (systemd's, and with it a
        // second libc) into a process that has no loader, and crashed there for a user that
        // only such a module knows (a DynamicUser service). Such a user needs HOME set.
        if !hasLoader { return filesHome(getuid()) }
        guard let entry = getpwuid(getuid()), let dir = entry.pointee.pw_dir else { return nil }
        return String(cString: dir)
    }

    /// Whether a dynamic loader started this process: the auxiliary vector's AT_BASE (7), the
    /// loader's address, is 0 in a static executable. Read from /proc: Swift's Glibc module
    /// has no getauxval. Read once: it cannot change.
    private static let hasLoader: Bool = {
        // Without /proc, as if static: /etc/passwd never crashes, NSS might.
        let fd = open("/proc/self/auxv", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var pair = (UInt(0), UInt(0))
        while withUnsafeMutableBytes(of: &pair, { read(fd, $0.baseAddress, $0.count) }) == MemoryLayout.size(ofValue: pair) {
            if pair.0 == 0 { break }
            if pair.0 == 7 { return pair.1 != 0 }
        }
        return false
    }()

    /// `uid`'s home in /etc/passwd, read without NSS.
    private static func filesHome(_ uid: uid_t) -> String? {
        guard let file = fopen("/etc/passwd", "re") else { return nil }
        defer { fclose(file) }
        while let entry = fgetpwent(file) {
            if entry.pointee.pw_uid == uid, let dir = entry.pointee.pw_dir { return String(cString: dir) }
        }
        return nil
    }

    private static func xdg(_ name: String, _ fallback: String) -> String {
        if let v = env(name), PathText.isAbsolute(v) { return v }
        return home + "/" + fallback
    }

    /// `--store`, else `KEYCHAINFS_STORE`, else `$XDG_DATA_HOME/keychainfs/keychain.db`.
    public static func store(_ explicit: String? = nil) -> String {
        if let explicit, !explicit.isEmpty { return absolute(explicit) }
        if let v = env("KEYCHAINFS_STORE"), !v.isEmpty { return absolute(v) }
        return xdg("XDG_DATA_HOME", ".local/share") + "/keychainfs/keychain.db"
    }

    /// `$XDG_CONFIG_HOME`, by default `~/.config`: the configuration file and systemd user units.
    package static var configHome: String { xdg("XDG_CONFIG_HOME", ".config") }

    /// The device key: outside every store, so that copying a store does not copy it.
    public static var deviceKey: String { stateDirectory + "/device.key" }

    /// The device key, the daemon's log: per machine, outside every store.
    package static var stateDirectory: String { xdg("XDG_STATE_HOME", ".local/state") + "/keychainfs" }

    /// Control sockets and mount records, in a 0700 directory.
    package static var runtimeDirectory: String {
        if let v = env("XDG_RUNTIME_DIR"), PathText.isAbsolute(v) { return v + "/keychainfs" }
        return "/tmp/keychainfs-\(getuid())"
    }

    package static func absolute(_ path: String) -> String {
        if PathText.isAbsolute(path) { return path }
        return FileManager.default.currentDirectoryPath + "/" + path
    }

    /// `mkdir -p`: the parents made get `parentMode`, `path` itself `lastMode` (both less the
    /// umask, which can narrow them, never widen). With mkdir(2), not FileManager, whose error
    /// text would link all of Foundation into the small clients.
    package static func makeDirectories(_ path: String, lastMode: mode_t = 0o777, parentMode: mode_t = 0o777) throws {
        var prefix = PathText.isAbsolute(path) ? "" : "."
        let parts = PathText.split(path)
        for (i, part) in parts.enumerated() {
            prefix += "/" + part
            if mkdir(prefix, i == parts.count - 1 ? lastMode : parentMode) != 0 && errno != EEXIST {
                throw KeychainError.io("cannot create \(prefix): \(String(cString: strerror(errno)))")
            }
        }
    }

    /// Creates `path` and its parents; the last component gets `mode`, the parents made 0700 (as
    /// the XDG spec asks of a missing base directory: a `$XDG_STATE_HOME` made open to others
    /// would let them swap our state directory for theirs). An existing directory must be ours
    /// and not a symlink: the runtime directory's fallback is in /tmp, where another user could
    /// have made it first to catch passphrases sent to the daemon.
    ///
    /// With `onlyIfNew` (a store's directory, which the user chose) an existing directory is
    /// used as it is, whoever owns it, and only the directories made here get `mode`: `init
    /// --store /tmp/k.db` must not make /tmp private.
    package static func makeDirectory(_ path: String, mode: mode_t = 0o700, onlyIfNew: Bool = false) throws {
        if onlyIfNew {
            var missing: [String] = []
            var dir = path.isEmpty ? "." : path
            var st = stat()
            while !dir.isEmpty && stat(dir, &st) != 0 {
                missing.insert(dir, at: 0)
                dir = PathText.parent(dir)
            }
            if missing.isEmpty {
                guard st.st_mode & S_IFMT == S_IFDIR else { throw KeychainError.io("\(path) is not a directory") }
                return
            }
            for d in missing where mkdir(d, mode) != 0 && errno != EEXIST {
                throw KeychainError.io("cannot create \(d): \(String(cString: strerror(errno)))")
            }
            for d in missing { _ = chmod(d, mode) }
            return
        }
        try makeDirectories(path, lastMode: mode, parentMode: 0o700)
        var st = stat()
        guard lstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFDIR, st.st_uid == getuid(), chmod(path, mode) == 0 else {
            throw KeychainError.io("\(path) is not a directory owned by this user; refusing to use it")
        }
    }
}
