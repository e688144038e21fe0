/*
 * test_deliver_watch - the reply deadline of deliver/esmtp/deliver_watch.c
 * on a real loopback TCP connection whose reader the test controls: a
 * peer that takes none of our bytes is a stalled transfer once
 * upstream.timeout has passed (never sooner), a peer still taking them
 * moves the deadline on, and a peer that has everything but does not
 * answer is a late reply. The watch samples the peer's progress only
 * once a wait has lasted a while (what the bridge pays for a reply that
 * comes in time is no system call), so these cover the samples' rules.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../deliver/esmtp/deliver_watch.h"

#define TIMEOUT_MS	1000		/* upstream.timeout of these tests */
#define CAP_MS		10000		/* no test waits longer than this */

/* now_ms - monotonic milliseconds */
static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * tcp_pair - a loopback TCP connection: *snd non-blocking with a large
 * send buffer, *rcv with a small receive window the test reads by hand
 */
static void tcp_pair(int *snd, int *rcv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int lfd, small = 4096, big = 262144;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true((lfd = socket(AF_INET, SOCK_STREAM, 0)) >= 0);
	assert_int_equal(setsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	assert_int_equal(bind(lfd, (struct sockaddr *) &a, sizeof(a)), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *) &a, &len), 0);
	assert_int_equal(listen(lfd, 1), 0);
	assert_true((*snd = socket(AF_INET, SOCK_STREAM, 0)) >= 0);
	assert_int_equal(setsockopt(*snd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big)), 0);
	assert_int_equal(connect(*snd, (struct sockaddr *) &a, sizeof(a)), 0);
	assert_true((*rcv = accept(lfd, NULL, NULL)) >= 0);
	close(lfd);
	assert_int_equal(fcntl(*snd, F_SETFL, O_NONBLOCK), 0);
	assert_int_equal(fcntl(*rcv, F_SETFL, O_NONBLOCK), 0);
}

/* fill - write until the kernel takes no more: bytes wait beyond the peer's window */
static void fill(int fd)
{
	char buf[16384];
	size_t total = 0;
	ssize_t n;

	memset(buf, 'x', sizeof(buf));
	while ((n = write(fd, buf, sizeof(buf))) > 0)
		total += (size_t) n;
	assert_int_equal(errno, EAGAIN);
	assert_true(total > 0);
}

/* read_some - the peer takes 4 KB: its window opens, and our queue moves on */
static void read_some(int fd)
{
	char buf[4096];

	assert_true(read(fd, buf, sizeof(buf)) > 0);
}

/*
 * run - tick as the bridge does, sleeping as long as the watch says, until
 * a deadline passes or the cap; reader(): what the peer does each turn.
 * Returns the ms from start to the deadline; -1 at the cap.
 */
static int64_t run(struct deliver_watch *w, const char *owed, int64_t start,
		   void (*reader)(int64_t elapsed, void *arg), void *arg)
{
	int wait = deliver_watch_tick(w, owed, 0, 1);

	while (wait != 0 && now_ms() - start < CAP_MS) {
		poll(NULL, 0, wait < 0 || wait > 100 ? 100 : wait);
		if (reader)
			reader(now_ms() - start, arg);
		wait = deliver_watch_tick(w, owed, 0, 0);
	}
	return wait == 0 ? now_ms() - start : -1;
}

/* a peer that takes nothing: a stalled transfer, called at the timeout, not sooner */
static void test_stalled_transfer(void **state)
{
	struct deliver_watch w;
	int snd, rcv;
	int64_t start, took;

	(void) state;
	tcp_pair(&snd, &rcv);
	fill(snd);
	deliver_watch_init(&w, snd, TIMEOUT_MS);
	start = now_ms();
	took = run(&w, "the final dot", start, NULL, NULL);
	assert_true(took >= TIMEOUT_MS);
	assert_true(took < CAP_MS);		/* at the timeout, not only at run()'s cap */
	assert_non_null(strstr(w.why, "timeout sending to the server ("));
	assert_non_null(strstr(w.why, "octets unacknowledged for 1 s)"));
	close(snd);
	close(rcv);
}

struct slow_reader {
	int fd;
	int64_t until;			/* ms after the start the peer stops reading */
	int64_t last;			/* ms of its last read */
};

/* slow_read - take 4 KB every 150 ms, until p->until */
static void slow_read(int64_t elapsed, void *arg)
{
	struct slow_reader *p = arg;

	if (elapsed < p->until && elapsed - p->last >= 150) {
		read_some(p->fd);
		p->last = elapsed;
	}
}

/* a peer still taking our bytes moves the deadline on; once it stops, the timeout runs */
static void test_progress_moves_deadline(void **state)
{
	struct deliver_watch w;
	struct slow_reader p = { .until = 2500, .last = 0 };
	int snd;
	int64_t start, took;

	(void) state;
	tcp_pair(&snd, &p.fd);
	fill(snd);
	deliver_watch_init(&w, snd, TIMEOUT_MS);
	start = now_ms();
	took = run(&w, "the final dot", start, slow_read, &p);
	/*
	 * not while the peer was taking our bytes: a full timeout after its
	 * last read, whenever that was (a stall of this process may end the
	 * reads before p.until, and the deadline is then rightly sooner)
	 */
	assert_true(p.last > 0);
	if (took < p.last + TIMEOUT_MS)
		fail_msg("deadline at %lld ms, the peer's last read at %lld ms: want %d ms after",
			 (long long) took, (long long) p.last, TIMEOUT_MS);
	assert_non_null(strstr(w.why, "timeout sending to the server ("));
	close(snd);
	close(p.fd);
}

/* everything acknowledged and no reply: a late reply, named, at the timeout */
static void test_late_reply(void **state)
{
	struct deliver_watch w;
	int snd, rcv;
	int64_t start, took;

	(void) state;
	tcp_pair(&snd, &rcv);
	assert_int_equal(write(snd, "DATA\r\n", 6), 6);
	deliver_watch_init(&w, snd, TIMEOUT_MS);
	/* nothing owed: no deadline */
	assert_int_equal(deliver_watch_tick(&w, NULL, 0, 0), -1);
	start = now_ms();
	took = run(&w, "DATA", start, NULL, NULL);
	assert_true(took >= TIMEOUT_MS);
	assert_true(took < CAP_MS);		/* at the timeout, not only at run()'s cap */
	assert_string_equal(w.why, "timeout waiting for the reply to DATA");
	close(snd);
	close(rcv);
}

/* a reply ends a wait: the next one starts from it, with its own full timeout */
static void test_reply_restarts_wait(void **state)
{
	struct deliver_watch w;
	int snd, rcv, wait;
	int64_t start;

	(void) state;
	tcp_pair(&snd, &rcv);
	deliver_watch_init(&w, snd, TIMEOUT_MS);
	assert_true(deliver_watch_tick(&w, "MAIL", 0, 1) > 0);
	poll(NULL, 0, 700);
	/* MAIL answered, RCPT owed now: a new wait, not 300 ms left of the old one */
	start = now_ms();
	wait = deliver_watch_tick(&w, "RCPT", 1, 0);
	assert_true(wait > 0);
	while (wait != 0 && now_ms() - start < CAP_MS) {
		poll(NULL, 0, wait > 100 ? 100 : wait);
		wait = deliver_watch_tick(&w, "RCPT", 1, 0);
	}
	assert_int_equal(wait, 0);
	assert_true(now_ms() - start >= TIMEOUT_MS);
	assert_string_equal(w.why, "timeout waiting for the reply to RCPT");
	close(snd);
	close(rcv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stalled_transfer),
		cmocka_unit_test(test_progress_moves_deadline),
		cmocka_unit_test(test_late_reply),
		cmocka_unit_test(test_reply_restarts_wait),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
