/*
 * fsfloor LOG COUNT [FUSE OPTIONS] MOUNTPOINT: the floor for creates and
 * listings in scripts/bench, the cheapest libfuse3 filesystem that does the
 * work keychainfs must do there.  Files live in memory; a new or rewritten
 * file is made durable at close by appending its path and bytes to LOG and
 * one fdatasync of LOG (as keychainfs syncs its WAL once).  Listings carry
 * attributes (readdirplus), and getxattr answers ENODATA (keychainfs has
 * extended attributes, so it cannot answer ENOSYS and let the kernel stop
 * asking).  COUNT files bench/item0000000... of 32 bytes exist at the start.
 */
#define FUSE_USE_VERSION 31
#define _GNU_SOURCE
#include <fuse3/fuse.h>

#include <errno.h>
#include <fcntl.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_NODES 500000
#define MAX_DATA 4096

struct node {
	char *path, *name;
	mode_t mode;
	size_t size;
	char *data;
	int dirty;
	long first_child, last_child, next_sibling; /* indexes, -1 for none */
};

static struct node *nodes;
static long node_count;
static int log_fd;
static const char content[] = "0123456789abcdef0123456789abcdef";

static long find(const char *path)
{
	ENTRY e = { .key = (char *)path }, *r = hsearch(e, FIND);
	return r ? (long)(intptr_t)r->data : -1;
}

static long add(const char *path, mode_t mode)
{
	char *slash = strrchr(path, '/');
	long parent = -1;
	if (node_count == MAX_NODES)
		return -ENOSPC;
	if (strcmp(path, "/") != 0) {
		char *dir = strndup(path, slash == path ? 1 : (size_t)(slash - path));
		parent = find(dir);
		free(dir);
		if (parent < 0 || !S_ISDIR(nodes[parent].mode))
			return -ENOENT;
	}
	long i = node_count++;
	struct node *n = &nodes[i];
	n->path = strdup(path);
	n->name = n->path + (slash ? slash - path + 1 : 0);
	n->mode = mode;
	n->first_child = n->last_child = n->next_sibling = -1;
	ENTRY e = { .key = n->path, .data = (void *)(intptr_t)i };
	hsearch(e, ENTER);
	if (parent >= 0) {
		if (nodes[parent].last_child >= 0)
			nodes[nodes[parent].last_child].next_sibling = i;
		else
			nodes[parent].first_child = i;
		nodes[parent].last_child = i;
	}
	return i;
}

static void fill_stat(long i, struct stat *st)
{
	memset(st, 0, sizeof *st);
	st->st_ino = i + 1;
	st->st_uid = getuid();
	st->st_gid = getgid();
	st->st_mode = nodes[i].mode;
	st->st_nlink = S_ISDIR(nodes[i].mode) ? 2 : 1;
	st->st_size = nodes[i].size;
}

static void *ff_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	(void)conn;
	cfg->use_ino = 1;
	return NULL;
}

static int ff_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	(void)fi;
	long i = find(path);
	if (i < 0)
		return -ENOENT;
	fill_stat(i, st);
	return 0;
}

static int ff_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
		      struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
	(void)off, (void)fi, (void)flags;
	long d = find(path);
	struct stat st;
	if (d < 0)
		return -ENOENT;
	fill(buf, ".", NULL, 0, 0);
	fill(buf, "..", NULL, 0, 0);
	for (long c = nodes[d].first_child; c >= 0; c = nodes[c].next_sibling) {
		fill_stat(c, &st);
		fill(buf, nodes[c].name, &st, 0, FUSE_FILL_DIR_PLUS);
	}
	return 0;
}

static int ff_mkdir(const char *path, mode_t mode)
{
	if (find(path) >= 0)
		return -EEXIST;
	long i = add(path, S_IFDIR | (mode & 0777));
	return i < 0 ? (int)i : 0;
}

static int ff_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	long i = find(path);
	if (i < 0)
		i = add(path, S_IFREG | (mode & 0777));
	if (i < 0)
		return (int)i;
	nodes[i].size = 0;
	nodes[i].dirty = 1;
	fi->fh = i;
	fi->direct_io = 1;
	return 0;
}

static int ff_open(const char *path, struct fuse_file_info *fi)
{
	long i = find(path);
	if (i < 0)
		return -ENOENT;
	if (fi->flags & O_TRUNC) {
		nodes[i].size = 0;
		nodes[i].dirty = 1;
	}
	fi->fh = i;
	fi->direct_io = 1;
	return 0;
}

static int ff_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
	long i = fi ? (long)fi->fh : find(path);
	if (i < 0)
		return -ENOENT;
	if (size < 0 || size > MAX_DATA)
		return -EFBIG;
	nodes[i].size = size;
	nodes[i].dirty = 1;
	return 0;
}

static int ff_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)path;
	struct node *n = &nodes[fi->fh];
	const char *data = n->data ? n->data : content;
	if (off < 0 || (size_t)off >= n->size)
		return 0;
	if (size > n->size - off)
		size = n->size - off;
	memcpy(buf, data + off, size);
	return size;
}

static int ff_write(const char *path, const char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)path;
	struct node *n = &nodes[fi->fh];
	if (off < 0 || off + size > MAX_DATA)
		return -EFBIG;
	if (!n->data && !(n->data = calloc(1, MAX_DATA)))
		return -ENOMEM;
	memcpy(n->data + off, buf, size);
	if (off + size > n->size)
		n->size = off + size;
	n->dirty = 1;
	return size;
}

/* Answered, so that the kernel keeps sending a FLUSH at every close as it
 * does to keychainfs (an ENOSYS would stop them): the same round trips. */
static int ff_flush(const char *path, struct fuse_file_info *fi)
{
	(void)path, (void)fi;
	return 0;
}

/* Durable at close: one record appended to the log, one fdatasync. */
static int ff_release(const char *path, struct fuse_file_info *fi)
{
	struct node *n = &nodes[fi->fh];
	char head[4096];
	if (!n->dirty)
		return 0;
	n->dirty = 0;
	int len = snprintf(head, sizeof head, "%s %zu\n", path, n->size);
	if (write(log_fd, head, len) != len ||
	    (n->size && write(log_fd, n->data ? n->data : content, n->size) != (ssize_t)n->size) ||
	    fdatasync(log_fd) != 0)
		return -EIO;
	return 0;
}

static int ff_getxattr(const char *path, const char *name, char *value, size_t size)
{
	(void)path, (void)name, (void)value, (void)size;
	return -ENODATA;
}

static int ff_listxattr(const char *path, char *list, size_t size)
{
	(void)path, (void)list, (void)size;
	return 0;
}

static const struct fuse_operations ff_ops = {
	.init = ff_init,
	.getattr = ff_getattr,
	.readdir = ff_readdir,
	.mkdir = ff_mkdir,
	.create = ff_create,
	.open = ff_open,
	.truncate = ff_truncate,
	.read = ff_read,
	.write = ff_write,
	.flush = ff_flush,
	.release = ff_release,
	.getxattr = ff_getxattr,
	.listxattr = ff_listxattr,
};

int main(int argc, char *argv[])
{
	char path[64];
	if (argc < 4) {
		fprintf(stderr, "usage: fsfloor LOG COUNT [FUSE OPTIONS] MOUNTPOINT\n");
		return 2;
	}
	long count = atol(argv[2]);
	log_fd = open(argv[1], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	nodes = calloc(MAX_NODES, sizeof *nodes);
	if (log_fd < 0 || !nodes || !hcreate(MAX_NODES * 2) || count < 0 || count > MAX_NODES - 3) {
		perror("fsfloor");
		return 1;
	}
	add("/", S_IFDIR | 0700);
	add("/bench", S_IFDIR | 0700);
	for (long i = 0; i < count; i++) {
		snprintf(path, sizeof path, "/bench/item%07ld", i);
		nodes[add(path, S_IFREG | 0600)].size = sizeof content - 1;
	}
	argv[2] = argv[0];
	return fuse_main(argc - 2, argv + 2, &ff_ops, NULL);
}
