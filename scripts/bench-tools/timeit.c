/*
 * timeit N INPUT COMMAND [ARGS...]: runs COMMAND N times one after another,
 * each with standard input from the file INPUT (or /dev/null for "-") and
 * its output thrown away, and prints "<ns per run> ns/run".  posix_spawn
 * keeps the timer's own cost small and the same for every command compared.
 * A run that fails stops it with the command's status.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char *argv[])
{
	if (argc < 4) {
		fprintf(stderr, "usage: timeit N INPUT COMMAND [ARGS...]\n");
		return 2;
	}
	long n = atol(argv[1]);
	const char *input = strcmp(argv[2], "-") == 0 ? "/dev/null" : argv[2];
	if (n <= 0) {
		fprintf(stderr, "timeit: bad count %s\n", argv[1]);
		return 2;
	}
	double start = now_ns();
	for (long i = 0; i < n; i++) {
		posix_spawn_file_actions_t fa;
		posix_spawn_file_actions_init(&fa);
		posix_spawn_file_actions_addopen(&fa, 0, input, O_RDONLY, 0);
		posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
		posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
		pid_t pid;
		int status;
		if (posix_spawnp(&pid, argv[3], &fa, NULL, argv + 3, environ) != 0) {
			perror("timeit: posix_spawnp");
			return 1;
		}
		posix_spawn_file_actions_destroy(&fa);
		if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "timeit: %s failed (status %d) on run %ld\n", argv[3],
				WIFEXITED(status) ? WEXITSTATUS(status) : -1, i + 1);
			return 1;
		}
	}
	printf("%.0f ns/run\n", (now_ns() - start) / n);
	return 0;
}
