/*
 * test_deliver_connect - deliver/esmtp/deliver_connect.c: a connect() to
 * anything but a bridge (test_deliver_bridge's test_bridge_attach) still
 * behaves as connect(), TCP and AF_UNIX. Linked with the libraries alone:
 * the connect() comes from libdeliver.a, as it does in the daemon.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

static int listener(struct sockaddr_in *sin)
{
	socklen_t sl = sizeof(*sin);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *) sin, sizeof(*sin)), 0);
	assert_int_equal(listen(fd, 4), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *) sin, &sl), 0);
	return fd;
}

static void test_tcp_connects(void **state)
{
	struct sockaddr_in sin, peer;
	socklen_t pl = sizeof(peer);
	int l = listener(&sin), fd = socket(AF_INET, SOCK_STREAM, 0);

	(void) state;
	assert_int_equal(connect(fd, (struct sockaddr *) &sin, sizeof(sin)), 0);
	assert_int_equal(getpeername(fd, (struct sockaddr *) &peer, &pl), 0);
	assert_int_equal(peer.sin_port, sin.sin_port);
	close(fd);
	close(l);
}

static void test_errors_pass_through(void **state)
{
	struct sockaddr_in sin;
	int l = listener(&sin), fd;

	(void) state;
	close(l);			/* nothing listens there now */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	errno = 0;
	assert_int_equal(connect(fd, (struct sockaddr *) &sin, sizeof(sin)), -1);
	assert_int_equal(errno, ECONNREFUSED);
	close(fd);
}

static void test_unix_untouched(void **state)
{
	struct sockaddr_un sun;
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	(void) state;
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	strcpy(sun.sun_path, "/nonexistent/test_deliver_connect.sock");
	errno = 0;
	assert_int_equal(connect(fd, (struct sockaddr *) &sun, sizeof(sun)), -1);
	assert_int_equal(errno, ENOENT);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tcp_connects),
		cmocka_unit_test(test_errors_pass_through),
		cmocka_unit_test(test_unix_untouched),
	};

	return cmocka_run_group_tests_name("deliver_connect", tests, NULL, NULL);
}
