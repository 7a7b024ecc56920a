#define _GNU_SOURCE /* pipe2 */
#include "CFuseShim.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <linux/fuse.h>
#include <sys/eventfd.h>
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

/*
 * SIGTERM, SIGINT and SIGHUP stop the daemon as an unmount does. The handler only wakes the
 * loop's main thread through a pipe; that thread runs the binding's `stopping` while the
 * workers still serve (the keys are forgotten and the kernel's cached pages of items dropped,
 * which needs a worker to answer the reads those pages wait on), then ends the session.
 * libfuse's own handler ended the session at once: the pages stayed in a private mapping after
 * the daemon was gone, and the main thread slept on until the next request when the signal
 * ran on another thread (the kernel passes the main thread by when it already has one
 * pending) or came between the thread's check and its wait, with the mount up meanwhile.
 * One session per process takes the signals, as with libfuse's handlers; the pipe lives as
 * long as the process, since a handler may still be writing to it on another thread.
 */
static const int kcfs_stop_signals[] = { SIGTERM, SIGINT, SIGHUP };
static struct fuse_session *volatile kcfs_stop_session;
static int kcfs_stop_pipe[2] = { -1, -1 };
static pthread_once_t kcfs_stop_pipe_once = PTHREAD_ONCE_INIT;

static void kcfs_make_stop_pipe(void) {
    if (pipe2(kcfs_stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) kcfs_stop_pipe[0] = kcfs_stop_pipe[1] = -1;
}

static void kcfs_stop_handler(int sig) {
    (void) sig;
    int saved = errno;
    /* Non-blocking: a full pipe already wakes the loop. */
    char byte = 0;
    (void) !write(kcfs_stop_pipe[1], &byte, 1);
    errno = saved;
}

static void kcfs_drain(int fd) {
    char drain[64];
    while (read(fd, drain, sizeof drain) > 0) {}
}

/* Installs the handler where the signal is not already handled or ignored (as libfuse does:
 * `nohup` keeps SIGHUP ignored); SIGPIPE is ignored, a closed peer is an EPIPE. */
static int kcfs_set_stop_handlers(struct fuse_session *se) {
    pthread_once(&kcfs_stop_pipe_once, kcfs_make_stop_pipe);
    if (kcfs_stop_pipe[0] < 0) return -1;
    /* A signal that came after an earlier session of this process ended is not for this one. */
    kcfs_drain(kcfs_stop_pipe[0]);
    kcfs_stop_session = se;
    struct sigaction sa = { .sa_handler = kcfs_stop_handler, .sa_flags = SA_RESTART };
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof kcfs_stop_signals / sizeof *kcfs_stop_signals; i++) {
        struct sigaction old;
        if (sigaction(kcfs_stop_signals[i], NULL, &old) != 0) return -1;
        if (old.sa_handler == SIG_DFL && sigaction(kcfs_stop_signals[i], &sa, NULL) != 0) return -1;
    }
    struct sigaction pipe_old, ignore = { .sa_handler = SIG_IGN };
    sigemptyset(&ignore.sa_mask);
    if (sigaction(SIGPIPE, NULL, &pipe_old) == 0 && pipe_old.sa_handler == SIG_DFL) sigaction(SIGPIPE, &ignore, NULL);
    return 0;
}

static void kcfs_remove_stop_handlers(struct fuse_session *se) {
    struct sigaction dfl = { .sa_handler = SIG_DFL };
    sigemptyset(&dfl.sa_mask);
    for (size_t i = 0; i < sizeof kcfs_stop_signals / sizeof *kcfs_stop_signals; i++) {
        struct sigaction old;
        if (sigaction(kcfs_stop_signals[i], NULL, &old) == 0 && old.sa_handler == kcfs_stop_handler)
            sigaction(kcfs_stop_signals[i], &dfl, NULL);
    }
    if (kcfs_stop_session == se) kcfs_stop_session = NULL;
}

int kcfs_session_mount(struct fuse_session *se, const char *mountpoint) {
    if (fuse_session_mount(se, mountpoint) != 0) return -1;
    /* No splice: it would copy requests and replies through pipes and buffers we do not see. */
    const struct fuse_custom_io io = { .read = kcfs_io_read, .writev = kcfs_io_writev };
    if (fuse_session_custom_io(se, &io, fuse_session_fd(se)) != 0) { fuse_session_unmount(se); return -1; }
    if (kcfs_set_stop_handlers(se) != 0) { kcfs_remove_stop_handlers(se); fuse_session_unmount(se); return -1; }
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

/*
 * The loop: one worker at a time reads /dev/fuse (the leader) and answers what it read; the
 * others wait for their turn. A listing's 20,000 getxattr round trips, or a reader's open,
 * read and release, are then served as by a single-threaded daemon, by one warm thread.
 * libfuse's own multi-threaded loop has every idle worker block in read(2), and the kernel
 * wakes the one that has waited longest, so each request went to another thread (a sixth of
 * an `ls -l` of 10,000 in the daemon's CPU time).
 * Before anything that may wait, the leader passes the lead to an idle worker (or starts
 * one, up to libfuse's default of 10), so that the wait holds up no one else: the binding
 * calls kcfs_loop_pass_lead() before asking the user about a program and before a commit
 * (ServedKeychain's `beforeWaiting`), and the few requests that are waits in themselves
 * (fsync, and any this list does not know) pass it before they are answered.
 */
#define KCFS_MAX_WORKERS 10

struct kcfs_loop {
    struct fuse_session *se;
    pthread_mutex_t lock;
    pthread_cond_t turn;   /* an idle worker may lead */
    int ended;             /* eventfd: a worker saw the session end */
    int leading;           /* a worker reads, or answers what it read */
    int idle;              /* workers waiting in `turn` */
    int workers;
    int exit;
    int error;
    pthread_t threads[KCFS_MAX_WORKERS];
};

/* The loop this thread leads, while it does. */
static _Thread_local struct kcfs_loop *kcfs_leading;

/* Requests that never wait but through a call that passes the lead (see above). */
static int kcfs_is_quick(const struct fuse_buf *buf) {
    if (buf->flags & FUSE_BUF_IS_FD || buf->size < sizeof(struct fuse_in_header)) return 0;
    switch (((const struct fuse_in_header *) buf->mem)->opcode) {
    case FUSE_LOOKUP: case FUSE_FORGET: case FUSE_BATCH_FORGET: case FUSE_GETATTR: case FUSE_SETATTR:
    case FUSE_OPENDIR: case FUSE_READDIR: case FUSE_READDIRPLUS: case FUSE_RELEASEDIR:
    case FUSE_GETXATTR: case FUSE_LISTXATTR: case FUSE_SETXATTR: case FUSE_REMOVEXATTR:
    case FUSE_OPEN: case FUSE_READ: case FUSE_WRITE: case FUSE_FLUSH: case FUSE_RELEASE: case FUSE_LSEEK:
    case FUSE_CREATE: case FUSE_MKDIR: case FUSE_UNLINK: case FUSE_RMDIR: case FUSE_RENAME: case FUSE_RENAME2:
    case FUSE_STATFS: case FUSE_INTERRUPT:
        return 1;
    default:
        return 0;
    }
}

static void *kcfs_worker(void *arg);

/* Under l->lock. Signals go to the main thread, as in libfuse's loop. */
static int kcfs_start_worker(struct kcfs_loop *l) {
    sigset_t blocked, old;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGTERM);
    sigaddset(&blocked, SIGINT);
    sigaddset(&blocked, SIGHUP);
    sigaddset(&blocked, SIGQUIT);
    pthread_sigmask(SIG_BLOCK, &blocked, &old);
    int res = pthread_create(&l->threads[l->workers], NULL, kcfs_worker, l);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (res != 0) return -1;
    l->workers++;
    return 0;
}

/* Under l->lock: the lead goes to an idle worker, or to a new one. */
static void kcfs_pass_lead_locked(struct kcfs_loop *l) {
    l->leading = 0;
    if (l->idle > 0) pthread_cond_signal(&l->turn);
    else if (l->workers < KCFS_MAX_WORKERS && !l->exit) kcfs_start_worker(l);
}

void kcfs_loop_pass_lead(void) {
    struct kcfs_loop *l = kcfs_leading;
    if (l == NULL) return;
    kcfs_leading = NULL;
    pthread_mutex_lock(&l->lock);
    kcfs_pass_lead_locked(l);
    pthread_mutex_unlock(&l->lock);
}

static void *kcfs_worker(void *arg) {
    struct kcfs_loop *l = arg;
    struct fuse_buf buf = { .mem = NULL };
    /* Cancelled (at unmount) only while it waits in read(2), never with a lock held. */
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    pthread_mutex_lock(&l->lock);
    while (!l->exit) {
        if (l->leading) {
            l->idle++;
            pthread_cond_wait(&l->turn, &l->lock);
            l->idle--;
            continue;
        }
        l->leading = 1;
        pthread_mutex_unlock(&l->lock);
        kcfs_leading = l;
        int res;
        for (;;) {
            if (fuse_session_exited(l->se)) { res = 0; break; }
            pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
            res = fuse_session_receive_buf(l->se, &buf);
            pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
            if (res == -EINTR) continue;
            if (res <= 0) break;
            if (!kcfs_is_quick(&buf)) kcfs_loop_pass_lead();
            fuse_session_process_buf(l->se, &buf);
            /* Passed on while answering: another worker reads now. */
            if (kcfs_leading == NULL) break;
        }
        pthread_mutex_lock(&l->lock);
        if (res <= 0) {
            kcfs_leading = NULL;
            l->leading = 0;
            if (res < 0 && l->error == 0) l->error = res;
            fuse_session_exit(l->se);
            l->exit = 1;
            pthread_cond_broadcast(&l->turn);
            uint64_t one = 1;
            (void) !write(l->ended, &one, sizeof one);
            break;
        }
    }
    pthread_mutex_unlock(&l->lock);
    free(buf.mem);
    return NULL;
}

int kcfs_session_loop(struct fuse_session *se, void (*stopping)(void *), void (*ending)(void *), void *context) {
    struct kcfs_loop l = { .se = se, .ended = eventfd(0, EFD_CLOEXEC) };
    if (l.ended < 0) return -errno;
    pthread_mutex_init(&l.lock, NULL);
    pthread_cond_init(&l.turn, NULL);
    pthread_mutex_lock(&l.lock);
    int started = kcfs_start_worker(&l);
    pthread_mutex_unlock(&l.lock);
    if (started != 0) { close(l.ended); return -EAGAIN; }
    /* The session ends by a worker (unmounted) or by a stop signal; each writes before this
     * thread looks again, so neither is missed between the look and the wait. */
    struct pollfd wake[2] = { { .fd = l.ended, .events = POLLIN }, { .fd = -1, .events = POLLIN } };
    if (kcfs_stop_session == se) wake[1].fd = kcfs_stop_pipe[0];
    while (!fuse_session_exited(se)) {
        if (poll(wake, 2, -1) <= 0 || !(wake[1].revents & POLLIN)) continue;
        kcfs_drain(wake[1].fd);
        if (stopping) stopping(context);
        fuse_session_exit(se);
    }
    /* Outside l.lock: a worker in a prompt answers its caller and comes back to take it. */
    if (ending) ending(context);
    pthread_mutex_lock(&l.lock);
    l.exit = 1;
    pthread_cond_broadcast(&l.turn);
    for (int i = 0; i < l.workers; i++) pthread_cancel(l.threads[i]);
    int workers = l.workers;
    pthread_mutex_unlock(&l.lock);
    for (int i = 0; i < workers; i++) pthread_join(l.threads[i], NULL);
    pthread_cond_destroy(&l.turn);
    pthread_mutex_destroy(&l.lock);
    close(l.ended);
    return l.error;
}

void kcfs_session_unmount_and_destroy(struct fuse_session *se) {
    kcfs_remove_stop_handlers(se);
    fuse_session_unmount(se);
    fuse_session_destroy(se);
}

/*
 * A mount detached by `unmount` (fusermount -u) ends the kernel's connection, and so the loop,
 * only once no mount namespace has a copy of it: one made while it was mounted (`unshare -m`,
 * a container, a systemd service's private mounts) keeps the superblock, and the loop serving,
 * with every key, until it goes. So the unmount also ends the session as a stop signal does,
 * through the same pipe; closing /dev/fuse then ends the connection for every copy.
 */
int kcfs_session_stop(struct fuse_session *se) {
    if (kcfs_stop_session != se || kcfs_stop_pipe[1] < 0) return -1;
    char byte = 0;
    /* Non-blocking: a full pipe already wakes the loop. */
    if (write(kcfs_stop_pipe[1], &byte, 1) != 1 && errno != EAGAIN) return -1;
    return 0;
}

void kcfs_session_destroy_detached(struct fuse_session *se) {
    kcfs_remove_stop_handlers(se);
    /* Closes the session's /dev/fuse descriptor, the daemon's only one. */
    fuse_session_destroy(se);
}
