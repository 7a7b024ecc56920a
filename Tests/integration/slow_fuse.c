/* A file system whose one file, /f (4096 bytes), answers a read only once the file named by
 * $SLOW_RELEASE exists: a fault on a mapping of it holds the faulting address space's map lock
 * until then. Usage: SLOW_RELEASE=PATH slow_fuse MOUNTPOINT -f */
#define FUSE_USE_VERSION 31
#include <errno.h>
#include <fuse.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
static int g(const char *p, struct stat *st, struct fuse_file_info *fi) {
    (void)fi; memset(st, 0, sizeof *st);
    if (!strcmp(p, "/")) { st->st_mode = S_IFDIR | 0755; st->st_nlink = 2; return 0; }
    if (!strcmp(p, "/f")) { st->st_mode = S_IFREG | 0644; st->st_nlink = 1; st->st_size = 4096; return 0; }
    return -ENOENT;
}
static int o(const char *p, struct fuse_file_info *fi) { (void)fi; return strcmp(p, "/f") ? -ENOENT : 0; }
static int r(const char *p, char *b, size_t n, off_t off, struct fuse_file_info *fi) {
    (void)p; (void)fi; (void)off;
    while (access(getenv("SLOW_RELEASE"), F_OK) != 0) usleep(20000);
    memset(b, 'x', n); return (int)n;
}
static const struct fuse_operations ops = { .getattr = g, .open = o, .read = r };
int main(int argc, char **argv) { return fuse_main(argc, argv, &ops, NULL); }
