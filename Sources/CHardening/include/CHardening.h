#ifndef KEYCHAINFS_CHARDENING_H
#define KEYCHAINFS_CHARDENING_H

/* prctl(2) is variadic, which Swift cannot call. Makes this process non-dumpable (no core
 * dump, no ptrace or /proc/PID/mem by other processes of the same user) and sets RLIMIT_CORE
 * to 0. Returns 0 on success. */
int kcfs_make_not_dumpable(void);

#endif
