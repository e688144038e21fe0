"""The upstream sink on its own: the tests below trust what it records."""

import smtplib

from harness import Raw, case, check, eq, expect_reply, make_msg, run, wait_until


@case(timeout=30, needs_daemon=False)
def test_sink_records_and_unstuffs(t):
    sink = t.sink()
    msg = make_msg(key="k", body=".leading dot\r\n..two\r\nbare\nlf\r\n")
    s = smtplib.SMTP("127.0.0.1", sink.port, timeout=10)
    code, text = s.ehlo("c.test")
    eq(code, 250, "EHLO")
    for ext in (b"PIPELINING", b"8BITMIME", b"DSN", b"SIZE", b"ENHANCEDSTATUSCODES"):
        check(ext in text, "sink EHLO lacks %s" % ext)
    s.mail("a@example.org", ["BODY=8BITMIME", "ENVID=e1"])
    s.rcpt("x@example.com", ["NOTIFY=FAILURE", "ORCPT=rfc822;x@example.com"])
    expect_reply(s.data(msg), 250, "2.0.0")
    s.mail("", [])
    s.rcpt("y@example.com")
    expect_reply(s.data(b"Subject: 2\r\n\r\nsecond\r\n"), 250)
    s.quit()
    recs = sink.wait_count(2)
    eq(len(recs), 2, "records")
    eq(recs[0]["mail_from"], "a@example.org", "mail_from")
    eq(recs[0]["mail_params"], ["BODY=8BITMIME", "ENVID=e1"], "mail params")
    eq(recs[0]["rcpts"], [{"addr": "x@example.com",
                           "params": ["NOTIFY=FAILURE", "ORCPT=rfc822;x@example.com"]}], "rcpts")
    # smtplib sends bytes as they are, bare LF too; the dots come back unstuffed
    eq(recs[0]["data"], msg, "data")
    eq(recs[1]["mail_from"], "", "null sender")
    eq(recs[0]["conn"], recs[1]["conn"], "two messages on one connection")


@case(timeout=30, needs_daemon=False)
def test_sink_end_of_data_strict(t):
    """Only CRLF.CRLF ends data at the sink, so it can judge what was relayed."""
    sink = t.sink()
    with Raw(sink.port) as c:
        c.cmd("EHLO c.test")
        c.cmd("MAIL FROM:<a@example.org>")
        c.cmd("RCPT TO:<x@example.com>")
        expect_reply(c.cmd("DATA"), 354)
        # the CRLF-line ".\nD" is dot-stuffed as a sender must
        c.send(b"Subject: s\r\n\r\nA\n.\nB\r.\rC\r\n..\nD\r\n\x00.\r\nE\r\n.\r\n")
        expect_reply(c.reply(), 250)
        expect_reply(c.cmd("QUIT"), 221)
    rec = sink.wait_count(1)[0]
    eq(rec["data"], b"Subject: s\r\n\r\nA\n.\nB\r.\rC\r\n.\nD\r\n\x00.\r\nE\r\n", "data")


@case(timeout=30, needs_daemon=False)
def test_sink_chunking(t):
    """CHUNKING only when the control file asks; BDAT chunks make one message."""
    sink = t.sink()
    with Raw(sink.port) as c:
        code, text = c.cmd("EHLO c.test")
        check("CHUNKING" not in text, "CHUNKING offered unasked")
        sink.control(chunking=True)
        code, text = c.cmd("EHLO c.test")
        check("CHUNKING" in text, "CHUNKING not offered")
        c.cmd("MAIL FROM:<a@example.org>")
        c.cmd("RCPT TO:<x@example.com>")
        c.send(b"BDAT 14\r\nSubject: s\r\n\r\n")
        expect_reply(c.reply(), 250)
        c.send(b"BDAT 7 LAST\r\n.body\r\n")
        expect_reply(c.reply(), 250, "2.0.0")
        expect_reply(c.cmd("QUIT"), 221)
    rec = sink.wait_count(1)[0]
    eq(rec["data"], b"Subject: s\r\n\r\n.body\r\n", "data")
    eq(rec["via"], "BDAT", "via")


@case(timeout=40, needs_daemon=False)
def test_sink_faults(t):
    sink = t.sink()
    s = smtplib.SMTP("127.0.0.1", sink.port, timeout=10)
    s.ehlo("c.test")
    s.mail("a@example.org")
    expect_reply(s.rcpt("tempfail-a@example.com"), 451, "4.3.0")
    expect_reply(s.rcpt("permfail-a@example.com"), 550, "5.1.1")
    expect_reply(s.rcpt("fail-first-2-a@example.com"), 451, "4.3.0")
    expect_reply(s.rcpt("fail-first-2-a@example.com"), 451, "4.3.0")
    expect_reply(s.rcpt("fail-first-2-a@example.com"), 250)
    expect_reply(s.data(b"x\r\n"), 250)
    s.mail("a@example.org")
    s.rcpt("data-tempfail-first-1-b@example.com")
    expect_reply(s.data(b"x\r\n"), 451, "4.3.0")
    s.mail("a@example.org")
    s.rcpt("data-tempfail-first-1-b@example.com")
    expect_reply(s.data(b"x\r\n"), 250)
    s.mail("a@example.org")
    s.rcpt("data-permfail-c@example.com")
    expect_reply(s.data(b"x\r\n"), 554, "5.6.0")
    s.mail("a@example.org")
    s.rcpt("drop-after-dot-d@example.com")
    try:
        r = s.data(b"dropped\r\n")
        raise AssertionError("drop-after-dot answered %r" % (r,))
    except smtplib.SMTPServerDisconnected:
        pass
    s.close()

    # control file: per address, default, refused greeting, re-read at once
    sink.control(rcpt={"ctl@example.com": "permfail"}, default="tempfail")
    with Raw(sink.port) as c:
        c.cmd("EHLO c.test")
        c.cmd("MAIL FROM:<a@example.org>")
        expect_reply(c.cmd("RCPT TO:<ctl@example.com>"), 550)
        expect_reply(c.cmd("RCPT TO:<any@example.com>"), 451)
        sink.control()
        expect_reply(c.cmd("RCPT TO:<any@example.com>"), 250)
        c.send("DATA\r\n")
        expect_reply(c.reply(), 354)
        c.send(".\r\n")
        expect_reply(c.reply(), 250)
    sink.control(greeting=421)
    with Raw(sink.port, greet=False) as c:
        eq(c.reply()[0], 421, "refused greeting")
    sink.control(default="drop-before-data-first-1")
    s = smtplib.SMTP("127.0.0.1", sink.port, timeout=10)
    s.ehlo("c.test")
    s.mail("a@example.org")
    s.rcpt("e@example.com")
    try:
        s.data(b"x\r\n")
        raise AssertionError("drop-before-data answered")
    except smtplib.SMTPServerDisconnected:
        pass
    s = smtplib.SMTP("127.0.0.1", sink.port, timeout=10)
    s.ehlo("c.test")
    s.mail("a@example.org")
    s.rcpt("e@example.com")
    expect_reply(s.data(b"second try\r\n"), 250)
    s.quit()

    recs = sink.records()
    got = [(r["to"], r["reply"][:3], r["accepted"]) for r in recs]
    eq(got, [(["fail-first-2-a@example.com"], "250", True),
             (["data-tempfail-first-1-b@example.com"], "451", False),
             (["data-tempfail-first-1-b@example.com"], "250", True),
             (["data-permfail-c@example.com"], "554", False),
             (["drop-after-dot-d@example.com"], "dro", True),
             (["any@example.com"], "250", True),
             (["e@example.com"], "250", True)], "records")
    eq(len(sink.rcpt_attempts("fail-first-2-a@example.com")), 3, "rcpt attempts counted")


@case(timeout=40, needs_daemon=False)
def test_sink_delay_and_swaks(t):
    sink = t.sink()
    r = run(["swaks", "--server", "127.0.0.1:%d" % sink.port, "--to", "delay-2-a@example.com",
             "--header", "X-Idempotency-Key: k1", "--timeout", "10"])
    eq(r.returncode, 0, "swaks exit status (output: %s)" % r.stdout[-500:])
    check("250 2.0.0 ok: sink stored" in r.stdout, "swaks saw no 250: %s" % r.stdout[-500:])
    rec = sink.wait_count(1)[0]
    check(b"X-Idempotency-Key: k1\r\n" in rec["data"], "header kept")
    dots = sink.events("dot")
    # swaks may exit before the sink has noted the close: wait for it
    close = wait_until(lambda: [e for e in sink.events("close") if e["conn"] == dots[0]["conn"]],
                       timeout=10, what="the sink's close event")
    check(close[0]["t"] - dots[0]["t"] >= 1.9, "delay-2 held the reply ~2s")
