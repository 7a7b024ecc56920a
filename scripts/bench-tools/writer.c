/*
 * writer update PATH N | writer create DIR PREFIX N: N durable writes of the
 * 32-byte secret in one process.  update rewrites PATH (open O_TRUNC, write,
 * close); create makes DIR/PREFIX<i> (open O_CREAT|O_EXCL, write, close).
 * keychainfs commits durably at close, so close is part of each operation.
 * Prints "<ns per operation> ns/op".
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Each operation writes a different value: SQLite skips writing a row that
 * does not change, which would leave nothing to make durable. */
static char secret[] = "0123456789abcdef0123456789abcdef";

static void vary(long i)
{
	char head[17];
	snprintf(head, sizeof head, "%016lx", i);
	memcpy(secret, head, 16);
}

static void fail(const char *what, const char *path)
{
	fprintf(stderr, "writer: %s %s: %s\n", what, path, strerror(errno));
	exit(1);
}

static void write_once(const char *path, int flags)
{
	int fd = open(path, O_WRONLY | flags, 0600);
	if (fd < 0)
		fail("open", path);
	if (write(fd, secret, sizeof secret - 1) != (ssize_t)(sizeof secret - 1))
		fail("write", path);
	if (close(fd) != 0)
		fail("close", path);
}

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char *argv[])
{
	int create = argc == 5 && strcmp(argv[1], "create") == 0;
	if (!create && !(argc == 4 && strcmp(argv[1], "update") == 0)) {
		fprintf(stderr, "usage: writer update PATH N | writer create DIR PREFIX N\n");
		return 2;
	}
	long n = atol(argv[argc - 1]);
	if (n <= 0) {
		fprintf(stderr, "writer: bad count %s\n", argv[argc - 1]);
		return 2;
	}
	char path[4096];
	double start = now_ns();
	for (long i = 0; i < n; i++) {
		vary(i);
		if (create) {
			snprintf(path, sizeof path, "%s/%s%ld", argv[2], argv[3], i);
			write_once(path, O_CREAT | O_EXCL);
		} else {
			write_once(argv[2], O_TRUNC);
		}
	}
	printf("%.0f ns/op\n", (now_ns() - start) / n);
	return 0;
}
