#include "CFuseShim.h"
#include <stdlib.h>

struct fuse *kcfs_fuse_new(int argc, char **argv, const struct fuse_operations *ops, void *user_data) {
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    struct fuse *f = fuse_new(&args, ops, sizeof(*ops), user_data);
    fuse_opt_free_args(&args);
    return f;
}

/* SIGTERM, SIGINT and SIGHUP end the loop, so the daemon unmounts and wipes its keys. */
int kcfs_fuse_mount(struct fuse *f, const char *mountpoint) {
    if (fuse_mount(f, mountpoint) != 0) return -1;
    if (fuse_set_signal_handlers(fuse_get_session(f)) != 0) { fuse_unmount(f); return -1; }
    return 0;
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
