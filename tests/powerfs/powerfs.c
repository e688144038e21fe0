/*
 * NAME
 *	powerfs 1
 * SUMMARY
 *	a FUSE file system that keeps every write in memory until it is
 *	synced: power cuts and failed syncs for the tests
 * SYNOPSIS
 *	powerfs BACKING MOUNTPOINT
 * DESCRIPTION
 *	A passthrough over the directory BACKING (the "disk") that holds
 *	each file's unsynced writes in memory (the "page cache"), a 4 KB
 *	page at a time, with the file's unsynced size. Reads see the pages
 *	in memory over the backing file, as a program sees the page cache.
 *	fsync() and fdatasync() of a file write its pages and its size to
 *	the backing file: from then on they are durable. Nothing else ever
 *	writes them back (no flusher thread, no writeback at unmount), but
 *	SIGPWR, below.
 *
 *	A power cut is this process dying: the test kills the program under
 *	test with SIGKILL, then this one, then unmounts the dead mount and
 *	starts a new powerfs on the same BACKING. What the backing files hold
 *	is what was synced, nothing more: the harshest case ext4 allows for
 *	file data, where writeback found no time to write anything.
 *
 *	SIGUSR1 arms a failed sync: the next fsync() or fdatasync() of any
 *	file returns EIO and, as Linux may after a failed writeback, that
 *	file's unsynced pages and size are thrown away (the kernel's cache
 *	of the file is invalidated too), so that reads show what is durable.
 *	As with Linux's errseq, every descriptor of the file that was open
 *	at the failure reports EIO at its next sync, once.
 *
 *	SIGUSR2 makes the disk die: the next sync writes its data (the disk
 *	has it) but still returns EIO, and every later sync of any file
 *	fails as above, writing nothing, until this powerfs is gone (a cut).
 *	So a commit can fail and yet be on the disk, whole, and nothing
 *	written after it, such as a void of its redo record, gets there.
 *
 *	SIGPWR is a cut in the middle of the kernel's writeback: a part of
 *	the unsynced pages, a 4 KB page at a time, reach the disk and the
 *	rest does not, whatever their order. Each unsynced page of every
 *	file is written to the backing file with a probability drawn anew
 *	at each cut, from rand_r() seeded with POWERFS_SEED (the process
 *	id if unset); a page past the backing file's end extends it. The
 *	test then kills the program under test and this one, as for a cut
 *	("powerfs: power: N of M unsynced pages written back" says when it
 *	is done; SIGPWR must come after the program is killed).
 *
 *	SIGRTMIN arms such a cut at the next sync of any file, the moment
 *	a commit's writes are all issued and none is yet durable: the sync
 *	never returns, a part of what it would have written reaches the
 *	disk as above, and from then on nothing does (every later sync
 *	hangs as well; create, unlink, rename, mkdir, rmdir and symlink
 *	fail with EIO). The test waits for the line, then kills as above.
 *
 *	What it models: lost unsynced data and sizes of regular files,
 *	whatever their writes' order; a part of them written back (SIGPWR);
 *	a failed sync and what it drops.
 *	What it does not: directory operations (create, unlink, rename,
 *	mkdir, symlink, chmod) are durable at once, as if the directory
 *	were synced; no torn write inside a page, no slow or full disk. lseek's SEEK_HOLE and
 *	SEEK_DATA are not implemented (the kernel then takes the whole file
 *	as data), nor fallocate(); O_DIRECT goes through the same memory.
 *	POSIX and flock() locks are the kernel's own (no lock operation).
 *	Shared writable mmap (LMDB's lock.mdb) works through the kernel's
 *	writeback into the same memory.
 * DIAGNOSTICS
 *	Errors of the backing files are passed on; a failed sync is logged
 *	to stderr with the file's name.
 */
#define FUSE_USE_VERSION 31

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define PAGE		4096u
#define NBUCKETS	4096u
#define NO_ZERO		UINT64_MAX

struct page {
	uint64_t index;
	struct page *next;		/* in the node's bucket */
	unsigned char data[PAGE];
};

/* A file that was opened, keyed by its path: its unsynced state. */
struct node {
	char *path;			/* owned */
	int dirty;			/* has pages or a size not yet synced */
	uint64_t size;			/* the size a reader sees */
	uint64_t zero_from;		/* shrunk since the sync: backing bytes past it read as 0 */
	unsigned errseq;		/* failed syncs so far */
	size_t npages;
	struct page **buckets;		/* owned; NBUCKETS when allocated */
	struct node *next;
};

struct handle {
	int fd;				/* owned: the backing file */
	unsigned seen;			/* the node's errseq when opened or last synced */
};

static int root_fd = -1;
static struct node *nodes;		/* under lock */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static volatile sig_atomic_t fail_next;	/* SIGUSR1 */
static volatile sig_atomic_t die_next;	/* SIGUSR2 */
static int dead;			/* under lock: every sync fails */
static volatile sig_atomic_t power_next;	/* SIGRTMIN */
static int power_off;			/* under lock: the power went at a sync */
static unsigned power_seed;		/* under lock: rand_r()'s */

/* rel - a FUSE path as one relative to the backing root */
static const char *rel(const char *path)
{
	return path[1] ? path + 1 : ".";
}

/* node_find - the node of path, or NULL (lock held) */
static struct node *node_find(const char *path)
{
	struct node *n;

	for (n = nodes; n; n = n->next)
		if (strcmp(n->path, path) == 0)
			return n;
	return NULL;
}

/* node_get - the node of path, made from the backing file's size if new (lock held) */
static struct node *node_get(const char *path, int fd)
{
	struct node *n = node_find(path);
	struct stat sb;

	if (n)
		return n;
	if (fstat(fd, &sb) != 0)
		return NULL;
	n = calloc(1, sizeof(*n));
	n->path = strdup(path);
	n->size = (uint64_t) sb.st_size;
	n->zero_from = NO_ZERO;
	n->next = nodes;
	nodes = n;
	return n;
}

/* node_drop_pages - forget every unsynced page and size (lock held) */
static void node_drop_pages(struct node *n, int fd)
{
	struct stat sb;
	struct page *p, *next;

	if (n->buckets) {
		for (unsigned b = 0; b < NBUCKETS; b++)
			for (p = n->buckets[b]; p; p = next) {
				next = p->next;
				free(p);
			}
		free(n->buckets);
		n->buckets = NULL;
	}
	n->npages = 0;
	n->dirty = 0;
	n->zero_from = NO_ZERO;
	if (fd >= 0 && fstat(fd, &sb) == 0)
		n->size = (uint64_t) sb.st_size;
}

/* node_remove - the file is gone (lock held) */
static void node_remove(const char *path)
{
	struct node **pp, *n;

	for (pp = &nodes; (n = *pp); pp = &n->next)
		if (strcmp(n->path, path) == 0) {
			*pp = n->next;
			node_drop_pages(n, -1);
			free(n->path);
			free(n);
			return;
		}
}

/* page_find - the unsynced page at index, or NULL */
static struct page *page_find(struct node *n, uint64_t index)
{
	struct page *p;

	if (n->buckets == NULL)
		return NULL;
	for (p = n->buckets[index % NBUCKETS]; p; p = p->next)
		if (p->index == index)
			return p;
	return NULL;
}

/* durable_read - a page's bytes as the backing file has them, zeros past its end */
static int durable_read(struct node *n, int fd, uint64_t index, unsigned char *out)
{
	uint64_t off = index * PAGE;
	ssize_t got = 0;

	memset(out, 0, PAGE);
	if (off < n->zero_from && (got = pread(fd, out, PAGE, (off_t) off)) < 0)
		return -errno;
	if (n->zero_from != NO_ZERO && off + PAGE > n->zero_from)
		memset(out + (n->zero_from > off ? n->zero_from - off : 0), 0,
		       PAGE - (n->zero_from > off ? n->zero_from - off : 0));
	return 0;
}

/* page_get - the page at index, read in from the backing file if not in memory */
static struct page *page_get(struct node *n, int fd, uint64_t index, int *err)
{
	struct page *p = page_find(n, index);

	if (p)
		return p;
	p = malloc(sizeof(*p));
	if ((*err = durable_read(n, fd, index, p->data)) != 0) {
		free(p);
		return NULL;
	}
	/* bytes past the size a reader sees are zeros, as after a truncate */
	if (index * PAGE + PAGE > n->size)
		memset(p->data + (n->size > index * PAGE ? n->size - index * PAGE : 0), 0,
		       PAGE - (n->size > index * PAGE ? n->size - index * PAGE : 0));
	if (n->buckets == NULL)
		n->buckets = calloc(NBUCKETS, sizeof(*n->buckets));
	p->index = index;
	p->next = n->buckets[index % NBUCKETS];
	n->buckets[index % NBUCKETS] = p;
	n->npages++;
	return p;
}

/* node_truncate - a new size, unsynced (lock held) */
static void node_truncate(struct node *n, uint64_t size)
{
	struct page **pp, *p;

	if (size < n->size && size < n->zero_from)
		n->zero_from = size;
	if (n->buckets)
		for (unsigned b = 0; b < NBUCKETS; b++)
			for (pp = &n->buckets[b]; (p = *pp);) {
				if (p->index * PAGE >= size) {
					*pp = p->next;
					free(p);
					n->npages--;
					continue;
				}
				if (p->index * PAGE + PAGE > size)
					memset(p->data + (size - p->index * PAGE), 0,
					       PAGE - (size - p->index * PAGE));
				pp = &p->next;
			}
	n->size = size;
	n->dirty = 1;
}

/* node_sync - write the pages and the size to the backing file (lock held) */
static int node_sync(struct node *n, int fd)
{
	struct page *p;
	uint64_t off, len;

	if (!n->dirty)
		return 0;
	if (n->zero_from != NO_ZERO && ftruncate(fd, (off_t) n->zero_from) != 0)
		return -errno;
	if (n->buckets)
		for (unsigned b = 0; b < NBUCKETS; b++)
			for (p = n->buckets[b]; p; p = p->next) {
				off = p->index * PAGE;
				len = n->size - off < PAGE ? n->size - off : PAGE;
				if (pwrite(fd, p->data, len, (off_t) off) != (ssize_t) len)
					return errno ? -errno : -EIO;
			}
	if (ftruncate(fd, (off_t) n->size) != 0)
		return -errno;
	node_drop_pages(n, fd);
	return 0;
}

/* invalidate_main - drop the kernel's cache of a file whose pages were thrown away */
static void *invalidate_main(void *arg)
{
	void **a = arg;

	fuse_invalidate_path(a[0], a[1]);
	free(a[1]);
	free(a);
	return NULL;
}

/* invalidate - on a thread of its own: the kernel may wait for reads we must serve */
static void invalidate(const char *path)
{
	void **a = malloc(2 * sizeof(*a));
	pthread_t th;

	a[0] = fuse_get_context()->fuse;
	a[1] = strdup(path);
	if (pthread_create(&th, NULL, invalidate_main, a) == 0)
		pthread_detach(th);
}

/* power_cut - a random part of every unsynced page written back (lock held) */
static void power_cut(const char *when)
{
	double prob = (double) rand_r(&power_seed) / RAND_MAX;
	unsigned long written = 0, total = 0;
	struct node *n;
	struct page *p;
	uint64_t len;
	int fd;

	for (n = nodes; n; n = n->next) {
		if (!n->dirty || n->buckets == NULL
		    || (fd = openat(root_fd, rel(n->path), O_WRONLY | O_CLOEXEC)) < 0)
			continue;
		for (unsigned b = 0; b < NBUCKETS; b++)
			for (p = n->buckets[b]; p; p = p->next) {
				total++;
				if (p->index * PAGE >= n->size
				    || (double) rand_r(&power_seed) / RAND_MAX >= prob)
					continue;
				len = n->size - p->index * PAGE < PAGE ? n->size - p->index * PAGE : PAGE;
				if (pwrite(fd, p->data, len, (off_t) (p->index * PAGE)) == (ssize_t) len)
					written++;
			}
		close(fd);
	}
	fprintf(stderr, "powerfs: power: %lu of %lu unsynced pages written back%s\n",
		written, total, when);
}

/* power_main - SIGPWR, taken by this thread alone: a cut now */
static void *power_main(void *arg)
{
	sigset_t *set = arg;
	int sig;

	for (;;)
		if (sigwait(set, &sig) == 0) {
			pthread_mutex_lock(&lock);
			power_cut("");
			pthread_mutex_unlock(&lock);
		}
	return NULL;
}

/* power_at_sync - SIGRTMIN: the cut at this sync, which never returns */
static void power_at_sync(const char *path)
{
	pthread_mutex_lock(&lock);
	if (!power_off) {
		power_off = 1;
		power_cut(" at a sync");
		fprintf(stderr, "powerfs: %s: the power went at its sync\n", path);
	}
	pthread_mutex_unlock(&lock);
	for (;;)
		pause();
}

static int pfs_getattr(const char *path, struct stat *sb, struct fuse_file_info *fi)
{
	struct node *n;
	int rc;

	rc = fi ? fstat(((struct handle *) (uintptr_t) fi->fh)->fd, sb)
	    : fstatat(root_fd, rel(path), sb, AT_SYMLINK_NOFOLLOW);
	if (rc != 0)
		return -errno;
	pthread_mutex_lock(&lock);
	if (S_ISREG(sb->st_mode) && (n = node_find(path)))
		sb->st_size = (off_t) n->size;
	pthread_mutex_unlock(&lock);
	return 0;
}

static int pfs_open_common(const char *path, struct fuse_file_info *fi, int fd)
{
	struct handle *h;
	struct node *n;

	if (fd < 0)
		return -errno;
	h = calloc(1, sizeof(*h));
	h->fd = fd;
	pthread_mutex_lock(&lock);
	if ((n = node_get(path, fd)) == NULL) {
		pthread_mutex_unlock(&lock);
		close(fd);
		free(h);
		return -EIO;
	}
	h->seen = n->errseq;
	if (fi->flags & O_TRUNC)
		node_truncate(n, 0);
	pthread_mutex_unlock(&lock);
	fi->fh = (uintptr_t) h;
	return 0;
}

static int pfs_open(const char *path, struct fuse_file_info *fi)
{
	/* the backing file is opened read-write whatever the mode, without O_TRUNC */
	int flags = (fi->flags & ~(O_TRUNC | O_ACCMODE | O_APPEND | O_DIRECT)) | O_RDWR;

	return pfs_open_common(path, fi, openat(root_fd, rel(path), flags | O_CLOEXEC));
}

static int pfs_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	int flags = (fi->flags & ~(O_TRUNC | O_ACCMODE | O_APPEND | O_DIRECT)) | O_RDWR;

	if (power_off)
		return -EIO;
	return pfs_open_common(path, fi, openat(root_fd, rel(path), flags | O_CREAT | O_CLOEXEC, mode));
}

static int pfs_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct handle *h = (struct handle *) (uintptr_t) fi->fh;
	unsigned char tmp[PAGE];
	uint64_t pos = (uint64_t) off, end, in;
	struct page *p;
	struct node *n;
	size_t done = 0, len;
	int err;

	if (path == NULL)			/* unlinked while open: not ours to keep */
		return (int) pread(h->fd, buf, size, off);
	pthread_mutex_lock(&lock);
	n = node_get(path, h->fd);
	end = pos + size < n->size ? pos + size : n->size;
	while (pos < end) {
		in = pos % PAGE;
		len = end - pos < PAGE - in ? (size_t) (end - pos) : (size_t) (PAGE - in);
		if ((p = page_find(n, pos / PAGE)) != NULL) {
			memcpy(buf + done, p->data + in, len);
		} else {
			if ((err = durable_read(n, h->fd, pos / PAGE, tmp)) != 0) {
				pthread_mutex_unlock(&lock);
				return err;
			}
			memcpy(buf + done, tmp + in, len);
		}
		done += len;
		pos += len;
	}
	pthread_mutex_unlock(&lock);
	return (int) done;
}

static int pfs_write(const char *path, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct handle *h = (struct handle *) (uintptr_t) fi->fh;
	uint64_t pos = (uint64_t) off, end = pos + size, in;
	struct page *p;
	struct node *n;
	size_t done = 0, len;
	int err = 0;

	if (path == NULL)
		return (int) pwrite(h->fd, buf, size, off);
	pthread_mutex_lock(&lock);
	n = node_get(path, h->fd);
	while (pos < end) {
		in = pos % PAGE;
		len = end - pos < PAGE - in ? (size_t) (end - pos) : (size_t) (PAGE - in);
		if ((p = page_get(n, h->fd, pos / PAGE, &err)) == NULL) {
			pthread_mutex_unlock(&lock);
			return err;
		}
		memcpy(p->data + in, buf + done, len);
		done += len;
		pos += len;
	}
	if (end > n->size)
		n->size = end;
	n->dirty = 1;
	pthread_mutex_unlock(&lock);
	return (int) size;
}

static int pfs_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
	struct node *n;
	int fd = fi ? ((struct handle *) (uintptr_t) fi->fh)->fd
	    : openat(root_fd, rel(path), O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	pthread_mutex_lock(&lock);
	if ((n = node_get(path, fd)) != NULL)
		node_truncate(n, (uint64_t) size);
	pthread_mutex_unlock(&lock);
	if (!fi)
		close(fd);
	return n ? 0 : -EIO;
}

static int pfs_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
	struct handle *h = (struct handle *) (uintptr_t) fi->fh;
	struct node *n;
	int rc;

	(void) datasync;			/* the size is written either way */
	if (path == NULL)
		return 0;
	if (power_next || power_off)
		power_at_sync(path);
	pthread_mutex_lock(&lock);
	n = node_get(path, h->fd);
	if (die_next) {				/* written, and yet reported failed */
		die_next = 0;
		dead = 1;
		rc = node_sync(n, h->fd);
		n->errseq++;
		h->seen = n->errseq;
		pthread_mutex_unlock(&lock);
		fprintf(stderr, "powerfs: %s: sync written but failed on command: the disk is dead"
			" from now on (rc %d)\n", path, rc);
		return -EIO;
	}
	if (fail_next || dead) {
		fail_next = 0;
		n->errseq++;
		node_drop_pages(n, h->fd);
		pthread_mutex_unlock(&lock);
		fprintf(stderr, "powerfs: %s: sync failed: unsynced data dropped\n", path);
		invalidate(path);
		h->seen = n->errseq;
		return -EIO;
	}
	rc = node_sync(n, h->fd);
	if (rc == 0 && h->seen != n->errseq) {	/* an earlier failure, reported once */
		h->seen = n->errseq;
		rc = -EIO;
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

static int pfs_release(const char *path, struct fuse_file_info *fi)
{
	struct handle *h = (struct handle *) (uintptr_t) fi->fh;

	(void) path;
	close(h->fd);
	free(h);
	return 0;
}

static int pfs_unlink(const char *path)
{
	if (power_off)
		return -EIO;
	if (unlinkat(root_fd, rel(path), 0) != 0)
		return -errno;
	pthread_mutex_lock(&lock);
	node_remove(path);
	pthread_mutex_unlock(&lock);
	return 0;
}

static int pfs_rename(const char *from, const char *to, unsigned int flags)
{
	struct node *n;

	if (power_off)
		return -EIO;
	if (flags != 0)
		return -EINVAL;
	if (renameat(root_fd, rel(from), root_fd, rel(to)) != 0)
		return -errno;
	pthread_mutex_lock(&lock);
	node_remove(to);
	if ((n = node_find(from)) != NULL) {
		free(n->path);
		n->path = strdup(to);
	}
	pthread_mutex_unlock(&lock);
	return 0;
}

static int pfs_mkdir(const char *path, mode_t mode)
{
	if (power_off)
		return -EIO;
	return mkdirat(root_fd, rel(path), mode) == 0 ? 0 : -errno;
}

static int pfs_rmdir(const char *path)
{
	if (power_off)
		return -EIO;
	return unlinkat(root_fd, rel(path), AT_REMOVEDIR) == 0 ? 0 : -errno;
}

static int pfs_symlink(const char *target, const char *path)
{
	if (power_off)
		return -EIO;
	return symlinkat(target, root_fd, rel(path)) == 0 ? 0 : -errno;
}

static int pfs_readlink(const char *path, char *buf, size_t size)
{
	ssize_t n = readlinkat(root_fd, rel(path), buf, size - 1);

	if (n < 0)
		return -errno;
	buf[n] = 0;
	return 0;
}

static int pfs_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	(void) fi;
	return fchmodat(root_fd, rel(path), mode, 0) == 0 ? 0 : -errno;
}

static int pfs_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi)
{
	(void) fi;
	return fchownat(root_fd, rel(path), uid, gid, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;
}

static int pfs_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi)
{
	(void) fi;
	return utimensat(root_fd, rel(path), tv, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;
}

static int pfs_statfs(const char *path, struct statvfs *sv)
{
	(void) path;
	return fstatvfs(root_fd, sv) == 0 ? 0 : -errno;
}

static int pfs_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
		       struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
	struct dirent *de;
	DIR *d;
	int fd;

	(void) off;
	(void) fi;
	(void) flags;
	if ((fd = openat(root_fd, rel(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return -errno;
	if ((d = fdopendir(fd)) == NULL) {
		close(fd);
		return -errno;
	}
	while ((de = readdir(d)) != NULL)
		if (fill(buf, de->d_name, NULL, 0, 0))
			break;
	closedir(d);
	return 0;
}

static void *pfs_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	(void) conn;
	cfg->attr_timeout = 0;		/* sizes change under the kernel at a failed sync */
	cfg->entry_timeout = 0;
	cfg->negative_timeout = 0;
	cfg->kernel_cache = 0;		/* every open drops the kernel's cache of the file */
	cfg->direct_io = 0;		/* LMDB maps data.mdb */
	cfg->hard_remove = 1;
	return NULL;
}

static const struct fuse_operations ops = {
	.init = pfs_init,
	.getattr = pfs_getattr,
	.readlink = pfs_readlink,
	.mkdir = pfs_mkdir,
	.unlink = pfs_unlink,
	.rmdir = pfs_rmdir,
	.symlink = pfs_symlink,
	.rename = pfs_rename,
	.chmod = pfs_chmod,
	.chown = pfs_chown,
	.truncate = pfs_truncate,
	.open = pfs_open,
	.create = pfs_create,
	.read = pfs_read,
	.write = pfs_write,
	.statfs = pfs_statfs,
	.fsync = pfs_fsync,
	.release = pfs_release,
	.readdir = pfs_readdir,
	.utimens = pfs_utimens,
};

/*
 * on_signal - SIGUSR1 arms a failed sync, SIGUSR2 a dying disk, SIGRTMIN a
 * power cut at a sync; says so
 * (write(2) is async-signal-safe), so that a test waits until it is armed:
 * on a loaded machine another thread's sync can come before the handler
 */
static void on_signal(int sig)
{
	static const char fail[] = "powerfs: armed: the next sync fails\n";
	static const char die[] = "powerfs: armed: the disk dies at the next sync\n";
	static const char power[] = "powerfs: armed: the power goes at the next sync\n";

	if (sig == SIGUSR1) {
		fail_next = 1;
		(void) !write(STDERR_FILENO, fail, sizeof(fail) - 1);
	} else if (sig == SIGRTMIN) {
		power_next = 1;
		(void) !write(STDERR_FILENO, power, sizeof(power) - 1);
	} else {
		die_next = 1;
		(void) !write(STDERR_FILENO, die, sizeof(die) - 1);
	}
}

int main(int argc, char **argv)
{
	char *fargv[] = { argv[0], "-f", "-o", "fsname=powerfs,subtype=powerfs", NULL, NULL };
	struct sigaction sa;
	static sigset_t power;
	pthread_t th;

	if (argc != 3) {
		fprintf(stderr, "usage: powerfs BACKING MOUNTPOINT\n");
		return 2;
	}
	if ((root_fd = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		perror(argv[1]);
		return 1;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGUSR2, &sa, NULL);
	sigaction(SIGRTMIN, &sa, NULL);
	power_seed = getenv("POWERFS_SEED") ? (unsigned) strtoul(getenv("POWERFS_SEED"), NULL, 10)
	    : (unsigned) getpid();
	/* every thread, FUSE's too, leaves SIGPWR to power_main() */
	sigemptyset(&power);
	sigaddset(&power, SIGPWR);
	pthread_sigmask(SIG_BLOCK, &power, NULL);
	if (pthread_create(&th, NULL, power_main, &power) == 0)
		pthread_detach(th);
	fargv[4] = argv[2];
	return fuse_main(5, fargv, &ops, NULL);
}
