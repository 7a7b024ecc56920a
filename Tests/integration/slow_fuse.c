/* A slow file system for test_access. /f (4096 bytes) answers a read only once the file named
 * by $SLOW_RELEASE exists: a fault on a mapping of it holds the faulting address space's map
 * lock until then. /exe is the file named by $SLOW_EXE (an executable), whose attributes are
 * answered only while the file named by $SLOW_STAT_HOLD does not exist (attributes are cached
 * for 0.1 s), and whose reads wait while the file named by $SLOW_READ_HOLD (if set) exists
 * (its pages are kept cached across opens).
 * Usage: SLOW_RELEASE=PATH SLOW_EXE=PATH SLOW_STAT_HOLD=PATH [SLOW_READ_HOLD=PATH] slow_fuse MOUNTPOINT -f */
#define FUSE_USE_VERSION 31
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void *slow_init(struct fuse_conn_info *conn, struct fuse_config *cfg) {
    (void)conn;
    cfg->attr_timeout = cfg->entry_timeout = 0.1;
    return NULL;
}

static int slow_getattr(const char *p, struct stat *st, struct fuse_file_info *fi) {
    (void)fi;
    memset(st, 0, sizeof *st);
    if (!strcmp(p, "/")) { st->st_mode = S_IFDIR | 0755; st->st_nlink = 2; return 0; }
    if (!strcmp(p, "/f")) { st->st_mode = S_IFREG | 0644; st->st_nlink = 1; st->st_size = 4096; return 0; }
    if (!strcmp(p, "/exe")) {
        while (access(getenv("SLOW_STAT_HOLD"), F_OK) == 0) usleep(20000);
        if (stat(getenv("SLOW_EXE"), st) != 0) return -errno;
        st->st_mode = S_IFREG | 0755;
        return 0;
    }
    return -ENOENT;
}

static int slow_open(const char *p, struct fuse_file_info *fi) {
    /* The pages of /exe that its processes run from stay cached when another opens it. */
    fi->keep_cache = !strcmp(p, "/exe");
    return strcmp(p, "/f") && strcmp(p, "/exe") ? -ENOENT : 0;
}

static int slow_read(const char *p, char *b, size_t n, off_t off, struct fuse_file_info *fi) {
    (void)fi;
    if (!strcmp(p, "/exe")) {
        const char *hold = getenv("SLOW_READ_HOLD");
        while (hold && access(hold, F_OK) == 0) usleep(20000);
        int fd = open(getenv("SLOW_EXE"), O_RDONLY);
        if (fd < 0) return -errno;
        ssize_t r = pread(fd, b, n, off);
        close(fd);
        return r < 0 ? -errno : (int)r;
    }
    while (access(getenv("SLOW_RELEASE"), F_OK) != 0) usleep(20000);
    memset(b, 'x', n);
    return (int)n;
}

static const struct fuse_operations ops = { .init = slow_init, .getattr = slow_getattr, .open = slow_open, .read = slow_read };

int main(int argc, char **argv) { return fuse_main(argc, argv, &ops, NULL); }
