/* Another user's FUSE file system that poses as a keychainfs mount: an empty root directory,
 * mounted with whatever -o options it is given (test_hardening.sh passes
 * fsname=<the victim's store>,subtype=keychainfs). Usage: fake_fuse MOUNTPOINT -o OPTIONS -f */
#define FUSE_USE_VERSION 31
#include <errno.h>
#include <fuse.h>
#include <string.h>
#include <sys/stat.h>

static int fake_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    (void)fi;
    memset(st, 0, sizeof *st);
    if (strcmp(path, "/") != 0) return -ENOENT;
    st->st_mode = S_IFDIR | 0755;
    st->st_nlink = 2;
    return 0;
}

static int fake_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
                        struct fuse_file_info *fi, enum fuse_readdir_flags flags) {
    (void)off; (void)fi; (void)flags;
    if (strcmp(path, "/") != 0) return -ENOENT;
    fill(buf, ".", NULL, 0, 0);
    fill(buf, "..", NULL, 0, 0);
    return 0;
}

static const struct fuse_operations ops = { .getattr = fake_getattr, .readdir = fake_readdir };

int main(int argc, char **argv) { return fuse_main(argc, argv, &ops, NULL); }
