/*
 * NAME
 *	check 3h
 * SUMMARY
 *	what start-up needs of the system, checked before anything starts
 * DESCRIPTION
 *	check_startup() looks, without changing anything, at what the
 *	start would use and could fail on: the TLS certificate and key (and
 *	that they match), the AUTH users file, the user to become, the
 *	control socket's place, the store's and the Maildir's directories,
 *	the listen and metrics ports, upstream.tls_ca. `idemrelay -t` reports
 *	every problem; the start stops at the first, with the same words.
 *
 *	Each problem is one line naming the setting where it was written
 *	("FILE:LINE: tls.cert: ...", conf_where()) and what to do about it.
 */
#ifndef DAEMON_CHECK_H
#define DAEMON_CHECK_H

#include "../conf/conf.h"

/* check_report - one problem, as a whole line without the program name */
typedef void (*check_report)(const char *problem);

/* check_startup - every problem to report(); the number found */
int check_startup(const struct conf *c, check_report report);

#endif
