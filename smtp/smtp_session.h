/*
 * NAME
 *	smtp_session 3h
 * SUMMARY
 *	session state shared by the engine's files (engine-internal)
 * DESCRIPTION
 *	struct smtp_session is private to smtp/: smtp_session.c owns its
 *	life cycle, input loop and replies, smtp_command.c its commands.
 *	The state only changes through smtp_enter_state().
 */
#ifndef SMTP_SMTP_SESSION_H
#define SMTP_SMTP_SESSION_H

#include "smtp.h"
#include "smtp_data.h"
#include "smtp_stats.h"

#define SMTP_REPLY_LINE_MAX	512	/* reply line we build, incl. CRLF */

enum smtp_state {
	SMTP_STATE_COMMAND,		/* reading command lines */
	SMTP_STATE_DATA,		/* reading the message */
	SMTP_STATE_CHUNK,		/* reading (or skipping) a BDAT chunk */
	SMTP_STATE_WAIT,		/* message hook holds the tx; no input */
	SMTP_STATE_STARTTLS,		/* 220 queued: input discarded until TLS */
	SMTP_STATE_AUTH,		/* 334 sent: reading an AUTH response line */
	SMTP_STATE_AUTH_WAIT,		/* auth hook holds the credentials; no input */
	SMTP_STATE_CLOSED,		/* QUIT or 421 queued; no input */
};

enum smtp_mech { SMTP_MECH_PLAIN, SMTP_MECH_LOGIN };

/*
 * An AUTH exchange in progress (SMTP_STATE_AUTH, SMTP_STATE_AUTH_WAIT).
 * The authenticated identity is the session's user, not this.
 */
struct smtp_auth {
	enum smtp_mech mech;
	char   *user;			/* owned; LOGIN: name given, password due;
					 * AUTH_WAIT: the name being checked */
	int     failures;		/* 535s in this session */
};

/*
 * BDAT (RFC 3030): the chunk being read in SMTP_STATE_CHUNK. A tx that
 * had a BDAT is one whose data reads raw (smtp_tx_end() clears it).
 */
struct smtp_chunk {
	uint64_t size;			/* this chunk, as announced */
	uint64_t left;			/* octets of it still to come */
	int     last;			/* it ends the message */
	int     skip;			/* refused: discard its octets */
	int     big;			/* the message was too big before it: counted */
};

struct smtp_session {
	struct smtp_config cfg;		/* copy; cfg.hostname not owned (smtp.h) */
	struct smtp_hooks hooks;	/* copy */
	void   *ctx;			/* not owned; passed to the hooks */
	enum smtp_state state;		/* see smtp_enter_state() */
	char   *helo;			/* owned; NULL before HELO/EHLO */
	int     esmtp;			/* greeted with EHLO */
	struct smtp_tx *tx;		/* owned; NULL outside a transaction */
	struct smtp_data data;		/* DATA reader; BDAT's (raw) once the tx had one */
	struct smtp_chunk chunk;	/* BDAT state */
	int     tls;			/* smtp_session_set_tls() was called */
	size_t  discarded;		/* octets dropped after STARTTLS */
	char   *user;			/* owned; authenticated AUTH user, or NULL */
	struct smtp_auth auth;		/* AUTH exchange state */
	struct buf line;		/* owned; partial command line */
	int     line_long;		/* past SMTP_LINE_MAX: discard to LF */
	struct buf out;			/* owned; replies not yet written */
	struct smtp_stats stats;	/* command counts, the last command */
	int     errors;			/* 4xx/5xx replies since a message was accepted */
	int     junk;			/* junk commands since a message was accepted */
	unsigned long records;		/* command lines, AUTH lines, messages
					 * and BDAT chunks received in full */
	enum smtp_close why;		/* why CLOSED, once it is; before: its 421 is
					 * due after the hook's answer */
};

void smtp_enter_state(struct smtp_session *s, enum smtp_state state);
void smtp_reply(struct smtp_session *s, const char *fmt,...)
	__attribute__((format(printf, 2, 3)));
void smtp_reply_external(struct smtp_session *s, const char *reply);
void smtp_tx_end(struct smtp_session *s);
void smtp_refuse(struct smtp_session *s, const struct smtp_tx *tx, const char *stage,
		 const char *reply);
void smtp_session_count(struct smtp_session *s, const char *reply, int junk);
void smtp_session_resume(struct smtp_session *s);	/* after a hook's answer */

/* smtp_chunk_start - read (or skip) a BDAT chunk of size octets */
void smtp_chunk_start(struct smtp_session *s, uint64_t size, int last, int skip);

/* smtp_command - dispatch one command line, its CRLF gone; 1 if junk (smtp_command.c) */
int smtp_command(struct smtp_session *s, char *line, size_t len);

/* AUTH (smtp_auth.c): the command, a response line, the end of an exchange */
void smtp_cmd_auth(struct smtp_session *s, const char *args, size_t len);
void smtp_auth_response(struct smtp_session *s, char *line, size_t len);
void smtp_auth_clear(struct smtp_session *s);	/* wipe and free the exchange */
int smtp_auth_offered(const struct smtp_session *s);

#endif
