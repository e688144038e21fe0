/*
 * NAME
 *	dir 3h
 * SUMMARY
 *	a directory made durable
 * DESCRIPTION
 *	dir_sync() flushes a directory, so that a file renamed into it is
 *	still there after a power cut: a rename made durable.
 */
#ifndef UTIL_DIR_H
#define UTIL_DIR_H

/* dir_sync - flush the directory at path: a rename in it is durable; 0 or -errno */
int dir_sync(const char *path);

#endif
