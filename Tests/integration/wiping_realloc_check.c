/*
 * Checks Sources/CWipingRealloc against glibc's realloc semantics and its one promise: a block
 * that moves is zeroed before it is freed. Built and run by test_memory.sh with the source file:
 *   cc -O1 -o check wiping_realloc_check.c ../../Sources/CWipingRealloc/wiping_realloc.c
 * Prints "ok ..." or "not ok ..." per check. It reads a freed block on purpose (glibc keeps a
 * small freed chunk mapped and writes its own pointers only in its first 16 bytes).
 */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed;

static void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok" : "not ok", what);
	failed |= !ok;
}

int main(void)
{
	/* A block that grows past a neighbour moves: the old bytes must be zeros. */
	char *block = malloc(200);
	char *neighbour = malloc(200);
	memset(block, 'S', 200);
	char *grown = realloc(block, 100000);
	int kept = grown != NULL && grown[0] == 'S' && grown[199] == 'S';
	check(kept, "a grown block keeps its bytes");
	int wiped = 1;
	volatile char *old = block;
	for (int i = 32; i < 200; i++)
		wiped &= old[i] == 0;
	check(grown != block && wiped, "the block it moved from is zeroed");

	char *big = malloc(1 << 20);
	memset(big, 'B', 1 << 20);
	char *shrunk = realloc(big, 16);
	check(shrunk != NULL && shrunk[15] == 'B' && malloc_usable_size(shrunk) < 4096,
	      "a shrink to under half moves the block and gives the memory back");
	char *small = realloc(shrunk, 8);
	check(small == shrunk, "a small shrink keeps the block whole");

	errno = 0;
	void *huge = realloc(small, SIZE_MAX / 2);
	check(huge == NULL && errno == ENOMEM && small[7] == 'B', "an impossible size: NULL, ENOMEM, the block kept");
	errno = 0;
	void *product = reallocarray(NULL, SIZE_MAX / 2, 4);
	check(product == NULL && errno == ENOMEM, "reallocarray's overflow: NULL, ENOMEM");
	void *none = realloc(NULL, 0);
	check(none != NULL, "realloc(NULL, 0) allocates, as glibc's");
	errno = 0;
	check(realloc(none, 0) == NULL && errno == 0, "realloc(p, 0) frees and returns NULL, errno untouched");
	free(small);
	free(grown);
	free(neighbour);
	return failed;
}
