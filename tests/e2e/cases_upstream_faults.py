"""Upstream faults (SPEC section 5, issue 11): resets, closes and stalls, told
apart by whether the final dot reached the upstream's TCP.

A reset while the dot is still unacknowledged by the peer is a plain deferral
in both `ambiguous` modes: the message is delivered once, on a later try. A dot
the peer acknowledged, then a close without a reply, is ambiguous: unconfirmed
and never resent under assume-delivered, resent under retry.

The sink's receive buffer is made small ("rcvbuf" in its control file) so that
what reset-after-N leaves unread cannot sit acknowledged in its kernel: the
message is bigger than the window, and everything the daemon wrote into its
socket buffers, dot included, goes nowhere.
"""

import time

from harness import (case, check, check_relayed, eq, make_msg, received_qids, submit_ok,
                     wait_until)

RCVBUF = 2048               # the kernel makes it 4 KB; the window is about 2 KB


def big_msg(key, size=64 * 1024):
    """big_msg - a message well over the sink's window, well under the daemon's
    socket buffers: libesmtp writes all of it and the dot before the reset"""
    line = b"0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstu\r\n"
    return make_msg(key=key, body=line * (size // len(line)))


def exactly(sink, n, wait, what):
    """exactly - after `wait` seconds, exactly n accepted records"""
    time.sleep(wait)
    got = sink.accepted()
    eq(len(got), n, "%s: copies at the sink" % what)
    return got


def reset_before_dot(t, ambiguous):
    sink = t.sink(rcvbuf=RCVBUF)
    d = t.daemon(sink, {"upstream": {"ambiguous": ambiguous, "connections": 1}})
    rcpt = "reset-after-1000-first-1-a@example.com"
    msg = big_msg("reset-%s" % ambiguous)
    qid = submit_ok(d.port, rcpt, msg)
    d.wait_log(qid, "status=deferred", "before the final dot was acknowledged", timeout=20)
    rec = sink.wait_count(1, timeout=20, what="the message on a later try")[0]
    check_relayed(rec["data"], msg, qid)
    d.wait_log(qid, "status=sent")
    eq(len(sink.events("reset")), 1, "resets by the sink")
    exactly(sink, 1, 3, "reset before the dot, ambiguous=%s" % ambiguous)
    eq(d.log_lines(qid, "unconfirmed"), [], "unconfirmed lines")
    eq(d.log_lines(qid, "ambiguous"), [], "ambiguous lines")


@case()
def test_reset_before_dot_assume_delivered(t):
    """A reset before the dot reached the upstream's TCP: deferred, then sent once,
    even under ambiguous = assume-delivered (issue 11, item 1: 191 of 191 lost)."""
    reset_before_dot(t, "assume-delivered")


@case()
def test_reset_before_dot_retry(t):
    """The same under ambiguous = retry: deferred (not "ambiguous, will resend"), once."""
    reset_before_dot(t, "retry")


@case()
def test_acked_dot_close_unconfirmed(t):
    """The sink reads the final dot (its TCP acknowledges it) and closes cleanly
    without a reply: ambiguous; assume-delivered never sends it again."""
    sink = t.sink()
    d = t.daemon(sink)
    rcpt = "close-after-dot-a@example.com"
    msg = make_msg(key="close-1")
    qid = submit_ok(d.port, rcpt, msg)
    rec = sink.wait_count(1)[0]
    check_relayed(rec["data"], msg, qid)
    lines = d.wait_log(qid, "status=unconfirmed")
    check("closed the connection" in lines[0], "the reason says how it ended: %s" % lines[0])
    exactly(sink, 1, 4, "acknowledged dot, then close")
    eq(len(sink.rcpt_attempts(rcpt)), 1, "RCPT attempts")


@case()
def test_acked_dot_close_retry_resends(t):
    """The same under ambiguous = retry: sent again (a duplicate the key header
    lets a downstream idemrelay catch)."""
    sink = t.sink()
    d = t.daemon(sink, {"upstream": {"ambiguous": "retry"}})
    rcpt = "close-after-dot-first-1-a@example.com"
    qid = submit_ok(d.port, rcpt, make_msg(key="close-2"))
    recs = sink.wait_count(2, timeout=20, what="the message resent after the close")
    eq([r["reply"][:5] for r in recs], ["close", "250 2"], "upstream replies")
    for r in recs:
        eq(received_qids(r["data"]), [qid], "QID in each copy")
    d.wait_log(qid, "status=sent")
    d.wait_log(qid, "ambiguous, will resend")
    exactly(sink, 2, 2.5, "ambiguous=retry")


@case()
def test_trickled_reply_deferred_others_delivered(t):
    """A 354 sent one octet a second (issue 11, item 6: nothing delivered for 75 s):
    the reply's deadline is upstream.timeout, which no octet moves, so the message
    is deferred within about the timeout, with a reason that says so; meanwhile
    the other connection delivers the rest; then the trickled one goes once."""
    timeout = 3
    sink = t.sink()
    d = t.daemon(sink, {"upstream": {"timeout": "%ds" % timeout, "connections": 2}})
    slow = submit_ok(d.port, "trickle-data-first-1-a@example.com", make_msg(key="trickle-1"))
    wait_until(lambda: sink.events("trickle"), 10, "the sink trickling its 354")
    t0 = time.monotonic()
    qids = [submit_ok(d.port, "b%d@example.com" % i, make_msg(key="fast-%d" % i))
            for i in range(3)]
    sink.wait_count(3, timeout=timeout - 0.5,
                    what="3 messages delivered by the other connection meanwhile")
    line = d.wait_log(slow, "status=deferred", timeout=timeout + 5)[0]
    took = time.monotonic() - t0
    check(took <= timeout + 2, "deferred after %.1fs, want about %ds" % (took, timeout))
    check("timeout waiting for the reply to DATA from 127.0.0.1" in line,
          "the reason names the reply and the host: %s" % line)
    for q in qids:
        d.wait_log(q, "status=sent")
    sink.wait_count(4, timeout=15, what="the trickled message on a later try")
    d.wait_log(slow, "status=sent")
    exactly(sink, 4, 2, "after the trickle")


@case()
def test_trickled_dot_reply_ambiguous_timeout(t):
    """The reply to the final dot trickled: ambiguous (the dot was acknowledged),
    logged with "timeout" as the reason, not "dropped connection"."""
    timeout = 3
    sink = t.sink()
    d = t.daemon(sink, {"upstream": {"timeout": "%ds" % timeout}})
    qid = submit_ok(d.port, "trickle-dot-a@example.com", make_msg(key="trickle-2"))
    sink.wait_count(1)
    t0 = time.monotonic()
    line = d.wait_log(qid, "status=unconfirmed", timeout=timeout + 5)[0]
    check(time.monotonic() - t0 <= timeout + 2, "unconfirmed only after %.1fs"
          % (time.monotonic() - t0))
    check("timeout waiting for the reply to the final dot" in line, "reason: %s" % line)
    check("dropped connection" not in line, "reason: %s" % line)
    exactly(sink, 1, 2, "the trickled dot")


@case()
def test_hang_after_dot_ambiguous_timeout(t):
    """The sink reads the dot and says nothing more: ambiguous within the timeout."""
    sink = t.sink()
    d = t.daemon(sink, {"upstream": {"timeout": "2s", "ambiguous": "retry"}})
    qid = submit_ok(d.port, "hang-after-dot-first-1-a@example.com", make_msg(key="hang-1"))
    line = d.wait_log(qid, "ambiguous, will resend", timeout=10)[0]
    check("timeout waiting for the reply to the final dot" in line, "reason: %s" % line)
    sink.wait_count(2, timeout=15, what="the message resent after the hang")
    d.wait_log(qid, "status=sent")
