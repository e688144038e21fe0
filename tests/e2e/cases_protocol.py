"""The SMTP server (SPEC section 6): smuggling, limits, access, protocol details."""

import signal
import smtplib
import time

from harness import (HOSTNAME, Raw, bare_eols, case, check, check_relayed, eq, expect_reply,
                     make_msg, qid_of, received_qids, submit, submit_ok)

VECTORS = [b"\n.\n", b"\r.\r", b"\n.\r\n", b"\r\n.\n", b"\r\n.\r", b"\r.\r\n",
           b"\r\n.\r\r\n", b"\r\n\x00.\r\n"]


def reply_codes(text):
    """reply_codes - the code of each complete reply in raw server output"""
    return [int(l[:3]) for l in text.split("\r\n") if len(l) >= 4 and l[3] == " " and l[:3].isdigit()]


def open_tx(c, sender="sender@example.org", rcpts=("a@example.com",)):
    expect_reply(c.cmd("EHLO client.test"), 250)
    expect_reply(c.cmd("MAIL FROM:<%s>" % sender), 250)
    for r in rcpts:
        expect_reply(c.cmd("RCPT TO:<%s>" % r), 250)
    expect_reply(c.cmd("DATA"), 354)


@case(timeout=90)
def test_smuggling_vectors(t):
    sink = t.sink()
    # CRLF NUL . CRLF must not end a message either; the default refuses a NUL
    # at the end (cases_lines.py), so here NULs are relayed to see where it ended
    d = t.daemon(sink, {"limits": {"nul": "pass"}})
    for i, v in enumerate(VECTORS):
        with Raw(d.port) as c:
            open_tx(c, rcpts=["vector%d@example.com" % i])
            c.send(b"From: <sender@example.org>\r\nSubject: vector %d\r\n"
                   b"X-Idempotency-Key: smuggle-%d\r\n\r\nbefore the vector" % (i, i)
                   + v
                   + b"MAIL FROM:<evil@example.org>\r\nRCPT TO:<victim%d@example.com>\r\n"
                     b"DATA\r\nSubject: smuggled\r\n\r\nevil payload\r\n.\r\nQUIT\r\n" % i)
            out = c.rest(timeout=5)
            eq(reply_codes(out), [250, 221], "replies for vector %r (%r)" % (v, out))
    recs = sink.wait_count(len(VECTORS), timeout=20)
    time.sleep(1.5)
    recs = sink.accepted()
    for r in recs:
        check(not any(a.startswith("victim") for a in r["to"]),
              "a smuggled message reached the upstream: %r" % r["to"])
    eq(sorted(a for r in recs for a in r["to"]),
       sorted("vector%d@example.com" % i for i in range(len(VECTORS))), "recipients upstream")
    for r in recs:
        check(b"evil payload" in r["data"] and b"RCPT TO:<victim" in r["data"],
              "the text after the vector was not kept as content: %r" % r["data"])
        bad = bare_eols(r["data"])
        check(not bad, "bare CR/LF relayed for %s at %s: %r" % (r["to"], bad[:5], r["data"]))


@case()
def test_bare_lf_normalized(t):
    sink = t.sink()
    d = t.daemon(sink)
    with Raw(d.port) as c:
        open_tx(c)
        c.send(b"Subject: bare\r\nX-Idempotency-Key: bare-1\r\n\r\none\ntwo\rthree\r\n.\r\n")
        qid = qid_of(expect_reply(c.reply(), 250, "2.0.0"))
    rec = sink.wait_count(1)[0]
    eq(received_qids(rec["data"]), [qid], "QID relayed")
    body = rec["data"].split(b"\r\n\r\n", 1)[1]
    eq(body, b"one\r\ntwo\r\nthree\r\n", "normalized body")


@case()
def test_bare_lf_reject(t):
    sink = t.sink()
    d = t.daemon(sink, {"limits": {"bare_lf": "reject"}})
    with Raw(d.port) as c:
        open_tx(c)
        c.send(b"Subject: bare\r\nX-Idempotency-Key: bare-2\r\n\r\none\ntwo\r\n.\r\n")
        expect_reply(c.reply(), 550, "5.5.2", "bare LF with bare_lf=reject")
        expect_reply(c.cmd("MAIL FROM:<sender@example.org>"), 250, what="MAIL after the 550")
        expect_reply(c.cmd("RCPT TO:<b@example.com>"), 250)
        expect_reply(c.cmd("DATA"), 354)
        c.send(b"Subject: clean\r\nX-Idempotency-Key: bare-3\r\n\r\nclean\r\n.\r\n")
        expect_reply(c.reply(), 250, "2.0.0", "clean message after the rejected one")
    sink.wait_count(1)
    time.sleep(1.5)
    eq([r["to"] for r in sink.accepted()], [["b@example.com"]], "messages upstream")


@case()
def test_relay_denied(t):
    sink = t.sink()
    d = t.daemon(sink, {"access": {"networks": ["10.0.0.0/8"]}})
    with Raw(d.port) as c:
        expect_reply(c.cmd("EHLO client.test"), 250)
        expect_reply(c.cmd("MAIL FROM:<sender@example.org>"), 250)
        expect_reply(c.cmd("RCPT TO:<a@example.com>"), 554, "5.7.1", "RCPT from outside networks")
        code, _ = c.cmd("DATA")
        check(code >= 500, "DATA with no accepted recipient got %d" % code)
    time.sleep(1)
    eq(sink.accepted(), [], "messages upstream")


@case()
def test_command_line_too_long(t):
    sink = t.sink()
    d = t.daemon(sink)
    s = smtplib.SMTP("127.0.0.1", d.port, timeout=20)
    s.ehlo("client.test")
    expect_reply(s.docmd("NOOP", "x" * 600), 500, "5.5.2", "600-octet command")
    expect_reply(s.docmd("MAIL", "FROM:<%s@example.org>" % ("y" * 520)), 500, "5.5.2",
                 "MAIL with a 530-octet line")
    expect_reply(s.noop(), 250, what="NOOP after the long lines")
    qid = submit_ok(d.port, "a@example.com", make_msg(key="long-cmd"), smtp=s)
    s.quit()
    rec = sink.wait_count(1)[0]
    eq(received_qids(rec["data"]), [qid], "QID relayed")




@case()
def test_message_too_big(t):
    sink = t.sink()
    d = t.daemon(sink, {"limits": {"message_size": "100K"}})
    big = make_msg(key="big-2", body=("z" * 998 + "\r\n") * 200)     # ~200 KB
    s = smtplib.SMTP("127.0.0.1", d.port, timeout=20)
    s.ehlo("client.test")
    check(s.has_extn("size"), "EHLO does not advertise SIZE")
    size = s.esmtp_features["size"].strip()
    check(size.isdigit() and 100000 <= int(size) <= 102400, "SIZE advertised: %r" % size)
    expect_reply(s.mail("sender@example.org", ["SIZE=200000"]), 552, "5.3.4", "MAIL SIZE=200000")
    s.rset()
    r = submit(d.port, "a@example.com", big, smtp=s)
    expect_reply(r.data, 552, "5.3.4", "end of a 200 KB DATA")
    qid = submit_ok(d.port, "a@example.com", make_msg(key="small-2"), smtp=s)
    s.quit()
    rec = sink.wait_count(1)[0]
    eq(received_qids(rec["data"]), [qid], "only the small message relayed")
    time.sleep(1.5)
    eq(len(sink.accepted()), 1, "messages upstream")


@case()
def test_too_many_recipients(t):
    sink = t.sink()
    d = t.daemon(sink, {"limits": {"recipients": 3}})
    rcpts = ["r%d@example.com" % i for i in range(4)]
    r = submit(d.port, rcpts, make_msg(key="many-1"))
    for i in range(3):
        expect_reply(r.rcpts[i], 250, what="RCPT %d" % (i + 1))
    expect_reply(r.rcpts[3], 452, "4.5.3", "RCPT 4 with recipients=3")
    qid = qid_of_result(r)
    recs = sink.wait_count(1)
    time.sleep(1.5)
    recs = sink.accepted()
    eq(sorted(a for x in recs for a in x["to"]), rcpts[:3], "recipients upstream")
    eq({q for x in recs for q in received_qids(x["data"])}, {qid}, "QIDs")



@case()
def test_recipient_in_two_cases(t):
    """One mailbox given twice, its domain in two cases (RFC 5321 2.4: the local
    part is exact, the domain is not), is one recipient everywhere: the engine
    takes the repeat as decided (250, not counted against limits.recipients),
    one claim, one RCPT upstream, the Received header's "for", and a retry of
    the key in the other spelling is the same message."""
    sink = t.sink()
    d = t.daemon(sink, {"limits": {"recipients": 2}})
    msg = make_msg(key="cases-1")
    r = submit(d.port, ["a@EXAMPLE.com", "a@example.com", "b@example.com"], msg)
    eq([c for c, _ in r.rcpts], [250, 250, 250], "RCPT replies with recipients=2")
    qid = qid_of_result(r)
    rec = sink.wait_count(1)[0]
    eq(sorted(rec["to"]), ["a@EXAMPLE.com", "b@example.com"], "recipients upstream")
    eq(submit_ok(d.port, ["a@example.com", "b@example.com"], msg), qid, "QID of the retry")
    msg2 = make_msg(key="cases-2")
    qid2 = submit_ok(d.port, ["a@example.COM", "a@example.com"], msg2)
    recs = sink.wait_count(2)
    got = [x for x in recs if qid2 in received_qids(x["data"])]
    eq([x["to"] for x in got], [["a@example.COM"]], "upstream RCPTs of the second message")
    check(b"for <a@example.COM>;" in got[0]["data"].replace(b"\r\n\t", b" "),
          "the Received header lacks for <a@example.COM>")
    time.sleep(1.5)
    eq(len(sink.accepted()), 2, "messages upstream")


def qid_of_result(r):
    expect_reply(r.data, 250, "2.0.0", "end of DATA")
    return r.qid


@case()
def test_protocol_basics(t):
    sink = t.sink()
    d = t.daemon(sink)
    with Raw(d.port) as c:
        eq(c.greeting[0], 220, "greeting")
        check(HOSTNAME in c.greeting[1], "greeting lacks the hostname: %r" % (c.greeting,))
        code, text = c.cmd("EHLO client.test")
        eq(code, 250, "EHLO")
        ext = {l.split()[0].upper() for l in text.split("\n")[1:] if l.strip()}
        for want in ("PIPELINING", "SIZE", "8BITMIME", "ENHANCEDSTATUSCODES", "DSN", "CHUNKING"):
            check(want in ext, "EHLO lacks %s: %r" % (want, text))
        check("AUTH" not in ext, "AUTH advertised without TLS: %r" % text)
        expect_reply(c.cmd("NOOP"), 250)
        expect_reply(c.cmd("VRFY someone"), 252)
        expect_reply(c.cmd("RCPT TO:<a@example.com>"), 503, "5.5.1", "RCPT before MAIL")
        expect_reply(c.cmd("DATA"), 503, "5.5.1", "DATA before MAIL")
        expect_reply(c.cmd("MAIL FROM:<;sleep 66;>"), 501, "5.1.7", "MAIL FROM:<;sleep 66;>")
        expect_reply(c.cmd("MAIL FROM:<a@example.org> =x"), 501, "5.5.4", "malformed parameter")
        c.send(b"MAIL FROM:<a@example.org> ENVID=a\x00b\r\n")
        expect_reply(c.reply(), 501, "5.5.4", "NUL in a parameter")
        expect_reply(c.cmd("MAIL FROM:<>"), 250, what="null sender")
        expect_reply(c.cmd("MAIL FROM:<b@example.org>"), 503, "5.5.1", "nested MAIL")
        expect_reply(c.cmd("DATA"), 503, "5.5.1", "DATA before RCPT")
        expect_reply(c.cmd("RSET"), 250)
        code, _ = c.cmd("FROBNICATE")
        check(code in (500, 502), "unknown command got %d" % code)
        c.send(b"\x00\xff\xfe\x01garbage\r\n")
        code, _ = c.reply()
        check(500 <= code < 600, "binary garbage got %d" % code)
        expect_reply(c.cmd("HELO client.test"), 250)
        expect_reply(c.cmd("QUIT"), 221)
    check(d.running(), "the daemon died")


@case()
def test_pipelining(t):
    sink = t.sink()
    d = t.daemon(sink)
    msg = make_msg(key="pipe-1")
    with Raw(d.port) as c:
        expect_reply(c.cmd("EHLO client.test"), 250)
        c.send("MAIL FROM:<sender@example.org>\r\nRCPT TO:<a@example.com>\r\n"
               "RCPT TO:<b@example.com>\r\nDATA\r\n")
        eq([c.reply()[0] for _ in range(4)], [250, 250, 250, 354], "pipelined replies")
        c.send(msg + b".\r\nMAIL FROM:<sender@example.org>\r\nRCPT TO:<a@example.com>\r\n"
               b"DATA\r\n" + msg + b".\r\nQUIT\r\n")
        r1 = c.reply()
        q1 = qid_of(expect_reply(r1, 250, "2.0.0", "first pipelined message"))
        eq([c.reply()[0] for _ in range(3)], [250, 250, 354], "second transaction")
        q2 = qid_of(expect_reply(c.reply(), 250, "2.0.0", "pipelined duplicate"))
        eq(q2, q1, "QID of the duplicate")
        expect_reply(c.reply(), 221)
    recs = sink.wait_count(1)
    time.sleep(1.5)
    recs = sink.accepted()
    eq(sorted(a for r in recs for a in r["to"]), ["a@example.com", "b@example.com"],
       "recipients upstream")


@case()
def test_bdat_chunking(t):
    sink = t.sink()
    d = t.daemon(sink)
    msg = make_msg(key="bdat-1", body=".no stuffing in BDAT\r\nsecond chunk here\r\n")
    cut = msg.index(b"second")
    qids = []
    for attempt in range(2):
        with Raw(d.port) as c:
            expect_reply(c.cmd("EHLO client.test"), 250)
            expect_reply(c.cmd("MAIL FROM:<sender@example.org>"), 250)
            expect_reply(c.cmd("RCPT TO:<a@example.com>"), 250)
            c.send(b"BDAT %d\r\n" % cut + msg[:cut])
            expect_reply(c.reply(), 250, what="BDAT chunk")
            c.send(b"BDAT %d LAST\r\n" % (len(msg) - cut) + msg[cut:])
            text = expect_reply(c.reply(), 250, "2.0.0", "BDAT LAST #%d" % attempt)
            qids.append(qid_of(text))
            expect_reply(c.cmd("QUIT"), 221)
    eq(qids[1], qids[0], "QID of the BDAT resubmission")
    rec = sink.wait_count(1)[0]
    check_relayed(rec["data"], msg, qids[0])
    time.sleep(1.5)
    eq(len(sink.accepted()), 1, "messages upstream")


@case()
def test_idle_timeout(t):
    sink = t.sink()
    d = t.daemon(sink, {"limits": {"command_timeout": "2s"}})
    with Raw(d.port, timeout=10) as c:
        expect_reply(c.cmd("EHLO client.test"), 250)
        start = time.monotonic()
        out = c.rest(timeout=8)
        took = time.monotonic() - start
    eq(reply_codes(out)[:1], [421], "reply to an idle client (%r)" % out)
    check(1.5 <= took <= 7, "dropped after %.1fs with command_timeout=2s" % took)


@case()
def test_sigterm_keeps_queue(t):
    """SIGTERM exits 0; what was queued is delivered after the restart, once."""
    sink = t.sink(default="tempfail")
    d = t.daemon(sink)
    msg = make_msg(key="term-1")
    qid = submit_ok(d.port, "a@example.com", msg)
    d.wait_log(qid, "status=deferred")
    idle = Raw(d.port)
    eq(d.stop(signal.SIGTERM), 0, "exit status after SIGTERM")
    idle.close()
    sink.control()
    d.start()
    rec = sink.wait_count(1, timeout=15)[0]
    check_relayed(rec["data"], msg, qid)
    eq(submit_ok(d.port, "a@example.com", msg), qid, "QID of a resubmission after restart")
    time.sleep(2)
    eq(len(sink.accepted()), 1, "messages upstream")
