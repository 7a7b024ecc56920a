#define _GNU_SOURCE
#include "CProcessPin.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/vfs.h>
#include <time.h>
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

ssize_t kcfs_recv_sender(int socket, void *buffer, size_t size, pid_t *sender) {
    struct iovec iov = { .iov_base = buffer, .iov_len = size };
    union { struct cmsghdr align; char bytes[CMSG_SPACE(sizeof(struct ucred))]; } control;
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.bytes, .msg_controllen = sizeof control.bytes };
    *sender = 0;
    ssize_t n = recvmsg(socket, &m, MSG_CMSG_CLOEXEC);
    if (n <= 0) return n;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c != NULL; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
            struct ucred cred;
            memcpy(&cred, CMSG_DATA(c), sizeof cred);
            *sender = cred.pid;
        }
    }
    return n;
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

/* "/proc/PID/NAME", built by hand: snprintf's format engine cost about a microsecond a call,
 * and a new caller of a guarded item is a handful of these. False when it does not fit (a
 * name of ours never is that long). */
static int proc_path(char *path, size_t size, pid_t pid, const char *name) {
    static const char prefix[] = "/proc/";
    char digits[12];
    size_t nd = 0;
    unsigned long v = pid < 0 ? 0 : (unsigned long)pid;
    if (pid < 0) { errno = ESRCH; return 0; }
    do { digits[nd++] = (char)('0' + v % 10); v /= 10; } while (v != 0);
    size_t nn = strlen(name);
    if (sizeof prefix - 1 + nd + 1 + nn + 1 > size) { errno = ENAMETOOLONG; return 0; }
    char *p = path;
    memcpy(p, prefix, sizeof prefix - 1);
    p += sizeof prefix - 1;
    while (nd > 0) *p++ = digits[--nd];
    *p++ = '/';
    memcpy(p, name, nn + 1);
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

#ifndef PIDFD_GET_USER_NAMESPACE
#define PIDFD_GET_USER_NAMESPACE _IO(0xFF, 9)
#endif

int kcfs_user_namespace(int pidfd, pid_t pid, struct stat *st) {
    /* On a new pid the ioctl costs about a third of the stat of /proc/PID/ns/user, which
     * makes the ns directory's entries first (measured, kernel 6.18). */
    int fd = ioctl(pidfd, PIDFD_GET_USER_NAMESPACE, 0);
    if (fd >= 0) {
        int r = fstat(fd, st);
        int saved = errno;
        close(fd);
        errno = saved;
        return r;
    }
    /* Before Linux 6.11 pidfs has no such ioctl. */
    if (errno != ENOTTY && errno != EINVAL) return -1;
    return kcfs_proc_stat(pid, "ns/user", st);
}

int kcfs_shares_memory(pid_t a, pid_t b) {
    if (a <= 0 || b <= 0) { errno = ESRCH; return -1; }
    long r = syscall(SYS_kcmp, a, b, KCMP_VM, 0, 0);
    if (r < 0) return -1;
    return r == 0 ? 1 : 0;
}

/* The decimal after `key` at the start of line text[0..n), or -1. */
static long line_value(const unsigned char *line, size_t n, const char *key) {
    size_t kn = strlen(key), i;
    if (n <= kn || memcmp(line, key, kn) != 0) return -1;
    for (i = kn; i < n && (line[i] == ' ' || line[i] == '\t'); i++) {}
    if (i >= n || line[i] < '0' || line[i] > '9') return -1;
    long v = 0;
    for (; i < n && line[i] >= '0' && line[i] <= '9'; i++) {
        if (v > 0x7fffffffL / 10) return -1;
        v = v * 10 + (line[i] - '0');
    }
    return v;
}

void kcfs_parse_status(const unsigned char *text, size_t n, struct kcfs_status_ids *out) {
    out->tgid = out->ppid = out->tracer = -1;
    size_t i = 0;
    while (i < n && (out->tgid < 0 || out->ppid < 0 || out->tracer < 0)) {
        const unsigned char *nl = memchr(text + i, '\n', n - i);
        size_t end = nl ? (size_t)(nl - text) : n;
        long v;
        if ((v = line_value(text + i, end - i, "Tgid:")) >= 0) out->tgid = (pid_t)v;
        else if ((v = line_value(text + i, end - i, "PPid:")) >= 0) out->ppid = (pid_t)v;
        else if ((v = line_value(text + i, end - i, "TracerPid:")) >= 0) out->tracer = (pid_t)v;
        i = end + 1;
    }
}

int kcfs_read_status_ids(int fd, struct kcfs_status_ids *out) {
    /* Tgid, PPid and TracerPid are its 4th to 8th lines, after Name (a 16-byte comm, escaped
     * at most fourfold), Umask and State: well inside 512 bytes. The kernel renders the whole
     * file whatever is asked; only this much is copied out. */
    unsigned char buffer[512];
    ssize_t n;
    do { n = pread(fd, buffer, sizeof buffer, 0); } while (n < 0 && errno == EINTR);
    if (n < 0) return -1;
    if (n == 0) { errno = ESRCH; return -1; }
    kcfs_parse_status(buffer, (size_t)n, out);
    return 0;
}

static const struct { const char *entry; unsigned bit; } loader_names[] = {
    { "LD_PRELOAD=", KCFS_LD_PRELOAD }, { "LD_AUDIT=", KCFS_LD_AUDIT }, { "LD_LIBRARY_PATH=", KCFS_LD_LIBRARY_PATH },
};

void kcfs_scan_environment(const unsigned char *b, size_t n, struct kcfs_environment *out) {
    out->loader = 0;
    out->term_offset = -1;
    out->term_length = 0;
    size_t start = 0;
    while (start < n) {
        const unsigned char *z = memchr(b + start, 0, n - start);
        size_t end = z ? (size_t)(z - b) : n, len = end - start;
        const unsigned char *e = b + start;
        if (len > 0 && e[0] == 'L') {
            for (size_t k = 0; k < sizeof loader_names / sizeof loader_names[0]; k++) {
                size_t kn = strlen(loader_names[k].entry);
                /* Set to the empty string changes nothing the loader does. */
                if (len > kn && memcmp(e, loader_names[k].entry, kn) == 0) out->loader |= loader_names[k].bit;
            }
        } else if (len >= 5 && memcmp(e, "TERM=", 5) == 0) {
            out->term_offset = (long)(start + 5);
            out->term_length = (long)(len - 5);
        }
        start = end + 1;
    }
}

long kcfs_read_environment(int fd, struct kcfs_environment *out, unsigned char *term, size_t term_size, long *term_length) {
    /* Most environments are a few KiB; one read into the stack, no allocation. */
    unsigned char buffer[KCFS_ENVIRONMENT_FAST];
    ssize_t n;
    do { n = pread(fd, buffer, sizeof buffer, 0); } while (n < 0 && errno == EINTR);
    if (n < 0) return -1;
    if ((size_t)n == sizeof buffer) return -2;
    kcfs_scan_environment(buffer, (size_t)n, out);
    *term_length = -1;
    if (out->term_offset >= 0) {
        if ((size_t)out->term_length <= term_size) {
            memcpy(term, buffer + out->term_offset, (size_t)out->term_length);
            *term_length = out->term_length;
        } else {
            *term_length = -2;
        }
    }
    return (long)n;
}

int kcfs_address_space_in_use(int pagemap) {
    unsigned char byte;
    ssize_t n;
    do { n = pread(pagemap, &byte, 1, 0); } while (n < 0 && errno == EINTR);
    if (n == 0) return 0;
    if (n < 0 && errno == EINVAL) return 1;
    if (n >= 0) errno = EPROTO;
    return -1;
}

int kcfs_stat_is_local(int fd) {
    struct statfs s;
    if (fstatfs(fd, &s) != 0) return -1;
    switch ((unsigned long)s.f_type) {
    case 0xEF53UL:      /* ext2/3/4 */
    case 0x58465342UL:  /* xfs */
    case 0x9123683EUL:  /* btrfs */
    case 0xF2F52010UL:  /* f2fs */
    case 0x01021994UL:  /* tmpfs */
    case 0x73717368UL:  /* squashfs */
    case 0x858458F6UL:  /* ramfs */
        return 1;
    default:
        return 0;
    }
}

unsigned long long kcfs_monotonic_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ULL + (unsigned long long)t.tv_nsec;
}

int kcfs_idle_thread(const char *name) {
    (void)pthread_setname_np(pthread_self(), name);
    struct sched_param none = { .sched_priority = 0 };
    return sched_setscheduler(0, SCHED_IDLE, &none);
}
