#define _GNU_SOURCE
#include "CProcessPin.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_kcmp
#define SYS_kcmp 312
#endif
#ifndef KCMP_VM
#define KCMP_VM 1
#endif
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

int kcfs_pidfd_open(pid_t pid) {
    /* pidfd_open's descriptors are always close-on-exec. */
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

int kcfs_peer_pidfd(int socket) {
    int pidfd = -1;
    socklen_t len = sizeof(pidfd);
    if (getsockopt(socket, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) != 0) return -1;
    if (len != sizeof(pidfd) || pidfd < 0) { errno = ENOPROTOOPT; return -1; }
    return pidfd;
}

int kcfs_pidfd_alive(int pidfd) {
    struct pollfd p = { .fd = pidfd, .events = POLLIN, .revents = 0 };
    int n;
    do { n = poll(&p, 1, 0); } while (n < 0 && errno == EINTR);
    if (n < 0) return -1;
    if (p.revents & POLLNVAL) { errno = EBADF; return -1; }
    return n == 0 ? 1 : 0;
}

int kcfs_spawn_close_from(posix_spawn_file_actions_t *actions, int from) {
    return posix_spawn_file_actions_addclosefrom_np(actions, from);
}

/* "/proc/PID/NAME"; false when it does not fit (a name of ours never is that long). */
static int proc_path(char *path, size_t size, pid_t pid, const char *name) {
    int n = snprintf(path, size, "/proc/%d/%s", (int)pid, name);
    if (n < 0 || (size_t)n >= size) { errno = ENAMETOOLONG; return 0; }
    return 1;
}

int kcfs_proc_open(pid_t pid, const char *name, int flags) {
    char path[64];
    if (!proc_path(path, sizeof path, pid, name)) return -1;
    return open(path, flags | O_CLOEXEC);
}

int kcfs_proc_stat(pid_t pid, const char *name, struct stat *st) {
    char path[64];
    if (!proc_path(path, sizeof path, pid, name)) return -1;
    return stat(path, st);
}

ssize_t kcfs_proc_readlink(pid_t pid, const char *name, char *buffer, size_t size) {
    char path[64];
    if (!proc_path(path, sizeof path, pid, name)) return -1;
    return readlink(path, buffer, size);
}

int kcfs_shares_memory(pid_t a, pid_t b) {
    if (a <= 0 || b <= 0) { errno = ESRCH; return -1; }
    long r = syscall(SYS_kcmp, a, b, KCMP_VM, 0, 0);
    if (r < 0) return -1;
    return r == 0 ? 1 : 0;
}
