#include "CFuseShim.h"
#include <errno.h>
#include <linux/fuse.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

struct fuse_session *kcfs_session_new(int argc, char **argv, const struct fuse_lowlevel_ops *ops, void *user_data) {
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    struct fuse_session *se = fuse_session_new(&args, ops, sizeof(*ops), user_data);
    fuse_opt_free_args(&args);
    return se;
}

/*
 * A write's payload arrives in the worker's request buffer, which the binding does not own
 * and libfuse keeps for the worker's life. It is wiped here, in the session's I/O, right after
 * the reply to that request is written: a worker thread receives a request, runs our callback
 * and replies, all on the same thread, so the thread's last request is the one whose reply
 * goes out. A read's reply needs no wipe: without splice, libfuse writes it straight from the
 * open file's locked buffer (fuse_reply_buf's iovec points at it), and no copy is made.
 */
struct kcfs_request {
    uint64_t unique;
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
        current = (struct kcfs_request) { .unique = in->unique, .opcode = in->opcode, .buf = buf, .len = (size_t) res };
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
            if (current.opcode == FUSE_WRITE) {
                explicit_bzero(current.buf, current.len);
            }
            current.buf = NULL;
        }
    }
    errno = saved;
    return res;
}

/* SIGTERM, SIGINT and SIGHUP end the loop, so the daemon unmounts and wipes its keys. */
int kcfs_session_mount(struct fuse_session *se, const char *mountpoint) {
    if (fuse_session_mount(se, mountpoint) != 0) return -1;
    /* No splice: it would copy requests and replies through pipes and buffers we do not see. */
    const struct fuse_custom_io io = { .read = kcfs_io_read, .writev = kcfs_io_writev };
    if (fuse_session_custom_io(se, &io, fuse_session_fd(se)) != 0) { fuse_session_unmount(se); return -1; }
    if (fuse_set_signal_handlers(se) != 0) { fuse_session_unmount(se); return -1; }
    return 0;
}

int kcfs_invalidate_inode(struct fuse_session *se, uint64_t nodeid) {
    return fuse_lowlevel_notify_inval_inode(se, nodeid, 0, 0);
}

int kcfs_notify_inval_entry(struct fuse_session *se, uint64_t parent, const char *name) {
    return fuse_lowlevel_notify_inval_entry(se, parent, name, strlen(name));
}

int kcfs_notify_delete(struct fuse_session *se, uint64_t parent, uint64_t child, const char *name) {
    return fuse_lowlevel_notify_delete(se, parent, child, name, strlen(name));
}

/* The multi-threaded loop, as fuse_main runs it. */
int kcfs_session_loop(struct fuse_session *se) { return fuse_session_loop_mt(se, 0); }

void kcfs_session_unmount_and_destroy(struct fuse_session *se) {
    fuse_remove_signal_handlers(se);
    fuse_session_unmount(se);
    fuse_session_destroy(se);
}
