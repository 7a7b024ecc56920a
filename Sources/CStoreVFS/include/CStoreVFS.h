#ifndef CSTOREVFS_H
#define CSTOREVFS_H

/* Makes the store's SQLite VFS the process's default (once; later calls do nothing):
 * the system's own, except that a WAL "truncated" by a TRUNCATE checkpoint keeps its
 * blocks, its frames overwritten with zeros (see store_vfs.c). Returns an SQLite code. */
int kcfs_store_vfs_install(void);

/* The bytes the truncations of WALs by this thread overwrote with zeros (their headers and
 * frames) since the last call; taken before and after a checkpoint, on its thread. */
long long kcfs_store_vfs_take_emptied(void);

/* Whether a sync of a WAL that SQLite asked for on this thread failed since the last call
 * (its frames may not be on disk; a sync through another descriptor would not say so). */
int kcfs_store_vfs_take_wal_sync_failed(void);

/* The most bytes of a WAL that a truncation keeps (zeroed); the rest is cut off. */
extern const long long kcfs_wal_kept_bytes;

/* A file's link count and size, by statx without its times (store_files.c says why);
 * 0, or -1 with errno. */
int kcfs_file_links_and_size(int fd, unsigned long long *links, long long *size);

#endif
