#ifndef KEYCHAINFS_CFUSESHIM_H
#define KEYCHAINFS_CFUSESHIM_H

/* libfuse selects its ABI through macros (fuse_session_loop_mt) that Swift cannot call;
 * these functions pin the 3.1 API of the low-level interface for the Swift binding. */
#define FUSE_USE_VERSION 31
#include <fuse3/fuse_lowlevel.h>
#include <stdint.h>

struct fuse_session *kcfs_session_new(int argc, char **argv, const struct fuse_lowlevel_ops *ops, void *user_data);
/* Mounts with the session I/O that wipes libfuse's buffers, and the stop signals' handlers. */
int kcfs_session_mount(struct fuse_session *se, const char *mountpoint);
/* Serves until unmounted or stopped by a signal: one worker at a time reads and answers (see
 * shim.c). `stopping(context)` runs on a stop signal while the workers still serve, before the
 * session ends. `ending(context)` runs once the session has ended, before the workers are
 * joined: a worker waiting on something that only ends by itself (a prompt) is told to stop
 * waiting. */
int kcfs_session_loop(struct fuse_session *se, void (*stopping)(void *), void (*ending)(void *), void *context);
/* Called on a worker before it may wait (the user asked, a commit): another worker takes
 * over reading requests meanwhile. Does nothing on any other thread. */
void kcfs_loop_pass_lead(void);
/* Drops the kernel's cached pages of that node, so no memory mapping still shows them. */
int kcfs_invalidate_inode(struct fuse_session *se, uint64_t nodeid);
/* Tells the kernel that a name changed behind its back (through the control socket): it
 * forgets the dentry (and, with notify_delete, unlinks the inode it holds under that name). */
int kcfs_notify_inval_entry(struct fuse_session *se, uint64_t parent, const char *name);
int kcfs_notify_delete(struct fuse_session *se, uint64_t parent, uint64_t child, const char *name);
void kcfs_session_unmount_and_destroy(struct fuse_session *se);
/* After the mount was detached (fusermount -u): asks the loop serving `se` to end as a stop
 * signal does (`stopping`, then the session ends); -1 if `se` is not the session that takes
 * the stop signals. */
int kcfs_session_stop(struct fuse_session *se);
/* Frees libfuse's state without unmounting, for a mount already detached: closing /dev/fuse
 * ends the kernel's connection, also for copies of the mount in other mount namespaces. */
void kcfs_session_destroy_detached(struct fuse_session *se);

#endif
