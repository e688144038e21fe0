"""Acceptance and deduplication (SPEC sections 3 and 4), judged at the upstream sink."""

import re
import threading
import time

from harness import LMDB_ONLY
from harness import (Raw, case, check, check_relayed, eq, expect_reply, make_msg, qid_of,
                     received_qids, submit, submit_ok, wait_until)

def _qids(rec):
    return received_qids(rec["data"])


SETTLE = 1.5    # retry.first is 1s: anything queued by mistake shows up by then


def settle(sink, n, what):
    """settle - wait a retry period, then insist the sink holds exactly n messages"""
    time.sleep(SETTLE)
    got = sink.accepted()
    eq(len(got), n, "%s: messages at the sink (to %s)" % (what, [r["to"] for r in got]))
    return got


@case()
def test_first_submission(t):
    sink = t.sink()
    d = t.daemon(sink)
    msg = make_msg(key="first-1", subject="first", msgid="<first-1@example.org>",
                   extra=["Received: from elsewhere by client.test; Mon, 1 Jan 2024"],
                   body="Body line 1\r\n.dotted line\r\n\r\n  spaced  \r\nlast\r\n")
    r = submit(d.port, "a@example.com", msg)
    text = expect_reply(r.data, 250, "2.0.0", "end of DATA")
    qid = qid_of(text)
    check(12 <= len(qid) <= 20, "QID length %d" % len(qid))
    sink.wait_count(1)
    rec = settle(sink, 1, "first submission")[0]
    eq(rec["to"], ["a@example.com"], "recipients upstream")
    eq(rec["mail_from"], "sender@example.org", "envelope sender upstream")
    check_relayed(rec["data"], msg, qid)
    d.wait_log(qid, "status=sent")
    check(d.log_lines(qid, "status=queued"), "no '%s: ... status=queued' log line" % qid)


@case()
def test_duplicate_gets_original_qid(t):
    sink = t.sink()
    d = t.daemon(sink)
    msg = make_msg(key="dup-1")
    qid = submit_ok(d.port, "a@example.com", msg)
    sink.wait_count(1)
    # a retry on a new connection, then twice more within one session
    eq(submit_ok(d.port, "a@example.com", msg), qid, "QID of the resubmission")
    with Raw(d.port) as c:
        c.cmd("EHLO client.test")
        for i in range(2):
            expect_reply(c.cmd("MAIL FROM:<sender@example.org>"), 250)
            expect_reply(c.cmd("RCPT TO:<a@example.com>"), 250)
            expect_reply(c.cmd("DATA"), 354)
            c.send(msg + b".\r\n")
            text = expect_reply(c.reply(), 250, "2.0.0", "duplicate #%d in one session" % i)
            eq(qid_of(text), qid, "QID of duplicate #%d in one session" % i)
    settle(sink, 1, "after three duplicates")
    # Postfix's discard line, under the original's QID
    check(d.log_lines("%s: discard: END-OF-MESSAGE from unknown[127.0.0.1]: 250 2.0.0" % qid,
                      "status=duplicate"), "no discard line with status=duplicate")


@case()
def test_second_key_header(t):
    sink = t.sink()
    d = t.daemon(sink)
    msg = make_msg(key="alt-1", key_header="Idempotency-Key")
    qid = submit_ok(d.port, "a@example.com", msg)
    eq(submit_ok(d.port, "a@example.com", msg), qid, "QID of the resubmission")
    rec = sink.wait_count(1)[0]
    check_relayed(rec["data"], msg, qid)
    settle(sink, 1, "Idempotency-Key duplicate")


@case()
def test_every_key_header_stripped(t):
    """issue 31: twelve key header fields, both names in several cases, one folded:
    none reaches the sink (at most eight went before), all else byte for byte"""
    sink = t.sink()
    d = t.daemon(sink)
    names = ["X-Idempotency-Key", "Idempotency-Key", "x-idempotency-KEY", "IDEMPOTENCY-KEY"]
    extra = []
    for i in range(12):
        extra.append("X-Before-%d: %d" % (i, i))
        extra.append("%s: many-%d%s" % (names[i % 4], i, "\r\n\tfolded" if i == 5 else ""))
    msg = make_msg(key=None, extra=extra, body="X-Idempotency-Key: in the body stays\r\n")
    qid = submit_ok(d.port, "a@example.com", msg)
    rec = sink.wait_count(1)[0]
    head = rec["data"].split(b"\r\n\r\n", 1)[0].lower()
    eq(head.count(b"idempotency-key"), 0, "key header fields relayed")
    check_relayed(rec["data"], msg, qid)
    check(d.log_lines(qid, "key=many-0 (header)"), "the first listed header's first field is the key")


@case()
def test_message_id_fallback(t):
    sink = t.sink()
    d = t.daemon(sink)
    qid = submit_ok(d.port, "a@example.com", make_msg(msgid="<mid-1@example.org>"))
    # angle brackets and surrounding space are not part of the key
    again = make_msg(msgid="   <mid-1@example.org>  ")
    eq(submit_ok(d.port, "a@example.com", again), qid, "QID for the same Message-ID")
    other = submit_ok(d.port, "a@example.com", make_msg(msgid="<mid-2@example.org>"))
    check(other != qid, "another Message-ID got the same QID")
    sink.wait_count(2)
    settle(sink, 2, "Message-ID fallback")


@case()
def test_envid_fallback(t):
    sink = t.sink()
    d = t.daemon(sink)
    msg = make_msg()        # no key header, no Message-ID
    qid = submit_ok(d.port, "a@example.com", msg, mail_opts=["ENVID=env-42"])
    eq(submit_ok(d.port, "a@example.com", msg, mail_opts=["ENVID=env-42"]), qid,
       "QID for the same ENVID")
    rec = sink.wait_count(1)[0]
    check("ENVID=env-42" in rec["mail_params"], "ENVID not passed upstream: %r" % rec["mail_params"])
    settle(sink, 1, "ENVID fallback")


@case()
def test_no_key_delivered_twice(t):
    sink = t.sink()
    d = t.daemon(sink)
    msg = make_msg()        # no key header, no Message-ID, no ENVID
    q1 = submit_ok(d.port, "a@example.com", msg)
    q2 = submit_ok(d.port, "a@example.com", msg)
    check(q1 != q2, "two keyless submissions share QID %s" % q1)
    recs = sink.wait_count(2)
    eq(sorted(q for r in recs for q in _qids(r)), sorted([q1, q2]), "QIDs relayed")
    settle(sink, 2, "keyless")
    check(d.log_lines("key=none"), "no key=none log line")


def per_rcpt(sink):
    """per_rcpt - recipient -> list of QIDs it was relayed under"""
    out = {}
    for r in sink.accepted():
        for a in r["to"]:
            out.setdefault(a, []).extend(_qids(r))
    return out


@case()
def test_partial_duplicate(t):
    sink = t.sink()
    d = t.daemon(sink)
    msg = make_msg(key="partial-1")
    a, b, c = "a@example.com", "b@example.com", "c@example.com"
    q1 = submit_ok(d.port, [a, b], msg)
    wait_until(lambda: {a, b} <= set(per_rcpt(sink)), 15, "a and b delivered")
    q2 = submit_ok(d.port, [a, b, c], msg)
    check(q2 != q1, "the new recipient went under the old QID %s" % q1)
    wait_until(lambda: c in per_rcpt(sink), 15, "c delivered")
    time.sleep(SETTLE)
    eq(per_rcpt(sink), {a: [q1], b: [q1], c: [q2]}, "recipient -> QIDs relayed")
    # now every recipient is claimed: a full duplicate again
    eq(submit_ok(d.port, [c], msg), q2, "QID when resending to c alone")
    q3 = submit_ok(d.port, [a, b, c], msg)
    check(q3 in (q1, q2), "resending to all three: QID %s is neither %s nor %s" % (q3, q1, q2))
    time.sleep(SETTLE)
    eq(per_rcpt(sink), {a: [q1], b: [q1], c: [q2]}, "recipient -> QIDs after the duplicates")


@case()
def test_mismatch_rejected(t):
    sink = t.sink()
    d = t.daemon(sink)
    qid = submit_ok(d.port, "a@example.com", make_msg(key="mm-1", body="original\r\n"))
    r = submit(d.port, "a@example.com", make_msg(key="mm-1", body="different\r\n"))
    text = expect_reply(r.data, 554, "5.7.0", "same key, other body")
    check(qid in text, "554 does not name the original QID %s: %r" % (qid, text))
    # the envelope sender is part of the fingerprint too
    r = submit(d.port, "a@example.com", make_msg(key="mm-1", body="original\r\n"),
               sender="other@example.org")
    expect_reply(r.data, 554, "5.7.0", "same key, other sender")
    # Postfix's reject line, with no QID of its own
    eq(len(d.log_lines("NOQUEUE: reject: END-OF-MESSAGE from unknown[127.0.0.1]: 554 5.7.0",
                       "status=mismatch")), 2, "reject lines with status=mismatch")
    sink.wait_count(1)
    rec = settle(sink, 1, "mismatch")[0]
    check(b"original" in rec["data"], "the sink got the wrong body")


@case()
def test_mismatch_accept(t):
    sink = t.sink()
    d = t.daemon(sink, {"keys": {"on_mismatch": "accept"}})
    q1 = submit_ok(d.port, "a@example.com", make_msg(key="mma-1", body="original\r\n"))
    q2 = submit_ok(d.port, "a@example.com", make_msg(key="mma-1", body="different\r\n"))
    check(q1 != q2, "on_mismatch=accept reused QID %s" % q1)
    sink.wait_count(2)
    settle(sink, 2, "mismatch accepted")


@case()
def test_new_date_header_is_duplicate(t):
    sink = t.sink()
    d = t.daemon(sink)
    q1 = submit_ok(d.port, "a@example.com",
                   make_msg(key="date-1", date="Mon, 01 Jan 2024 00:00:00 +0000"))
    q2 = submit_ok(d.port, "a@example.com",
                   make_msg(key="date-1", date="Tue, 02 Jan 2024 09:30:00 +0100",
                            extra=["X-Retry: 2"]))
    eq(q2, q1, "QID for a retry with a new Date: header")
    sink.wait_count(1)
    settle(sink, 1, "new Date header")


@case(timeout=120)
def test_concurrent_racers(t):
    """20 connections end DATA for one key at the same instant: one message."""
    sink = t.sink()
    d = t.daemon(sink)
    n = 20
    msg = make_msg(key="race-1", body="racing\r\n")
    barrier = threading.Barrier(n, timeout=30)
    replies, errors = [None] * n, []

    def racer(i):
        try:
            with Raw(d.port, timeout=30) as c:
                c.cmd("EHLO racer%d.test" % i)
                expect_reply(c.cmd("MAIL FROM:<sender@example.org>"), 250)
                expect_reply(c.cmd("RCPT TO:<a@example.com>"), 250)
                expect_reply(c.cmd("DATA"), 354)
                c.send(msg)
                barrier.wait()
                c.send(b".\r\n")
                replies[i] = c.reply()
        except Exception as e:
            errors.append("racer %d: %r" % (i, e))
            barrier.abort()

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    check(not errors, "racers failed: %s" % errors)
    qids = set()
    for i, r in enumerate(replies):
        qids.add(qid_of(expect_reply(r, 250, "2.0.0", "racer %d" % i)))
    eq(len(qids), 1, "distinct QIDs among %d racers (%s)" % (n, sorted(qids)))
    rec = sink.wait_count(1)[0]
    check_relayed(rec["data"], msg, qids.pop())
    settle(sink, 1, "racers")


@case()
def test_shadow_mode(t):
    sink = t.sink()
    d = t.daemon(sink, {"keys": {"mode": "shadow"}})
    msg = make_msg(key="shadow-1")
    q1 = submit_ok(d.port, "a@example.com", msg)
    q2 = submit_ok(d.port, "a@example.com", msg)
    check(q1 != q2, "shadow mode answered the duplicate with the old QID")
    sink.wait_count(2)
    settle(sink, 2, "shadow mode")
    check(d.log_lines("duplicate"), "shadow mode did not log the duplicate")


@case()
def test_require_key(t):
    sink = t.sink()
    d = t.daemon(sink, {"keys": {"require": True, "message_id": False, "envid": False}})
    r = submit(d.port, "a@example.com", make_msg(msgid="<x@example.org>"))
    expect_reply(r.data, 550, "5.7.0", "keyless message with keys.require")
    submit_ok(d.port, "a@example.com", make_msg(key="req-1"))
    sink.wait_count(1)
    settle(sink, 1, "require")


@case()
def test_bad_key_value(t):
    sink = t.sink()
    d = t.daemon(sink)
    r = submit(d.port, "a@example.com", make_msg(key="k" * 201))
    expect_reply(r.data, 550, "5.7.0", "201-character key")
    r = submit(d.port, "a@example.com", make_msg(key="caf\u00e9"))
    expect_reply(r.data, 550, "5.7.0", "non-ASCII key")
    # 200 characters, with spaces trimmed around it, is fine
    q = submit_ok(d.port, "a@example.com", make_msg(key="  " + "k" * 200 + "  "))
    eq(submit_ok(d.port, "a@example.com", make_msg(key="k" * 200)), q, "trimmed key")
    sink.wait_count(1)
    settle(sink, 1, "bad keys")


@case(stores=LMDB_ONLY)
def test_map_full(t):
    """The map fills up (limits.message_size must stay below store.map_size, so
    the map is filled by messages held queued): 452 4.3.1, nothing
    half-written, and the daemon keeps accepting what fits."""
    sink = t.sink(greeting=421)             # hold everything in the spool
    d = t.daemon(sink, {"store": {"map_size": "4M", "map_size_max": "4M"},
                           "limits": {"message_size": "3M"}})
    big = [make_msg(key="big-%d" % i, body=("%d" % i * 998 + "\r\n") * 2400)   # ~2.4 MB
           for i in range(3)]
    replies = []
    for i, m in enumerate(big):
        r = submit(d.port, "a@example.com", m)
        replies.append(r.data)
        if r.code != 250:
            break
    check(replies[0][0] == 250, "the first 2.4 MB message into a 4 MB map: %r" % (replies[0],))
    full = len(replies) - 1
    expect_reply(replies[-1], 452, "4.3.1", "2.4 MB message #%d into a full 4 MB map" % (full + 1))
    check(d.running(), "the daemon died on a full map")
    # nothing half-written: the refused key is still new, not a duplicate
    r = submit(d.port, "a@example.com", big[full])
    expect_reply(r.data, 452, "4.3.1", "the refused message again")
    small = submit_ok(d.port, "a@example.com", make_msg(key="small-1"))
    sink.control()
    want = full + 1
    recs = sink.wait_count(want, timeout=20)
    time.sleep(SETTLE)
    recs = sink.accepted()
    eq(len(recs), want, "messages upstream")
    check(small in [q for r in recs for q in _qids(r)], "the small message was not relayed")
    check(not any(b"big-%d" % full in r["data"] or (b"%d" % full * 998) in r["data"]
                  for r in recs), "the refused message was relayed")


@case()
def test_postfix_split_recipients(t):
    """Postfix splits one message's recipients over parallel transactions with
    one Message-ID: claims are per recipient, so every part is queued."""
    sink = t.sink()
    d = t.daemon(sink)
    msg = make_msg(msgid="<split-1@example.org>")
    parts = [["a@example.com", "b@example.com"], ["c@example.com", "d@example.com"]]
    qids, errors = [None, None], []
    barrier = threading.Barrier(2, timeout=20)

    def part(i):
        try:
            barrier.wait()
            qids[i] = submit_ok(d.port, parts[i], msg)
        except Exception as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=part, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    check(not errors, "parts failed: %s" % errors)
    check(qids[0] != qids[1], "both parts answered with %s" % qids[0])
    wait_until(lambda: len(per_rcpt(sink)) == 4, 15, "four recipients delivered")
    time.sleep(SETTLE)
    eq(per_rcpt(sink), {"a@example.com": [qids[0]], "b@example.com": [qids[0]],
                        "c@example.com": [qids[1]], "d@example.com": [qids[1]]},
       "recipient -> QIDs relayed")
    # Postfix retries the second part only: a duplicate of that part
    eq(submit_ok(d.port, parts[1], msg), qids[1], "QID of the retried part")


@case()
def test_message_id_logged(t):
    """Each message queued logs its client as client=unknown[ADDR] helo=<H>, and
    its Message-ID once, as Postfix's cleanup
    does ('QID: message-id=<...>', issue 26 part 1), so a person can find it
    from what the application knows; not for a duplicate, none without one,
    and nothing but printable ASCII goes into the log."""
    sink = t.sink()
    d = t.daemon(sink)
    q = submit_ok(d.port, ["a@example.com"], make_msg(key="mid-1", msgid="<order-42@shop.test>"))
    d.wait_log("%s: message-id=<order-42@shop.test>" % q)
    # Postfix's client=name[addr], which its log parsers expect, the HELO name apart
    eq(len(d.log_lines("%s: client=unknown[127.0.0.1] helo=<client.test> key=mid-1" % q)), 1,
       "the queued line's client= and helo=")
    eq(submit_ok(d.port, ["a@example.com"], make_msg(key="mid-1", msgid="<order-42@shop.test>")),
       q, "the duplicate's QID")
    q2 = submit_ok(d.port, ["a@example.com"], make_msg(key="mid-2"))
    q3 = submit_ok(d.port, ["a@example.com"],
                   make_msg(key="mid-3", msgid="<odd\x01id@shop.test>"))
    d.wait_log(q3, "status=queued")
    eq(len(d.log_lines("message-id=<order-42@shop.test>")), 1, "logged once, not for the duplicate")
    eq(d.log_lines(q2, "message-id="), [], "no Message-ID, no line")
    eq(len(d.log_lines("%s: message-id=<odd?id@shop.test>" % q3)), 1, "a control octet as ?")


@case()
def test_answer_lines_whole(t):
    """The lines of a message queued and of its duplicate, whole: client=, helo=,
    key=, from=, to=, size=, and the discard line's proto= and helo=. Each names
    the HELO its message came under, though the client pipelined another EHLO
    behind the dot and the commit answered after it was read (a second session
    open, so the commit thread answers)."""
    sink = t.sink()
    d = t.daemon(sink)
    msg = make_msg(key="whole-1")
    with Raw(d.port) as idle, Raw(d.port) as c:
        expect_reply(c.cmd("EHLO client.test"), 250)
        expect_reply(c.cmd("MAIL FROM:<sender@example.org>"), 250)
        expect_reply(c.cmd("RCPT TO:<a@example.com>"), 250)
        expect_reply(c.cmd("DATA"), 354)
        c.send(msg + b".\r\nEHLO later.test\r\n")
        qid = qid_of(expect_reply(c.reply(), 250))
        expect_reply(c.reply(), 250)
        d.wait_log(qid, "status=queued")
        line = d.log_lines(qid, "status=queued")[0]
        check(re.search(r"%s: client=unknown\[127\.0\.0\.1\] helo=<client\.test> key=whole-1 "
                        r"\(header\) from=<sender@example\.org> to=<a@example\.com> size=[0-9]+ "
                        r"status=queued$" % qid, line), "the queued line: %r" % line)
        expect_reply(c.cmd("MAIL FROM:<sender@example.org>"), 250)
        expect_reply(c.cmd("RCPT TO:<a@example.com>"), 250)
        expect_reply(c.cmd("DATA"), 354)
        c.send(msg + b".\r\n")
        expect_reply(c.reply(), 250)
        idle.cmd("QUIT")
    want = ("%s: discard: END-OF-MESSAGE from unknown[127.0.0.1]: 250 2.0.0 Ok: queued as %s "
            "(duplicate); from=<sender@example.org> to=<a@example.com> proto=ESMTP "
            "helo=<later.test> key=whole-1 (header) status=duplicate" % (qid, qid))
    d.wait_log(want)
    check(d.log_lines(want)[0].endswith(want), "the discard line: %r" % d.log_lines(want))


@case()
def test_reject_lines(t):
    """Every refusal of mail is one line in Postfix's form (issue 26 part 1):
    'NOQUEUE: reject: STAGE from unknown[ADDR]: REPLY; from=<S> to=<R>
    proto=ESMTP helo=<H>', for a relay denied, a declared SIZE or a message
    over limits.message_size, and a message with no key where one is
    required, so that Postfix's log parsers count them."""
    sink = t.sink()
    d = t.daemon(sink, {"access": {"networks": []}, "limits": {"message_size": "10K"},
                        "keys": {"require": True}})
    tail = "; from=<sender@example.org> to=<%s> proto=ESMTP helo=<client.test>"
    with Raw(d.port) as c:
        expect_reply(c.cmd("EHLO client.test"), 250)
        expect_reply(c.cmd("MAIL FROM:<sender@example.org>"), 250)
        expect_reply(c.cmd("RCPT TO:<far@example.net>"), 554)
    d.wait_log("NOQUEUE: reject: RCPT from unknown[127.0.0.1]: 554 5.7.1 <far@example.net>: "
               "Relay access denied" + tail % "far@example.net")
    e = t.daemon(sink, {"limits": {"message_size": "10K"}, "keys": {"require": True}})
    with Raw(e.port) as c:
        expect_reply(c.cmd("EHLO client.test"), 250)
        expect_reply(c.cmd("MAIL FROM:<sender@example.org> SIZE=20000"), 552)
        expect_reply(c.cmd("MAIL FROM:<sender@example.org>"), 250)
        expect_reply(c.cmd("RCPT TO:<a@example.com>"), 250)
        expect_reply(c.cmd("DATA"), 354)
        c.send(make_msg(key="big-1", body=("x" * 998 + "\r\n") * 20) + b".\r\n")
        expect_reply(c.reply(), 552)
        expect_reply(c.cmd("MAIL FROM:<sender@example.org>"), 250)
        expect_reply(c.cmd("RCPT TO:<a@example.com>"), 250)
        expect_reply(c.cmd("DATA"), 354)
        c.send(make_msg() + b".\r\n")
        expect_reply(c.reply(), 550)
    e.wait_log("NOQUEUE: reject: MAIL from unknown[127.0.0.1]: 552 5.3.4 Message size exceeds "
               "fixed limit; from=<sender@example.org> proto=ESMTP helo=<client.test>")
    e.wait_log("NOQUEUE: reject: END-OF-MESSAGE from unknown[127.0.0.1]: 552 5.3.4 Message size "
               "exceeds fixed limit" + tail % "a@example.com")
    e.wait_log("NOQUEUE: reject: END-OF-MESSAGE from unknown[127.0.0.1]: 550 5.7.0 Message has "
               "no idempotency key" + tail % "a@example.com")
    eq(sink.accepted(), [], "nothing relayed")
