#include "CFuseShim.h"
#include <stdlib.h>

struct fuse *kcfs_fuse_new(int argc, char **argv, const struct fuse_operations *ops, void *user_data) {
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    struct fuse *f = fuse_new(&args, ops, sizeof(*ops), user_data);
    fuse_opt_free_args(&args);
    return f;
}

int kcfs_fuse_mount(struct fuse *f, const char *mountpoint) { return fuse_mount(f, mountpoint); }

/* The same multi-threaded loop fuse_main uses. */
int kcfs_fuse_loop(struct fuse *f) { return fuse_loop_mt(f, 0); }

void kcfs_fuse_unmount_and_destroy(struct fuse *f) {
    fuse_unmount(f);
    fuse_destroy(f);
}

void *kcfs_private_data(void) { return fuse_get_context()->private_data; }

void kcfs_fuse_invalidate(struct fuse *f, const char *path) { (void)fuse_invalidate_path(f, path); }
