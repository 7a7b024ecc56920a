#ifndef KEYCHAINFS_CFUSESHIM_H
#define KEYCHAINFS_CFUSESHIM_H

/* libfuse selects its ABI through macros (fuse_new, fuse_loop_mt) that Swift cannot call;
 * these functions pin the 3.1 API for the Swift binding. */
#define FUSE_USE_VERSION 31
#include <fuse3/fuse.h>
#include <stdint.h>

struct fuse *kcfs_fuse_new(int argc, char **argv, const struct fuse_operations *ops, void *user_data);
int kcfs_fuse_mount(struct fuse *f, const char *mountpoint);
int kcfs_fuse_loop(struct fuse *f);
/* The kernel's node id of the request this worker thread is serving (the file of a read). */
uint64_t kcfs_current_nodeid(void);
/* Drops the kernel's cached pages of that node, so no memory mapping still shows them. */
int kcfs_invalidate_inode(struct fuse *f, uint64_t nodeid);
void kcfs_fuse_unmount_and_destroy(struct fuse *f);
void *kcfs_private_data(void);
/* For the mount daemon: PR_SET_DUMPABLE 0 and RLIMIT_CORE 0. */
int kcfs_harden_process(void);

#endif
