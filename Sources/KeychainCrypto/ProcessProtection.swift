import CHardening

/// Keeps other processes of the same user from reading this one's memory: no core dumps, no
/// ptrace, no /proc/PID/mem. Every process that holds a passphrase or a key calls it first:
/// the tool, its small front, the mount daemon and the login unlock. The one such function.
package enum ProcessProtection {
    /// Idempotent; false if the kernel refused (the process then still runs).
    @discardableResult
    package static func makeNotDumpable() -> Bool { kcfs_make_not_dumpable() == 0 }
}
