"""Upstream faults (SPEC section 5, issue 11): resets, closes and stalls, told
apart by whether the final dot reached the upstream's TCP.

A reset while the dot is still unacknowledged by the peer is a plain deferral
in both `ambiguous` modes: the message is delivered once, on a later try. A dot
the peer acknowledged, then a close without a reply, is ambiguous: unconfirmed
and never resent under assume-delivered, resent under retry.

The sink's receive buffer is made small ("rcvbuf" in its control file) so that
what reset-after-N leaves unread cannot sit acknowledged in its kernel: the
message is bigger than the window, and everything the daemon wrote into its
socket buffers, dot included, goes nowhere. A retry needs no small window: the
mid-content cases give the connections after the reset's a wide one (WIDE), so
that 8 MB go in a second rather than 20 through 2 KB.
"""

import os
import re
import time

from harness import (BIN, case, check, check_relayed, eq, make_msg, received_qids,
                     render_conf, run, submit_ok, wait_until)

CTL = os.path.join(os.path.dirname(os.path.abspath(BIN)), "idemrelayctl")
SUBJECT_RE = re.compile(rb"^Subject: burst (\S+)\r$", re.M)

RCVBUF = 2048               # the kernel makes it 4 KB; the window is about 2 KB
WIDE = 1 << 20              # a window for the retries: the kernel makes it 2 MB


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
    # usually "before the final dot was acknowledged"; under load libesmtp may still be
    # writing when the reset comes ("while sending the message"): deferred either way
    line = d.wait_log(qid, "status=deferred", timeout=20)[0]
    check("ambiguous" not in line, "a reset before the dot is no ambiguity: %s" % line)
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
def test_reset_mid_content_no_mark(t):
    """A reset long before the end of a message larger than every socket buffer on
    the way: the bridge's upstream side is over when libesmtp reaches the end of the
    content, so no inflight mark is made and no dot follows (LOST, deliver_smtp_msg.c):
    deferred "while sending the message", then sent once. The first session is held
    before its 354 until the listener's window is wide (WIDE), so that only that
    session has the small one."""
    sink = t.sink(rcvbuf=RCVBUF, data_hold=60)
    d = t.daemon(sink, {"upstream": {"connections": 1}})
    rcpt = "reset-after-1000-first-1-a@example.com"
    msg = big_msg("reset-mid", size=8 * 1024 * 1024)
    qid = submit_ok(d.port, rcpt, msg)
    wait_until(lambda: sink.events("data-hold"), 20, "the first session held")
    sink.control(rcvbuf=WIDE)               # the hold let go, the retry's window wide
    line = d.wait_log(qid, "status=deferred", timeout=30)[0]
    check("while sending the message" in line, "deferred before the end of the content: %s" % line)
    eq(len(sink.events("reset")), 1, "resets by the sink")
    rec = sink.wait_count(1, timeout=30, what="the message on a later try")[0]
    check_relayed(rec["data"], msg, qid)
    exactly(sink, 1, 2, "reset mid-content")


@case()
def test_reset_mid_content_batch(t):
    """One batch of three on one connection, the middle one (8 MB) reset after 1000
    octets: the first sent once, the second deferred "while sending" (no mark), the
    third never begun and deferred; then each sent once, none ambiguous (the bridge's
    "over" flag is its connection's, not a message's)."""
    sink = t.sink(rcvbuf=RCVBUF, data_hold=60)
    d = t.daemon(sink, {"upstream": {"connections": 1}})
    h = submit_ok(d.port, "h@example.com", make_msg(key="batch-hold"))
    wait_until(lambda: sink.events("data-hold"), 20, "the first session held")
    a = submit_ok(d.port, "a@example.com", make_msg(key="batch-a"))
    b = submit_ok(d.port, "reset-after-1000-first-1-b@example.com",
                  big_msg("batch-b", size=8 * 1024 * 1024))
    c = submit_ok(d.port, "c@example.com", make_msg(key="batch-c"))
    sink.control(rcvbuf=WIDE)               # the hold let go, the retries' window wide
    line = d.wait_log(b, "status=deferred", timeout=30)[0]
    check("while sending the message" in line, "b: %s" % line)
    d.wait_log(a, "status=sent", timeout=30)
    for q in (h, b, c):
        d.wait_log(q, "status=sent", timeout=30)
    got = exactly(sink, 4, 2, "a batch with a reset mid-content")
    eq(sorted(r["to"][0] for r in got), sorted(["h@example.com", "a@example.com",
       "reset-after-1000-first-1-b@example.com", "c@example.com"]), "each once")
    eq(d.log_lines(b, "unconfirmed") + d.log_lines(b, "ambiguous"), [], "b never ambiguous")


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


def ctl(d, *args):
    """ctl - idemrelayctl on the daemon's config; must succeed"""
    r = run([CTL, "-c", d.conf_path] + list(args))
    check(r.returncode == 0, "idemrelayctl %s: exit %d: %s" % (" ".join(args), r.returncode,
                                                              r.stderr))


@case(timeout=180)
def test_kill9_mid_batch_unconfirmed_bounded(t):
    """kill -9 while two connections deliver a burst in batches of 50 (issue 11,
    item 3: ~110 delivered messages per kill were logged unconfirmed, outcomes being
    written per batch). An outcome is now written with the next message's mark, so
    at any moment a connection has at most one message whose dot may be out and
    whose outcome is not durable: after the restart at most `connections` are
    unconfirmed, and every other message reaches the sink exactly once."""
    conns, n = 2, 200
    sink = t.sink(greeting=421)
    d = t.daemon(sink, {"upstream": {"connections": conns},
                        "retry": {"first": "1h", "max": "1h", "give_up": "5d"},
                        "control": os.path.join(t.tmp, "ctl.sock")})
    qids = {}
    for i in range(n):
        key = "burst-%03d" % i
        qids[key] = submit_ok(d.port, "a%d@example.com" % (i % 7),
                              make_msg(key=key, subject="burst %s" % key))
    wait_until(lambda: len(d.log_lines("status=deferred")) >= n, 30, "every message deferred")
    sink.control()
    ctl(d, "flush")         # all due at once: full batches on both connections
    wait_until(lambda: len([f for f in os.listdir(sink.record_dir) if f.endswith(".json")])
               >= n // 3, 30, "a third of the burst at the sink", interval=0.005)
    d.kill9()
    at_kill = len(sink.accepted())
    d.start()
    ctl(d, "flush")

    def settled():
        log = d.log()
        by_key = {}
        for r in sink.accepted():
            m = SUBJECT_RE.search(r["data"])
            by_key.setdefault(m.group(1).decode(), []).append(r)
        unconf = {k for k, q in qids.items() if "%s: to=" % q in log
                  and any(q in l and "status=unconfirmed" in l for l in log.splitlines())}
        return (by_key, unconf) if all(k in by_key or k in unconf for k in qids) else None

    by_key, unconf = wait_until(settled, 60, "every message delivered or unconfirmed")
    time.sleep(2)
    by_key, unconf = settled()
    dups = [k for k, rs in by_key.items() if len(rs) > 1]
    lost = [k for k in qids if k not in by_key and k not in unconf]
    delivered_unconf = [k for k in unconf if k in by_key]
    print("kill -9 with %d of %d at the sink: %d unconfirmed after the restart (%d of them"
          " had reached the sink), bound %d" % (at_kill, n, len(unconf), len(delivered_unconf),
                                                  conns))
    check(not dups, "delivered twice: %s" % dups[:10])
    check(not lost, "never delivered and not unconfirmed: %s" % lost[:10])
    check(len(unconf) <= conns, "%d unconfirmed after kill -9, want at most %d (one per"
          " connection): %s" % (len(unconf), conns, sorted(unconf)))


def stop_while_hung(d, sink, conns, upstream):
    """stop_while_hung - once the sink has conns connections (the last one
    hanging before its greeting), SIGTERM must end the daemon within 5 s"""
    wait_until(lambda: len(sink.events("connect")) >= conns, 15, "connection %d to the sink" % conns)
    time.sleep(0.5)
    began = time.time()
    eq(d.stop(timeout=30), 0, "exit status after SIGTERM")
    took = time.time() - began
    check(took < 5, "SIGTERM took %.1f s with %s stuck before its greeting" % (took, upstream))


@case()
def test_greeting_hang_timeout_and_stop(t):
    """an upstream that accepts and never greets: the attempt is deferred on
    upstream.timeout, logged as a timeout (not a dropped connection); and a
    SIGTERM while one such connection is open stops the daemon at once, not
    when the timeout runs out, leaving the message queued for the next start"""
    sink = t.sink(greeting="hang")
    d = t.daemon(sink, {"upstream": {"timeout": "2s"},
                        "retry": {"first": "1s", "max": "1s", "give_up": "5d"}})
    qid = submit_ok(d.port, "a@example.com", make_msg(key="greet-hang-1"))
    line = d.wait_log(qid, "status=deferred", timeout=15)[0]
    check("timeout" in line or "timed out" in line, "deferral reason: %s" % line)
    check("dropped connection" not in line, "a hung greeting logged as a drop: %s" % line)

    # stop while the next connection hangs: the daemon goes within a few seconds
    d.stop()
    d.conf["upstream"]["timeout"] = "60s"
    with open(d.conf_path, "w") as f:
        f.write(render_conf(d.conf))
    d.start()
    qid2 = submit_ok(d.port, "b@example.com", make_msg(key="greet-hang-2"))
    stop_while_hung(d, sink, 2, "an upstream")
    sink.control()
    d.start()
    recs = sink.wait_count(2, timeout=20, what="both messages delivered after the restart")
    eq(sorted(q for r in recs for q in received_qids(r["data"])), sorted([qid, qid2]), "QIDs")


@case()
def test_greeting_hang_stop_starttls(t):
    """the same stop while the bridge itself waits for the greeting of a
    STARTTLS upstream (before libesmtp has the connection): at once too"""
    sink = t.sink(greeting="hang")
    d = t.daemon(sink, {"upstream": {"timeout": "60s", "tls": "starttls", "tls_verify": False},
                        "retry": {"first": "1s", "max": "1s", "give_up": "5d"}})
    qid = submit_ok(d.port, "a@example.com", make_msg(key="greet-hang-tls"))
    stop_while_hung(d, sink, 1, "a STARTTLS upstream")
    check(d.log_lines(qid, "status=deferred", "delivery is stopping"),
          "the attempt deferred as stopped:\n%s" % "\n".join(d.log_lines(qid)))


@case()
def test_stop_waits_for_dot_reply(t):
    """a SIGTERM while the reply to a final dot is owed waits for that
    reply: the message is recorded sent before the exit, and not sent
    again after the restart (nothing ambiguous, nothing twice)"""
    sink = t.sink()
    d = t.daemon(sink, {"upstream": {"timeout": "30s"}})
    qid = submit_ok(d.port, "delay-3-stop@example.com", make_msg(key="stop-dot"))
    wait_until(lambda: sink.events("dot"), 15, "the final dot at the sink")
    eq(d.stop(timeout=30), 0, "exit status after SIGTERM")
    lines = d.log_lines(qid, "relay=", "status=")
    check(len(lines) == 1 and "status=sent" in lines[0],
          "the outcome recorded before the exit: %s" % lines)
    d.start()
    time.sleep(2)
    eq(len(sink.accepted()), 1, "copies at the sink after the restart")
    check(not d.log_lines(qid, "unconfirmed"), "logged unconfirmed: %s" % d.log_lines(qid))


@case()
def test_stalled_rcpt_many_pipelined(t):
    """a server that stops answering at the first of twenty pipelined RCPTs: the
    reply's deadline ends the upstream side and the gate answers libesmtp's 21
    commands owed. With more owed than the bridge keeps names of (16) it took a
    final dot's reply to be among them, hung up on libesmtp, and libESMTP 1.1.0
    crashed the daemon (SIGSEGV). Deferred, then delivered once to all twenty."""
    sink = t.sink()
    d = t.daemon(sink, {"upstream": {"timeout": "2s"}})
    rcpts = ["stall-first-1-a@example.com"] + ["r%d@example.com" % i for i in range(19)]
    msg = make_msg(key="stall-many")
    qid = submit_ok(d.port, rcpts, msg)
    line = d.wait_log(qid, "to=<r18@example.com>", "status=deferred")[0]
    check("timeout waiting for the reply to" in line, "deferred for: %s" % line)
    rec = sink.wait_count(1, timeout=30)[0]
    check_relayed(rec["data"], msg, qid)
    eq(sorted(r["addr"] for r in rec["rcpts"]), sorted(rcpts), "recipients of the one copy")
    check(d.running(), "the daemon died")
