/*
 * fsfloor LOG COUNT [FUSE OPTIONS] MOUNTPOINT: the floor for creates and
 * listings in scripts/bench, the cheapest libfuse3 filesystem that does the
 * work keychainfs must do there.  Low-level API (inode numbers, no paths), as
 * keychainfs uses.  Files live in memory; a new or rewritten file is made
 * durable at close by appending its name and bytes to LOG and one fdatasync
 * of LOG (as keychainfs syncs its WAL once).  Listings carry attributes
 * (readdirplus), getxattr answers ENODATA (keychainfs has extended
 * attributes, so it cannot answer ENOSYS and let the kernel stop asking), and
 * flush is answered so that the kernel keeps sending it, as to keychainfs.
 * COUNT files bench/item0000000... of 32 bytes exist at the start.
 * Single-threaded, with 1-second entry and attribute timeouts.
 */
#define FUSE_USE_VERSION 34
#define _GNU_SOURCE
#include <fuse3/fuse_lowlevel.h>

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
	char *name;
	mode_t mode;
	size_t size;
	char *data;
	int dirty;
	long parent, first_child, last_child, next_sibling; /* indexes, -1 for none */
};

static struct node *nodes;
static long node_count;
static int log_fd;
static const char content[] = "0123456789abcdef0123456789abcdef";

/* Inode n is node n - 1; the root (inode 1) is node 0. */
static long node_of(fuse_ino_t ino) { return (long)ino - 1; }

static long child(long dir, const char *name)
{
	char key[512];
	snprintf(key, sizeof key, "%ld/%s", dir, name);
	ENTRY e = { .key = key }, *r = hsearch(e, FIND);
	return r ? (long)(intptr_t)r->data : -1;
}

static long add(long parent, const char *name, mode_t mode)
{
	char key[512];
	if (node_count == MAX_NODES)
		return -ENOSPC;
	long i = node_count++;
	struct node *n = &nodes[i];
	n->name = strdup(name);
	n->mode = mode;
	n->parent = parent;
	n->first_child = n->last_child = n->next_sibling = -1;
	if (parent >= 0) {
		snprintf(key, sizeof key, "%ld/%s", parent, name);
		ENTRY e = { .key = strdup(key), .data = (void *)(intptr_t)i };
		hsearch(e, ENTER);
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

static void fill_entry(long i, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof *e);
	e->ino = i + 1;
	e->attr_timeout = 1.0;
	e->entry_timeout = 1.0;
	fill_stat(i, &e->attr);
}

static void ff_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	long i = child(node_of(parent), name);
	if (i < 0) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fill_entry(i, &e);
	fuse_reply_entry(req, &e);
}

static void ff_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	(void)fi;
	fill_stat(node_of(ino), &st);
	fuse_reply_attr(req, &st, 1.0);
}

static void ff_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct stat st;
	long i = node_of(ino);
	(void)fi;
	if (to_set & FUSE_SET_ATTR_SIZE) {
		if (attr->st_size < 0 || attr->st_size > MAX_DATA) {
			fuse_reply_err(req, EFBIG);
			return;
		}
		nodes[i].size = attr->st_size;
		nodes[i].dirty = 1;
	}
	fill_stat(i, &st);
	fuse_reply_attr(req, &st, 1.0);
}

/* Offsets: 1 and 2 are "." and "..", 3 + k the k-th child.  A listing reads
 * on from where its last reply stopped (kept in fh), so it is linear. */
static void list(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		 struct fuse_file_info *fi, int plus)
{
	long d = node_of(ino);
	char *buf = malloc(size ? size : 1);
	size_t used = 0;
	struct fuse_entry_param e;
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	long c = nodes[d].first_child;
	off_t pos = 3;
	if (off >= 3 && fi->fh != 0 && (off_t)(fi->fh >> 32) == off) {
		c = (long)(fi->fh & 0xffffffff) - 1;
		pos = off;
	}
	for (; off < 2; off++) {
		memset(&e, 0, sizeof e);
		e.attr.st_ino = ino;
		e.attr.st_mode = S_IFDIR;
		const char *name = off == 0 ? "." : "..";
		size_t n = plus ? fuse_add_direntry_plus(req, buf + used, size - used, name, &e, off + 1)
				: fuse_add_direntry(req, buf + used, size - used, name, &e.attr, off + 1);
		if (n > size - used)
			goto reply;
		used += n;
	}
	for (; c >= 0 && pos < off; c = nodes[c].next_sibling)
		pos++;
	for (; c >= 0; c = nodes[c].next_sibling, pos++) {
		fill_entry(c, &e);
		size_t n = plus ? fuse_add_direntry_plus(req, buf + used, size - used, nodes[c].name, &e, pos + 1)
				: fuse_add_direntry(req, buf + used, size - used, nodes[c].name, &e.attr, pos + 1);
		if (n > size - used)
			break;
		used += n;
	}
	fi->fh = c >= 0 ? ((uint64_t)pos << 32) | (uint64_t)(c + 1) : 0;
reply:
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void ff_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	list(req, ino, size, off, fi, 0);
}

static void ff_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	list(req, ino, size, off, fi, 1);
}

static void ff_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	fi->fh = 0;
	fuse_reply_open(req, fi);
}

static void ff_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct fuse_entry_param e;
	if (child(node_of(parent), name) >= 0) {
		fuse_reply_err(req, EEXIST);
		return;
	}
	long i = add(node_of(parent), name, S_IFDIR | (mode & 0777));
	if (i < 0) {
		fuse_reply_err(req, (int)-i);
		return;
	}
	fill_entry(i, &e);
	fuse_reply_entry(req, &e);
}

static void ff_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	struct fuse_entry_param e;
	long i = child(node_of(parent), name);
	if (i < 0)
		i = add(node_of(parent), name, S_IFREG | (mode & 0777));
	if (i < 0) {
		fuse_reply_err(req, (int)-i);
		return;
	}
	nodes[i].size = 0;
	nodes[i].dirty = 1;
	fi->fh = i;
	fi->direct_io = 1;
	fill_entry(i, &e);
	fuse_reply_create(req, &e, fi);
}

static void ff_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	long i = node_of(ino);
	if (fi->flags & O_TRUNC) {
		nodes[i].size = 0;
		nodes[i].dirty = 1;
	}
	fi->fh = i;
	fi->direct_io = 1;
	fuse_reply_open(req, fi);
}

static void ff_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct node *n = &nodes[fi->fh];
	const char *data = n->data ? n->data : content;
	(void)ino;
	if (off < 0 || (size_t)off >= n->size) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (size > n->size - off)
		size = n->size - off;
	fuse_reply_buf(req, data + off, size);
}

static void ff_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct node *n = &nodes[fi->fh];
	(void)ino;
	if (off < 0 || off + size > MAX_DATA) {
		fuse_reply_err(req, EFBIG);
		return;
	}
	if (!n->data && !(n->data = calloc(1, MAX_DATA))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	memcpy(n->data + off, buf, size);
	if (off + size > n->size)
		n->size = off + size;
	n->dirty = 1;
	fuse_reply_write(req, size);
}

static void ff_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino, (void)fi;
	fuse_reply_err(req, 0);
}

/* Durable at close: one record appended to the log, one fdatasync. */
static void ff_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n = &nodes[fi->fh];
	char head[512];
	(void)ino;
	if (!n->dirty) {
		fuse_reply_err(req, 0);
		return;
	}
	n->dirty = 0;
	int len = snprintf(head, sizeof head, "%ld/%s %zu\n", n->parent, n->name, n->size);
	if (write(log_fd, head, len) != len ||
	    (n->size && write(log_fd, n->data ? n->data : content, n->size) != (ssize_t)n->size) ||
	    fdatasync(log_fd) != 0) {
		fuse_reply_err(req, EIO);
		return;
	}
	fuse_reply_err(req, 0);
}

static void ff_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	(void)ino, (void)name, (void)size;
	fuse_reply_err(req, ENODATA);
}

static void ff_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	(void)ino;
	if (size == 0)
		fuse_reply_xattr(req, 0);
	else
		fuse_reply_buf(req, NULL, 0);
}

static void ff_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	(void)ino, (void)nlookup;
	fuse_reply_none(req);
}

static const struct fuse_lowlevel_ops ff_ops = {
	.lookup = ff_lookup,
	.forget = ff_forget,
	.getattr = ff_getattr,
	.setattr = ff_setattr,
	.mkdir = ff_mkdir,
	.create = ff_create,
	.open = ff_open,
	.read = ff_read,
	.write = ff_write,
	.flush = ff_flush,
	.release = ff_release,
	.opendir = ff_opendir,
	.readdir = ff_readdir,
	.readdirplus = ff_readdirplus,
	.getxattr = ff_getxattr,
	.listxattr = ff_listxattr,
};

int main(int argc, char *argv[])
{
	char name[64];
	struct fuse_cmdline_opts opts;
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
	add(-1, "", S_IFDIR | 0700);
	long bench = add(0, "bench", S_IFDIR | 0700);
	for (long i = 0; i < count; i++) {
		snprintf(name, sizeof name, "item%07ld", i);
		nodes[add(bench, name, S_IFREG | 0600)].size = sizeof content - 1;
	}
	argv[2] = argv[0];
	struct fuse_args args = FUSE_ARGS_INIT(argc - 2, argv + 2);
	if (fuse_parse_cmdline(&args, &opts) != 0 || !opts.mountpoint) {
		fprintf(stderr, "fsfloor: no mountpoint\n");
		return 2;
	}
	struct fuse_session *se = fuse_session_new(&args, &ff_ops, sizeof ff_ops, NULL);
	if (!se || fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, opts.mountpoint) != 0)
		return 1;
	int rc = fuse_session_loop(se);
	fuse_session_unmount(se);
	fuse_remove_signal_handlers(se);
	fuse_session_destroy(se);
	return rc ? 1 : 0;
}
