/*
 * NAME
 *	dir 3
 * SUMMARY
 *	a directory made durable
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "dir.h"

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
