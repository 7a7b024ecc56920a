/*
 * realloc(3) and reallocarray(3) for keychainfs-full (the daemon and the CLI), which wipe the
 * block they leave.
 *
 * Why: glibc's realloc, when it cannot grow a block in place, copies it and frees the old one
 * as it is. A buffer that grows while it holds a secret then leaves the secret in freed heap,
 * where it stays until malloc happens to reuse those bytes, past a lock. sd-bus builds a
 * message that way (a GetSecrets reply of several items grows once per item, and marking the
 * message sensitive wipes only its last buffer), and so do Foundation's Data and SQLite's
 * string builders. Defining the two functions in the executable replaces them for every
 * library the loader binds to it (libc's own calls through its PLT, libsystemd, libsqlite3,
 * libcrypto, libfuse3) and for the statically linked Swift runtime.
 *
 * A block never moves without its old bytes being zeroed, and never shrinks in place: glibc
 * would split off and free the tail, unwiped. A shrink that would give back at least half the
 * block and a page moves it (copied, the old one zeroed); a smaller one keeps it whole.
 * Growth copies every time, where glibc may extend in place or move an mmapped block's pages:
 * a block grown by small steps costs more, one grown by doubling (Foundation, SQLite, sd-bus)
 * about twice its size in copies.
 */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

void *realloc(void *old, size_t size) {
    if (old == NULL) return malloc(size);
    size_t have = malloc_usable_size(old);
    if (size == 0) {
        /* glibc frees the block and returns NULL. */
        explicit_bzero(old, have);
        free(old);
        return NULL;
    }
    if (size <= have && (have - size < 4096 || size >= have / 2)) return old;
    void *moved = malloc(size);
    /* errno is ENOMEM; the old block stays, as realloc's must. A shrink keeps it whole instead. */
    if (moved == NULL) return size <= have ? old : NULL;
    memcpy(moved, old, size < have ? size : have);
    explicit_bzero(old, have);
    free(old);
    return moved;
}

void *reallocarray(void *old, size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(old, total);
}
