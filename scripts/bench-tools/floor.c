/*
 * The floor for scripts/bench: the cheapest libfuse3 filesystem that serves
 * the same path shape as keychainfs (/bench/secret, 32 bytes, mode 0600,
 * direct_io), so the kernel does the same lookups and round trips and only
 * the userspace work differs.  Modelled on libfuse's example/hello.c.
 */
#define FUSE_USE_VERSION 31
#include <fuse3/fuse.h>

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char content[] = "0123456789abcdef0123456789abcdef";
#define CONTENT_SIZE (sizeof content - 1)

static int bl_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	(void)fi;
	memset(st, 0, sizeof *st);
	/* Owned by the mounting user, as keychainfs's files are. */
	st->st_uid = getuid();
	st->st_gid = getgid();
	if (strcmp(path, "/") == 0 || strcmp(path, "/bench") == 0) {
		st->st_mode = S_IFDIR | 0700;
		st->st_nlink = 2;
	} else if (strcmp(path, "/bench/secret") == 0) {
		st->st_mode = S_IFREG | 0600;
		st->st_nlink = 1;
		st->st_size = CONTENT_SIZE;
	} else {
		return -ENOENT;
	}
	return 0;
}

static int bl_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
		      struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
	const char *child;

	(void)off, (void)fi, (void)flags;
	if (strcmp(path, "/") == 0)
		child = "bench";
	else if (strcmp(path, "/bench") == 0)
		child = "secret";
	else
		return -ENOENT;
	fill(buf, ".", NULL, 0, 0);
	fill(buf, "..", NULL, 0, 0);
	fill(buf, child, NULL, 0, 0);
	return 0;
}

static int bl_open(const char *path, struct fuse_file_info *fi)
{
	if (strcmp(path, "/bench/secret") != 0)
		return -ENOENT;
	if ((fi->flags & O_ACCMODE) != O_RDONLY)
		return -EACCES;
	/* keychainfs never lets secrets into the page cache; neither may we. */
	fi->direct_io = 1;
	return 0;
}

static int bl_read(const char *path, char *buf, size_t size, off_t off,
		   struct fuse_file_info *fi)
{
	(void)path, (void)fi;
	if (off < 0 || (size_t)off >= CONTENT_SIZE)
		return 0;
	if (size > CONTENT_SIZE - off)
		size = CONTENT_SIZE - off;
	memcpy(buf, content + off, size);
	return size;
}

static const struct fuse_operations bl_ops = {
	.getattr = bl_getattr,
	.readdir = bl_readdir,
	.open = bl_open,
	.read = bl_read,
};

int main(int argc, char *argv[])
{
	return fuse_main(argc, argv, &bl_ops, NULL);
}
