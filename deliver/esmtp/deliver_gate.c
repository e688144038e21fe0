/*
 * NAME
 *	deliver_gate 3
 * SUMMARY
 *	the bridge's reply gate: whole, well-formed, owed replies for libesmtp
 * DESCRIPTION
 *	See deliver_gate.h for why. Pure functions of their state and input,
 *	like the filter: the unit tests and the fuzz harness feed them
 *	directly. The checks are libESMTP 1.1.0's read_smtp_response() made
 *	stricter where that is simpler (a reply either may or may not fail
 *	there; stricter only ever turns a reply into a lost connection).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deliver_gate.h"

/* deliver_gate_init - a gate for a new connection */
void deliver_gate_init(struct deliver_gate *g)
{
	memset(g, 0, sizeof(*g));
}

/* gate_bad - the server broke the protocol: gone, nothing more passes */
static void gate_bad(struct deliver_gate *g, const char *what)
{
	char why[DELIVER_GATE_WHY];

	snprintf(why, sizeof(why), "the server's reply broke the protocol (%s)", what);
	deliver_gate_gone(g, why);
}

/*
 * triplet - an enhanced status code at p as libESMTP reads one: three
 * numbers by strtol() with a "." after the first two. 1 if so.
 */
static int triplet(const char *p, long t[3])
{
	char *end;
	int i;

	for (i = 0; i < 3; i++) {
		t[i] = strtol(p, &end, 10);
		p = end;
		if (i < 2 && *p++ != '.')
			return 0;
	}
	return 1;
}

/* not_checked - a reply libesmtp reads with no enhanced codes: greeting, EHLO, HELO */
static int not_checked(const char *verb)
{
	return verb == NULL || strcmp(verb, "the greeting") == 0 || strcmp(verb, "EHLO") == 0
	    || strcmp(verb, "HELO") == 0;
}

/* line_form - the form every reply line has: "DDD" 200-599, then " " or "-"; 0 or why not */
static const char *line_form(const char *l, size_t n)
{
	if (memchr(l, 0, n))
		return "a NUL in a reply line";
	if (n < 5)
		return "a reply line with no text";
	if (l[0] < '2' || l[0] > '5' || !isdigit((unsigned char) l[1])
	    || !isdigit((unsigned char) l[2]) || (l[3] != ' ' && l[3] != '-'))
		return "a reply line that is not \"DDD text\"";
	return NULL;
}

/* first_line - the first line of a reply to verb: owed? its code and enhanced code */
static const char *first_line(struct deliver_gate *g, const char *verb)
{
	if (verb == NULL)
		return "a reply nobody asked for";
	memcpy(g->code, g->line, 3);
	g->trip_set = g->enhanced && !not_checked(verb) && triplet(g->line + 4, g->trip);
	if (strcmp(verb, "EHLO") == 0)
		g->ehlo_enh = 0;
	return NULL;
}

/* next_line - a continuation line: the first line's code and enhanced code */
static const char *next_line(struct deliver_gate *g)
{
	long t[3];

	if (memcmp(g->line, g->code, 3) != 0)
		return "a line with another code in the same reply";
	if (g->trip_set && (!triplet(g->line + 4, t) || t[0] != g->trip[0]
			    || t[1] != g->trip[1] || t[2] != g->trip[2]))
		return "a line with another enhanced code in the same reply";
	return NULL;
}

/* release - the reply held, to verb, is whole: libesmtp gets it */
static size_t release(struct deliver_gate *g, const char *verb, char *out)
{
	size_t n = g->held_len;

	memcpy(out, g->held, n);
	if (strcmp(verb, "EHLO") == 0)
		g->enhanced = g->ehlo_enh;
	g->data_open = strcmp(verb, "DATA") == 0 && g->code[0] == '3';
	g->released++;
	g->held_len = 0;
	g->lines = 0;
	return n;
}

/* line_end - a whole line: check it, hold it, release its reply if it is the last */
static size_t line_end(struct deliver_gate *g, struct deliver_filter *f, char *out)
{
	const char *bad = line_form(g->line, g->line_len);
	const char *verb = deliver_filter_verb(f, g->released);	/* what it answers */
	int last = g->line_len > 3 && g->line[3] == ' ';

	g->line[g->line_len] = 0;
	if (bad == NULL)
		bad = g->lines == 0 ? first_line(g, verb) : next_line(g);
	if (bad == NULL && g->held_len + g->line_len > sizeof(g->held))
		bad = "a reply longer than 4096 octets";
	if (bad) {
		gate_bad(g, bad);
		return 0;
	}
	if (strcmp(verb, "EHLO") == 0) {
		if (strcasestr(g->line, "ENHANCEDSTATUSCODES"))
			g->ehlo_enh = 1;	/* anywhere: checking more than libesmtp is safe */
		deliver_filter_ehlo_line(f, g->line, g->line_len);
	}
	memcpy(g->held + g->held_len, g->line, g->line_len);
	g->held_len += g->line_len;
	g->lines++;
	g->line_len = 0;
	return last ? release(g, verb, out) : 0;
}

/* deliver_gate_down - the server's bytes: whole replies libesmtp takes, in out */
size_t deliver_gate_down(struct deliver_gate *g, struct deliver_filter *f,
			 const char *in, size_t len, char *out)
{
	size_t i, n = 0;

	for (i = 0; i < len && !g->gone; i++) {
		if (g->line_len == DELIVER_GATE_LINE_MAX) {
			gate_bad(g, "a reply line longer than 1000 octets");
			break;
		}
		g->line[g->line_len++] = in[i];
		if (in[i] == '\n')
			n += line_end(g, f, out + n);
	}
	return n;
}

/* deliver_gate_gone - the server is gone: drop what it had not finished */
void deliver_gate_gone(struct deliver_gate *g, const char *why)
{
	size_t i;

	if (!g->gone) {
		g->gone = 1;
		snprintf(g->why, sizeof(g->why), "%s", why && why[0] ? why : "lost connection");
		for (i = 0; g->why[i]; i++)	/* it goes into a reply line */
			if ((unsigned char) g->why[i] < 0x20 || (unsigned char) g->why[i] > 0x7e)
				g->why[i] = '?';
	}
	g->line_len = g->held_len = 0;
	g->lines = 0;
}

/* deliver_gate_answer - once gone: the replies owed, up to a final dot's */
size_t deliver_gate_answer(struct deliver_gate *g, const struct deliver_filter *f,
			   char *out, size_t outlen)
{
	const char *verb;
	size_t n = 0;
	int quit, k;

	if (!g->gone || g->hangup)
		return 0;
	if (g->released >= f->cmds && g->data_open)
		g->hangup = 1;		/* libesmtp is writing a content */
	while (!g->hangup && (verb = deliver_filter_verb(f, g->released)) != NULL) {
		if (strcmp(verb, DELIVER_FILTER_DOT) == 0) {
			g->hangup = 1;	/* the server's to answer, and it never will */
			break;
		}
		quit = strcmp(verb, "QUIT") == 0;
		k = snprintf(out + n, outlen - n, "%s %s, no reply to %s\r\n",
			     quit ? "221 2.0.0 " DELIVER_GATE_MARK : "421 4.4.2 " DELIVER_GATE_MARK,
			     g->why, verb);
		if (k < 0 || (size_t) k >= outlen - n)
			break;		/* the rest next time */
		n += (size_t) k;
		g->released++;
		g->data_open = 0;
		g->answered = 1;
	}
	return n;
}

/* deliver_gate_ours - is this status text one the gate made up? */
int deliver_gate_ours(const char *text)
{
	const char *p = text;

	if (p == NULL)
		return 0;
	if (isdigit((unsigned char) *p) && (p = strchr(p, ' ')) != NULL)
		p++;		/* libesmtp keeps the enhanced code when it was not on */
	else
		p = text;
	return strncmp(p, DELIVER_GATE_MARK, sizeof(DELIVER_GATE_MARK) - 1) == 0;
}
