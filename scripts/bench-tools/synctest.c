/*
 * synctest FILE ROUNDS N: what one sync costs on FILE's disk, by how many WAL-sized frames
 * (a 24-byte header and a page) it carries and whether they grow the file or are written over
 * blocks it has (docs/performance-notes.md, the durable create). For each variant, ROUNDS
 * rounds (interleaved with the other variants) of N commits: the frames written, then one
 * fdatasync. Prints the median and the minimum per commit. FILE is made and removed.
 * The "stat" variants look at the file's times before each commit, as keychainfs's commits
 * did before session 13: the kernel then gives the next write a fine-grained time, the inode
 * changes at every commit, and on ext4 without a journal the sync writes it too.
 * Not run by scripts/bench: cc -O2 -o synctest synctest.c
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static const struct variant {
	const char *name;
	/* gathered: a commit's frames as one write, as the store's VFS writes them (CStoreVFS),
	 * rather than SQLite's two writes per frame. stats: a stat(2) of the file before each commit. */
	int pages, page_size, overwrite, gathered, stats;
} variants[] = {
	{"append 2 x 4096", 2, 4096, 0, 0}, {"append 3 x 4096", 3, 4096, 0, 0}, {"append 5 x 4096", 5, 4096, 0, 0},
	{"append 6 x 4096", 6, 4096, 0, 0}, {"append 6 x 1024", 6, 1024, 0, 0},
	{"overwrite 6 x 4096", 6, 4096, 1, 0}, {"overwrite 2 x 4096", 2, 4096, 1, 0},
	{"overwrite 8 x 4096", 8, 4096, 1, 0}, {"gathered 8 x 4096", 8, 4096, 1, 1},
	{"gathered 6 x 4096", 6, 4096, 1, 1}, {"gathered 6, stat", 6, 4096, 1, 1, 1},
};
#define NV (int)(sizeof variants / sizeof variants[0])

static int compare(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char *argv[])
{
	if (argc != 4) {
		fprintf(stderr, "usage: synctest FILE ROUNDS N\n");
		return 2;
	}
	int rounds = atoi(argv[2]), n = atoi(argv[3]);
	if (rounds < 1 || n < 1) {
		fprintf(stderr, "synctest: ROUNDS and N must be at least 1\n");
		return 2;
	}
	double *results = calloc((size_t)NV * rounds, sizeof *results);
	static char buf[8 * 4200];
	memset(buf, 7, sizeof buf);
	for (int r = 0; r < rounds; r++) {
		for (int k = 0; k < NV; k++) {
			const struct variant *v = &variants[k];
			int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
			if (fd < 0) {
				perror(argv[1]);
				return 1;
			}
			off_t frame = v->page_size + 24, at = 32;
			if (v->overwrite) {
				for (long i = 0; i < (long)n * v->pages; i++)
					if (pwrite(fd, buf, frame, 32 + i * frame) != frame)
						return 1;
				fdatasync(fd);
			}
			double start = now_us();
			for (int i = 0; i < n; i++) {
				struct stat st;
				if (v->stats && stat(argv[1], &st) != 0)
					return 1;
				if (v->gathered) {
					if (pwrite(fd, buf, frame * v->pages, at) != frame * v->pages)
						return 1;
					at += frame * v->pages;
					fdatasync(fd);
					continue;
				}
				for (int p = 0; p < v->pages; p++) {
					if (pwrite(fd, buf, 24, at) != 24 || pwrite(fd, buf, v->page_size, at + 24) != v->page_size)
						return 1;
					at += frame;
				}
				fdatasync(fd);
			}
			results[k * rounds + r] = (now_us() - start) / n;
			close(fd);
			unlink(argv[1]);
		}
	}
	for (int k = 0; k < NV; k++) {
		qsort(results + k * rounds, rounds, sizeof *results, compare);
		printf("%-20s median %7.1f us  min %7.1f us\n", variants[k].name, results[k * rounds + rounds / 2], results[k * rounds]);
	}
	free(results);
	return 0;
}
