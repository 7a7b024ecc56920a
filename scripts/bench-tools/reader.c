/*
 * reader PATH [ITERATIONS [WARMUP]]: times open/read-to-EOF/close of PATH in
 * one process, so the figure is the filesystem's cost and not process
 * start-up.  Prints "<ns per iteration> ns/op <ops per second> ops/s".
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


static const char *path;

static void fail(const char *what)
{
	fprintf(stderr, "reader: %s %s: %s\n", what, path, strerror(errno));
	exit(1);
}

static void read_once(void)
{
	char buf[4096];
	ssize_t n, total = 0;
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		fail("open");
	while ((n = read(fd, buf, sizeof buf)) > 0)
		total += n;
	if (n < 0)
		fail("read");
	if (close(fd) != 0)
		fail("close");
	/* An empty read would be fast and meaningless; refuse to time it. */
	if (total == 0) {
		fprintf(stderr, "reader: %s: read 0 bytes\n", path);
		exit(1);
	}
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char *argv[])
{
	long iterations = 20000, warmup = 100;
	char *end;

	if (argc < 2 || argc > 4) {
		fprintf(stderr, "usage: reader PATH [ITERATIONS [WARMUP]]\n");
		return 2;
	}
	if (argc == 4) {
		warmup = strtol(argv[3], &end, 10);
		if (*argv[3] == '\0' || *end != '\0' || warmup < 0) {
			fprintf(stderr, "reader: bad warm-up count: %s\n", argv[3]);
			return 2;
		}
	}
	path = argv[1];
	if (argc >= 3) {
		iterations = strtol(argv[2], &end, 10);
		if (*argv[2] == '\0' || *end != '\0' || iterations <= 0) {
			fprintf(stderr, "reader: bad iteration count: %s\n", argv[2]);
			return 2;
		}
	}

	for (long i = 0; i < warmup; i++)
		read_once();
	double start = now_ns();
	for (long i = 0; i < iterations; i++)
		read_once();
	double per_op = (now_ns() - start) / iterations;
	printf("%.0f ns/op %.0f ops/s\n", per_op, 1e9 / per_op);
	return 0;
}
