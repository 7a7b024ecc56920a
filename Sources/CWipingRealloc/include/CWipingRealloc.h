#ifndef KEYCHAINFS_CWIPINGREALLOC_H
#define KEYCHAINFS_CWIPINGREALLOC_H

/* This target defines realloc(3) and reallocarray(3) for the process that links it; it has
 * nothing to call. See wiping_realloc.c. */

#endif
