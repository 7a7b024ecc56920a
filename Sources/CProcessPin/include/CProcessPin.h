#ifndef KEYCHAINFS_CPROCESSPIN_H
#define KEYCHAINFS_CPROCESSPIN_H

#include <spawn.h>
#include <sys/stat.h>
#include <sys/types.h>

/* pidfd_open(2) and SO_PEERPIDFD, which Swift cannot reach: syscall(2) is variadic and
 * Glibc's Swift module does not export <sys/pidfd.h>. Both return a close-on-exec pidfd, or
 * -1 with errno set (ENOPROTOOPT from kcfs_peer_pidfd where the kernel predates 6.5). */
int kcfs_pidfd_open(pid_t pid);
int kcfs_peer_pidfd(int socket);

/* recv(2) on a connected Unix stream socket with SO_PASSCRED set, and the pid of the process
 * that sent what was read (SCM_CREDENTIALS: the kernel's record of the writer, which a sender
 * can set to another process's pid only with CAP_SYS_ADMIN over that process's pid namespace; one read never joins two writers' bytes). *sender is 0
 * when the kernel attached none. Returns what recvmsg returns. */
ssize_t kcfs_recv_sender(int socket, void *buffer, size_t size, pid_t *sender);

/* 1 while the process a pidfd refers to runs, 0 once it has exited (its pid may then be
 * anyone's), -1 on error. A pidfd becomes readable when its process exits. */
int kcfs_pidfd_alive(int pidfd);

/* posix_spawn_file_actions_addclosefrom_np (glibc 2.34), declared only under _GNU_SOURCE:
 * a spawned pinentry gets its three descriptors and none of the daemon's. */
int kcfs_spawn_close_from(posix_spawn_file_actions_t *actions, int from);

/* /proc/PID/NAME without building the path on the heap: identifying a new caller is a
 * handful of these, on the path of every first open of a guarded item. Each returns what
 * its system call does (-1 with errno set). kcfs_proc_open adds O_CLOEXEC; kcfs_proc_stat
 * follows a final link (exe names the running image's file); kcfs_proc_readlink does not
 * terminate the text. */
int kcfs_proc_open(pid_t pid, const char *name, int flags);
int kcfs_proc_stat(pid_t pid, const char *name, struct stat *st);
ssize_t kcfs_proc_readlink(pid_t pid, const char *name, char *buffer, size_t size);

/* The stat of the user namespace of the process `pidfd` pins (`pid`): its nsfs inode, as
 * a stat of /proc/PID/ns/user gives it (which this falls back to on kernels without
 * PIDFD_GET_USER_NAMESPACE). 0, or -1 with errno set (EACCES: not ours to inspect). */
int kcfs_user_namespace(int pidfd, pid_t pid, struct stat *st);

/* 1 when processes a and b share one address space (kcmp KCMP_VM: a vfork child and its
 * parent until the child execs), 0 when not, -1 when the kernel will not say (no kcmp, or
 * either process not ours to inspect). */
int kcfs_shares_memory(pid_t a, pid_t b);

/* The Tgid, PPid and TracerPid of a /proc/PID/status text; each -1 when missing (missing is
 * not zero: a caller checking for a tracer fails closed). */
struct kcfs_status_ids { pid_t tgid, ppid, tracer; };
void kcfs_parse_status(const unsigned char *text, size_t n, struct kcfs_status_ids *out);
/* The same of an open /proc/PID/status, reread from offset 0 into a stack buffer: every new
 * caller of a guarded item, and every later request of a known one, reads it. 0, or -1 with
 * errno set (ESRCH when it reads nothing). */
int kcfs_read_status_ids(int fd, struct kcfs_status_ids *out);

/* Which loader variables an environment sets to something non-empty (bits below), and where
 * its TERM value is (offset -1: none). */
#define KCFS_LD_PRELOAD 1u
#define KCFS_LD_AUDIT 2u
#define KCFS_LD_LIBRARY_PATH 4u
struct kcfs_environment { unsigned loader; long term_offset, term_length; };
void kcfs_scan_environment(const unsigned char *b, size_t n, struct kcfs_environment *out);
/* An open /proc/PID/environ, read whole from offset 0 into the stack and scanned; TERM's
 * value is copied to `term` (term_length -1: none, -2: longer than term_size). Returns the
 * environment's size, -2 when it may be larger than the stack buffer (the caller reads it
 * whole another way), or -1 with errno set. */
#define KCFS_ENVIRONMENT_FAST 16384
long kcfs_read_environment(int fd, struct kcfs_environment *out, unsigned char *term, size_t term_size, long *term_length);

/* Names the calling thread (at most 15 bytes are kept) and puts it in the idle scheduling
 * class (SCHED_IDLE): it runs when its CPU has nothing else to run. 0, or -1 with errno set. */
int kcfs_idle_thread(const char *name);

#endif

/* Whether the address space a /proc/PID/pagemap descriptor was opened on is still in use: 1
 * while it is (the process has not exec'd or exited), 0 once no process uses it, -1 with errno
 * set on anything else. A 1-byte read is refused (EINVAL: pagemap reads 8-byte entries) after
 * the kernel has taken a use of the address space, and reads nothing when it cannot: no page
 * is touched and the address space's lock is not taken, so another process holding that lock
 * cannot make the check wait. */
int kcfs_address_space_in_use(int pagemap);

/* 1 when fstat of a descriptor on this file system is answered from memory (local disk file
 * systems and tmpfs), 0 when it may wait on something outside the kernel (FUSE, NFS, and any
 * other not known), -1 with errno set. On the first kind every write is this kernel's, so
 * inotify hears them all (the store's files' watch, KeychainStore). */
int kcfs_stat_is_local(int fd);

/* CLOCK_MONOTONIC in nanoseconds. */
unsigned long long kcfs_monotonic_ns(void);
