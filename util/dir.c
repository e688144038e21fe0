/*
 * NAME
 *	dir 3
 * SUMMARY
 *	directories made, and made durable
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dir.h"

/*
 * dir_one - one directory of the path: found, or made. It is looked at
 * first, so that one already there is fine even where mkdir() would say
 * EACCES or EROFS before EEXIST; EEXIST after ENOENT is another process
 * making it at the same time.
 */
static int dir_one(const char *path, mode_t mode)
{
	struct stat st;

	if (stat(path, &st) < 0) {
		if (errno != ENOENT)
			return -errno;
		if (mkdir(path, mode) == 0)
			return 0;
		if (errno != EEXIST || stat(path, &st) < 0)
			return -errno;
	}
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* dir_make - make path and each directory above it that is missing, as mkdir -p */
int dir_make(const char *path, mode_t mode)
{
	char p[4096];
	size_t len = strlen(path), i;
	int rc;

	if (len == 0)
		return -ENOENT;
	if (len >= sizeof(p))
		return -ENAMETOOLONG;
	memcpy(p, path, len + 1);
	for (i = 1; i <= len; i++) {
		if ((p[i] != '/' && p[i] != 0) || p[i - 1] == '/')
			continue;	/* inside a name, or after a slash: "a//b", "a/" */
		p[i] = 0;
		rc = dir_one(p, mode);
		p[i] = path[i];
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* dir_sync - flush the directory at path: a rename in it is durable; 0 or -errno */
int dir_sync(const char *path)
{
	int fd, rc = 0;

	if ((fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return -errno;
	if (fsync(fd) != 0)
		rc = -errno;
	close(fd);
	return rc;
}
