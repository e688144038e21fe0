/*
 * test_conn - a client connection's input and output (relay/conn.c), over
 * a socketpair whose server end has a small send buffer, driven by a real
 * epoll set as the event loop drives it: a client that pipelines without
 * end and reads its replies slowly must not make the daemon buffer what it
 * sends.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../relay/server_int.h"
#include "../../tls/io.h"
#include "../../util/log.h"

/*
 * A client pipelining EHLO (no error, no junk) that reads 512 octets of
 * replies a turn: the engine stops taking commands while 32 KB of replies
 * wait (OUT_MAX), and whenever a partial write left fewer, but not none,
 * conn.c read another READ_CHUNK of commands though the engine had not
 * taken the last: the input buffer grew with whatever the client sent.
 */
static void test_slow_reader_input_bounded(void **state)
{
	static const char ehlo[] = "EHLO x\r\n";
	struct conf cf;
	struct server srv;
	struct listener l;
	struct conn *c;
	struct epoll_event evs[4];
	char err[256], junk[512], out[8192];
	size_t i, most = 0, sent = 0, got = 0;
	int sv[2], small = 4096, n, k;

	(void) state;
	assert_int_equal(conf_load(&cf, NULL, err, sizeof(err)), 0);
	memset(&srv, 0, sizeof(srv));
	srv.cf = &cf;
	assert_true((srv.epfd = epoll_create1(EPOLL_CLOEXEC)) >= 0);
	memset(&l, 0, sizeof(l));
	l.smtp_cf.hostname = "mx.test";
	l.smtp_cf.out_max = OUT_MAX;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	for (i = 0; i + sizeof(ehlo) - 1 <= sizeof(out); i += sizeof(ehlo) - 1)
		memcpy(out + i, ehlo, sizeof(ehlo) - 1);

	c = xcalloc(1, sizeof(*c));
	c->tag = TAG_CONN;
	c->srv = &srv;
	c->l = &l;
	c->io = io_plain_new(sv[0]);
	strcpy(c->addr, "192.0.2.1");
	c->s = smtp_session_new(&l.smtp_cf, NULL, c);
	srv.conns = c;
	srv.n_conns = 1;
	c->events = EPOLLIN;
	server_ep_set(&srv, EPOLL_CTL_ADD, sv[0], EPOLLIN, c);
	smtp_session_greet(c->s);
	conn_flush(c);

	for (i = 0; i < 20000 && !c->dead; i++) {
		while ((n = (int) write(sv[1], out, sizeof(out))) > 0)
			sent += (size_t) n;
		if ((n = (int) read(sv[1], junk, sizeof(junk))) > 0)
			got += (size_t) n;
		n = epoll_wait(srv.epfd, evs, 4, 0);
		for (k = 0; k < n && !c->dead; k++)
			conn_event(c, evs[k].events);
		if (c->in.len > most)
			most = c->in.len;
	}
	print_message("%zu turns, %zu octets sent, %zu of replies read, input buffer at most %zu\n",
		      i, sent, got, most);
	assert_false(c->dead);
	if (got < i * sizeof(junk) / 2)
		fail_msg("the client read %zu octets of replies in %zu turns: not served", got, i);
	if (most > READ_CHUNK)
		fail_msg("the input buffer held %zu octets (one read is %d)", most, READ_CHUNK);
	conn_close(c);
	conn_free(c);
	close(sv[1]);
	close(srv.epfd);
	conf_free(&cf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slow_reader_input_bounded),
	};

	log_setup("test_conn", 0, LOG_LEVEL_WARN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
