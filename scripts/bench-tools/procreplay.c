/*
 * procreplay N OP...: what identifying a new caller of a guarded item costs the kernel, with
 * no daemon around it. N times: start `head -c 1` on a pipe (a fresh process, blocked in a
 * read as a FUSE caller is in its request), then time each OP on it, in order; then let it
 * exit, reap it, and time closing what the OPs left open (the daemon closes its descriptors
 * when it drops the process's entry, after the exit). Prints the median and 10th percentile
 * of each, in µs.
 *
 * OPs: pidfd (pidfd_open), status and environ (open, read from offset 0; kept open),
 * stat (stat of /proc/PID/exe), userns (PIDFD_GET_USER_NAMESPACE on the pidfd, fstat, close),
 * readlink (of /proc/PID/exe), kcmp (KCMP_VM with its parent, us), statpath (stat of the path
 * readlink gave), pagemap (open, kept), procdir (stat of /proc/PID: what the first touch of a
 * pid's directory costs, apart from its files). ownns is no OP on the process: it holds our own
 * /proc/self/ns/user open throughout, as the daemon does. The guarded read's set, in the
 * daemon's order:
 *
 *     cc -O2 -o /tmp/procreplay scripts/bench-tools/procreplay.c
 *     /tmp/procreplay 500 ownns pidfd status stat userns kcmp environ readlink statpath
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef KCMP_VM
#define KCMP_VM 1
#endif
#ifndef PIDFD_GET_USER_NAMESPACE
#define PIDFD_GET_USER_NAMESPACE _IO(0xFF, 9)
#endif

extern char **environ;

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static char buffer[1 << 14];

int main(int argc, char *argv[])
{
	if (argc < 3 || atoi(argv[1]) <= 0) {
		fprintf(stderr, "usage: procreplay N OP...\n");
		return 2;
	}
	int n = atoi(argv[1]);
	/* ownns: held for the whole run, not an OP on the process */
	int out = 2;
	for (int k = 2; k < argc; k++) {
		if (!strcmp(argv[k], "ownns")) {
			if (open("/proc/self/ns/user", O_RDONLY | O_CLOEXEC) < 0) { perror("/proc/self/ns/user"); return 1; }
		} else {
			argv[out++] = argv[k];
		}
	}
	argc = out;
	int nops = argc - 2;
	/* one row per OP, then the total, then the closes */
	double *t = calloc((size_t)n * (nops + 2), sizeof *t);
	for (int i = 0; i < n; i++) {
		int p[2];
		if (pipe(p) != 0) { perror("pipe"); return 1; }
		posix_spawn_file_actions_t fa;
		posix_spawn_file_actions_init(&fa);
		posix_spawn_file_actions_adddup2(&fa, p[0], 0);
		posix_spawn_file_actions_addclose(&fa, p[1]);
		posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
		pid_t pid;
		char *args[] = { "head", "-c", "1", NULL };
		if (posix_spawn(&pid, "/usr/bin/head", &fa, NULL, args, environ) != 0) { perror("posix_spawn"); return 1; }
		posix_spawn_file_actions_destroy(&fa);
		close(p[0]);
		usleep(2000); /* it has exec'd and waits in its read */
		int fds[8], nf = 0;
		char path[64], link[4097] = "";
		struct stat st;
		double start = now_ns(), t0 = start;
		for (int k = 0; k < nops; k++) {
			const char *op = argv[k + 2];
			if (!strcmp(op, "pidfd")) {
				fds[nf++] = (int)syscall(SYS_pidfd_open, pid, 0);
			} else if (!strcmp(op, "status") || !strcmp(op, "environ")) {
				snprintf(path, sizeof path, "/proc/%d/%s", pid, op);
				int fd = open(path, O_RDONLY | O_CLOEXEC);
				fds[nf++] = fd;
				if (pread(fd, buffer, !strcmp(op, "status") ? 512 : sizeof buffer, 0) <= 0)
					fprintf(stderr, "procreplay: cannot read %s\n", path);
			} else if (!strcmp(op, "userns")) {
				int ns = ioctl(fds[0], PIDFD_GET_USER_NAMESPACE, 0);
				if (ns < 0 || fstat(ns, &st) != 0) fprintf(stderr, "procreplay: userns needs pidfd first\n");
				close(ns);
			} else if (!strcmp(op, "procdir")) {
				snprintf(path, sizeof path, "/proc/%d", pid);
				stat(path, &st);
			} else if (!strcmp(op, "pagemap")) {
				snprintf(path, sizeof path, "/proc/%d/pagemap", pid);
				fds[nf++] = open(path, O_RDONLY | O_CLOEXEC);
			} else if (!strcmp(op, "stat")) {
				snprintf(path, sizeof path, "/proc/%d/exe", pid);
				stat(path, &st);
			} else if (!strcmp(op, "readlink")) {
				snprintf(path, sizeof path, "/proc/%d/exe", pid);
				ssize_t len = readlink(path, link, sizeof link - 1);
				link[len > 0 ? len : 0] = 0;
			} else if (!strcmp(op, "kcmp")) {
				syscall(SYS_kcmp, pid, getpid(), KCMP_VM, 0, 0);
			} else if (!strcmp(op, "statpath")) {
				stat(link, &st);
			} else {
				fprintf(stderr, "procreplay: unknown OP %s\n", op);
				return 2;
			}
			double x = now_ns();
			t[(size_t)k * n + i] = x - t0;
			t0 = x;
		}
		t[(size_t)nops * n + i] = now_ns() - start;
		close(p[1]);
		waitpid(pid, NULL, 0);
		double c0 = now_ns();
		for (int j = 0; j < nf; j++) close(fds[j]);
		t[(size_t)(nops + 1) * n + i] = now_ns() - c0;
	}
	for (int k = 0; k < nops + 2; k++) {
		double *row = t + (size_t)k * n;
		qsort(row, n, sizeof *row, by_value);
		printf("%-22s median %6.1f µs  p10 %6.1f µs\n",
		       k < nops ? argv[k + 2] : k == nops ? "total" : "closes after the exit",
		       row[n / 2] / 1000, row[n / 10] / 1000);
	}
	return 0;
}
