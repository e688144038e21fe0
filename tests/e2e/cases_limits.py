"""limits.connections and data_timeout: refused or dropped with 421, and nothing relayed."""

import time

from cases_protocol import reply_codes
from harness import Raw, case, check, eq, expect_reply, make_msg, submit_ok


def hold(port):
    """hold - a connection greeted with 220. The harness's port probe at start
    may still be counted for a moment: a 421 then is retried, briefly."""
    for _ in range(50):
        c = Raw(port)
        if c.greeting[0] == 220:
            return c
        c.close()
        time.sleep(0.1)
    raise AssertionError("no 220 within the connection limit (last %r)" % (c.greeting,))


@case()
def test_connection_limit(t):
    sink = t.sink()
    d = t.daemon(sink, {"limits": {"connections": 3}})
    held = [hold(d.port) for _ in range(3)]
    with Raw(d.port, greet=False) as extra:
        out = extra.rest(timeout=5)
    eq(reply_codes(out)[:1], [421], "the connection over the limit (%r)" % out)
    check("4.7.0" in out, "421 4.7.0 Too many connections (%r)" % out)
    held.pop().close()
    time.sleep(0.3)         # the daemon notices the close on its next turn
    q = submit_ok(d.port, ["a@example.com"], make_msg(key="limit-1"))
    sink.wait_count(1)
    check(d.log_lines(q, "status=sent"), "a new connection after one closed is served")
    for c in held:
        c.close()


@case()
def test_data_timeout(t):
    sink = t.sink()
    d = t.daemon(sink, {"limits": {"data_timeout": "2s", "command_timeout": "60s"}})
    with Raw(d.port, timeout=10) as c:
        expect_reply(c.cmd("EHLO client.test"), 250)
        expect_reply(c.cmd("MAIL FROM:<sender@example.org>"), 250)
        expect_reply(c.cmd("RCPT TO:<a@example.com>"), 250)
        expect_reply(c.cmd("DATA"), 354)
        c.send(b"Subject: stalled\r\n\r\nhalf a mess")
        start = time.monotonic()
        out = c.rest(timeout=8)
        took = time.monotonic() - start
    eq(reply_codes(out)[:1], [421], "reply to a client stalled in DATA (%r)" % out)
    check(1.5 <= took <= 7, "dropped after %.1fs with data_timeout=2s" % took)
    d.wait_log("timeout after DATA")
    time.sleep(1.0)
    eq(len(sink.accepted()), 0, "messages upstream")
