/*
 * NAME
 *	store_lmdb 3h
 * SUMMARY
 *	the LMDB store backend: the embedded default, one node
 * DESCRIPTION
 *	One module owns all LMDB access; no MDB_* type leaks out
 *	(store_int.h holds the handles, for store/lmdb/ alone).
 *
 *	store_lmdb_open() opens or creates the environment at path with a
 *	map of map_size to start with, for the daemon: STORE_EAGAIN if
 *	another process writes it (store_compact.c: its owner).
 *	store_lmdb_open_readonly() is for
 *	idemrelayctl: MDB_RDONLY, nothing created; STORE_ENOTFOUND if there
 *	is no store at path. store_lmdb_open_alone() is for idemrelayctl
 *	writing with no daemon running: an existing store, which no other
 *	process may have open meanwhile (STORE_EAGAIN if one has: the
 *	daemon, or another idemrelayctl). store_lmdb_compact() is for the
 *	daemon's start (store_compact.c).
 */
#ifndef STORE_LMDB_STORE_LMDB_H
#define STORE_LMDB_STORE_LMDB_H

#include <stddef.h>
#include <stdint.h>

#include "../store.h"

int store_lmdb_open(struct store **out, const char *path, uint64_t map_size,
		    char *err, size_t errlen);
int store_lmdb_open_readonly(struct store **out, const char *path, char *err, size_t errlen);
int store_lmdb_open_alone(struct store **out, const char *path, uint64_t map_size,
			  char *err, size_t errlen);
/* store_lmdb_present - 0 if a store is at path; else STORE_ENOTFOUND and why (none, or unreadable) */
int store_lmdb_present(const char *path, char *err, size_t errlen);
/* store_lmdb_compact - at the daemon's start: copied compact in place if its free list is large */
int store_lmdb_compact(struct store *st);
/* store_lmdb_set_map_max - how far the map may grow (store.map_size_max); 0: the disk (store_map.c) */
void store_lmdb_set_map_max(struct store *st, uint64_t max);

#endif
