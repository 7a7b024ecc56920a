#include "CFuseShim.h"
#include <fuse3/fuse_lowlevel.h>
#include <errno.h>
#include <linux/fuse.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

struct fuse *kcfs_fuse_new(int argc, char **argv, const struct fuse_operations *ops, void *user_data) {
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    struct fuse *f = fuse_new(&args, ops, sizeof(*ops), user_data);
    fuse_opt_free_args(&args);
    return f;
}

/*
 * Secrets pass through two buffers of libfuse's: a write's payload arrives in the worker's
 * request buffer (kept for the worker's life), and a read's reply is sent from a buffer that
 * the high-level API mallocs, fills through our read() and frees without wiping. Both are
 * wiped here, in the session's I/O, right after the reply to that request is written:
 * a worker thread receives a request, runs our callback and replies, all on the same thread,
 * so the thread's last request is the one whose reply goes out.
 */
struct kcfs_request {
    uint64_t unique;
    uint64_t nodeid;
    uint32_t opcode;
    void *buf;
    size_t len;
};

static _Thread_local struct kcfs_request current;

static ssize_t kcfs_io_read(int fd, void *buf, size_t buf_len, void *userdata) {
    (void) userdata;
    ssize_t res = read(fd, buf, buf_len);
    if (res >= (ssize_t) sizeof(struct fuse_in_header)) {
        const struct fuse_in_header *in = buf;
        current = (struct kcfs_request) {
            .unique = in->unique, .nodeid = in->nodeid, .opcode = in->opcode, .buf = buf, .len = (size_t) res,
        };
    } else {
        int saved = errno;
        current = (struct kcfs_request) {0};
        errno = saved;
    }
    return res;
}

static ssize_t kcfs_io_writev(int fd, struct iovec *iov, int count, void *userdata) {
    (void) userdata;
    ssize_t res = writev(fd, iov, count);
    int saved = errno;
    if (count > 0 && iov[0].iov_len >= sizeof(struct fuse_out_header) && current.buf != NULL) {
        const struct fuse_out_header *out = iov[0].iov_base;
        /* unique 0 is a notification, never a reply. */
        if (out->unique != 0 && out->unique == current.unique) {
            if (current.opcode == FUSE_READ) {
                for (int i = 1; i < count; i++) explicit_bzero(iov[i].iov_base, iov[i].iov_len);
            } else if (current.opcode == FUSE_WRITE) {
                explicit_bzero(current.buf, current.len);
            }
            current.buf = NULL;
        }
    }
    errno = saved;
    return res;
}

/* SIGTERM, SIGINT and SIGHUP end the loop, so the daemon unmounts and wipes its keys. */
int kcfs_fuse_mount(struct fuse *f, const char *mountpoint) {
    if (fuse_mount(f, mountpoint) != 0) return -1;
    struct fuse_session *se = fuse_get_session(f);
    /* No splice: it would copy requests and replies through pipes and buffers we do not see. */
    const struct fuse_custom_io io = { .read = kcfs_io_read, .writev = kcfs_io_writev };
    if (fuse_session_custom_io(se, &io, fuse_session_fd(se)) != 0) { fuse_unmount(f); return -1; }
    if (fuse_set_signal_handlers(se) != 0) { fuse_unmount(f); return -1; }
    return 0;
}

uint64_t kcfs_current_nodeid(void) { return current.nodeid; }

int kcfs_invalidate_inode(struct fuse *f, uint64_t nodeid) {
    return fuse_lowlevel_notify_inval_inode(fuse_get_session(f), nodeid, 0, 0);
}

/* The same multi-threaded loop fuse_main uses. */
int kcfs_fuse_loop(struct fuse *f) { return fuse_loop_mt(f, 0); }

void kcfs_fuse_unmount_and_destroy(struct fuse *f) {
    fuse_remove_signal_handlers(fuse_get_session(f));
    fuse_unmount(f);
    fuse_destroy(f);
}

void *kcfs_private_data(void) { return fuse_get_context()->private_data; }


#include <sys/prctl.h>
#include <sys/resource.h>

/* Not dumpable: no core file, no ptrace attach by other processes of the same user. */
int kcfs_harden_process(void) {
    struct rlimit none = {0, 0};
    int a = prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    int b = setrlimit(RLIMIT_CORE, &none);
    return a == 0 && b == 0 ? 0 : -1;
}
