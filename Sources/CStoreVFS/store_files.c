/*
 * A call on the store's files that Swift's Glibc module does not declare (statx needs
 * _GNU_SOURCE).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>

#include "CStoreVFS.h"

/* Asked without the times on purpose: a look at a file's times makes the kernel give its next
 * write a fine-grained time (multigrain timestamps, Linux 6.13), which raises every file's
 * clock, so the next write to the WAL then changes its inode too and its sync writes the inode
 * as well (StoreFileWatch.swift). */
int kcfs_file_links_and_size(int fd, unsigned long long *links, long long *size)
{
	struct statx st;
	if (statx(fd, "", AT_EMPTY_PATH, STATX_NLINK | STATX_SIZE, &st) != 0)
		return -1;
	*links = st.stx_nlink;
	*size = (long long)st.stx_size;
	return 0;
}
