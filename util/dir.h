/*
 * NAME
 *	dir 3h
 * SUMMARY
 *	directories made, and made durable
 * DESCRIPTION
 *	dir_make() makes a directory and the ones above it that are
 *	missing, as mkdir -p does: the one rule for the store's, the
 *	control socket's and the Maildir's directories. dir_sync()
 *	flushes a directory, so that a file renamed into it is still
 *	there after a power cut: a rename made durable.
 */
#ifndef UTIL_DIR_H
#define UTIL_DIR_H

#include <sys/types.h>

/*
 * dir_make - make path and each directory above it that is missing, with
 * mode (less the umask), as mkdir -p: 0 or -errno. One already there is
 * fine, a symbolic link to one too; anything else on the way is -ENOTDIR.
 * A trailing or doubled slash changes nothing.
 */
int dir_make(const char *path, mode_t mode);

/* dir_sync - flush the directory at path: a rename in it is durable; 0 or -errno */
int dir_sync(const char *path);

#endif
