"""Text lines over 998 octets and NUL octets (issue 26 part 3): limits.long_lines and
limits.nul. A long line is folded in what is relayed, as Postfix's SMTP client does
(smtp_line_length_limit), or refused; a NUL is refused, or relayed. The key's
fingerprint covers the message as received, so a retry is the same message."""

from harness import (Raw, case, check, check_relayed, eq, expect_reply, make_msg, qid_of,
                     run, submit, submit_ok, BIN)

LIMIT = 998


def long_msg(key):
    """long_msg - a header line and body lines over 998 octets, one exactly 998, one 999,
    one that starts with a dot (stuffed on the wire, not counted), and short ones"""
    body = (b"short\r\n" + b"A" * 5000 + b"\r\n" + b"." + b"B" * 2999 + b"\r\n"
            + b"C" * 998 + b"\r\n" + b"D" * 999 + b"\r\n" + b"end\r\n")
    return make_msg(key=key, extra=["X-Long: " + "h" * 1492], body=body)


def unfold(data):
    """unfold - undo the folding: every CRLF SPACE idemrelay inserted, none was sent"""
    return data.replace(b"\r\n ", b"")


def check_folded(rec_data, sent, qid):
    """check_folded - no line over 998 octets, continuation lines start with a space,
    and unfolded it is what was sent (plus our Received, minus the key header)"""
    lines = rec_data.split(b"\r\n")
    check(all(len(l) <= LIMIT for l in lines),
          "lines relayed over %d octets: %r" % (LIMIT, [len(l) for l in lines if len(l) > LIMIT]))
    check(b"C" * 998 + b"\r\nD" in rec_data, "a 998-octet line is left whole")
    check(b"D" * 998 + b"\r\n D\r\n" in rec_data, "a 999-octet line: 998, then ' D'")
    check(b"A" * 998 + b"\r\n " + b"A" * 997 + b"\r\n " in rec_data,
          "continuations of 997 octets after a space: %r" % rec_data[:2200])
    check_relayed(unfold(rec_data), sent, qid)


def bdat(port, msg, cut, sender="sender@example.org", rcpt="a@example.com"):
    """bdat - one message in two BDAT chunks; the reply to LAST"""
    with Raw(port) as c:
        expect_reply(c.cmd("EHLO client.test"), 250)
        expect_reply(c.cmd("MAIL FROM:<%s>" % sender), 250)
        expect_reply(c.cmd("RCPT TO:<%s>" % rcpt), 250)
        c.send(b"BDAT %d\r\n" % cut + msg[:cut])
        expect_reply(c.reply(), 250, what="BDAT chunk")
        c.send(b"BDAT %d LAST\r\n" % (len(msg) - cut) + msg[cut:])
        reply = c.reply()
        expect_reply(c.cmd("QUIT"), 221)
    return reply


@case()
def test_long_lines_folded(t):
    """limits.long_lines = "fold" (the default): the upstream receives every line
    over 998 octets broken with CRLF SPACE, header and body, by DATA and by BDAT (cut
    inside a long line); the log counts them; a retry of the message (by DATA or BDAT)
    is answered with the same QID, the fingerprint being the message's as received."""
    sink = t.sink()
    d = t.daemon(sink)
    msg = long_msg("long-1")
    q = submit_ok(d.port, "a@example.com", msg)
    rec = sink.wait_count(1)[0]
    check_folded(rec["data"], msg, q)
    check(d.wait_log(q, "long_lines=4 (folded)", "status=queued"), "counted in the log")
    eq(submit_ok(d.port, "a@example.com", msg), q, "the retry's QID (DATA)")
    eq(qid_of(expect_reply(bdat(d.port, msg, msg.index(b"AAAA") + 700), 250, "2.0.0")), q,
       "the retry's QID (BDAT)")
    other = long_msg("long-2")
    q2 = qid_of(expect_reply(bdat(d.port, other, other.index(b"AAAA") + 700), 250, "2.0.0",
                             "BDAT LAST"))
    recs = sink.wait_count(2)
    check_folded([r for r in recs if q2.encode() in r["data"]][0]["data"], other, q2)
    eq(len(sink.accepted()), 2, "messages upstream")


@case()
def test_long_lines_pass_and_reject(t):
    """limits.long_lines = "pass" relays a long line unchanged (SPEC 6's old rule, for
    DKIM-signed mail); "reject" refuses the message at its end, DATA or BDAT, with
    550 5.6.0 and a Postfix reject line, and takes a 998-octet line; -t names a bad
    value."""
    sink = t.sink()
    p = t.daemon(sink, {"limits": {"long_lines": "pass"}})
    msg = make_msg(key="long-text", body=b"A" * 5000 + b"\r\n." + b"B" * 3000 + b"\r\nend\r\n")
    q = submit_ok(p.port, "a@example.com", msg)
    check_relayed(sink.wait_count(1)[0]["data"], msg, q)
    p.wait_log(q, "long_lines=2 (as received)")
    r = t.daemon(sink, {"limits": {"long_lines": "reject"}})
    got = submit(r.port, "b@example.com", long_msg("long-3"))
    expect_reply(got.data, 550, "5.6.0", "DATA with long lines")
    check(b"longer than 998 octets" in got.data[1], "the reply says why: %r" % (got.data,))
    reply = bdat(r.port, long_msg("long-4"), 100)
    expect_reply(reply, 550, "5.6.0", "BDAT with long lines")
    r.wait_log("NOQUEUE: reject: END-OF-MESSAGE from unknown[127.0.0.1]: 550 5.6.0 Message "
               "contains a line longer than 998 octets; from=<sender@example.org> "
               "to=<b@example.com> proto=ESMTP helo=<client.test>")
    ok = make_msg(key="long-5", body=b"C" * 998 + b"\r\n")
    q5 = submit_ok(r.port, "c@example.com", ok)
    recs = sink.wait_count(2)
    check_relayed([x for x in recs if q5.encode() in x["data"]][0]["data"], ok, q5)
    eq(len(sink.accepted()), 2, "messages upstream")
    r.stop()
    bad = r.conf_path + ".bad"
    with open(r.conf_path) as f, open(bad, "w") as g:
        g.write(f.read().replace('long_lines = "reject"', 'long_lines = "wrap"'))
    res = run([BIN, "-t", "-c", bad])
    eq(res.returncode, 1, "-t on long_lines = \"wrap\"")
    check("long_lines" in res.stdout + res.stderr and "fold" in res.stdout + res.stderr,
          "-t names the setting and its values: %r" % (res.stdout + res.stderr))


@case()
def test_nul_refused_or_passed(t):
    """limits.nul = "reject" (the default) refuses a message with a NUL octet at its
    end, DATA or BDAT, with 550 5.6.0 (the smuggling vector CRLF NUL . CRLF
    included); "pass" relays it unchanged and the log says nul=yes."""
    sink = t.sink()
    d = t.daemon(sink)
    nul = make_msg(key="nul-1", body=b"before\r\n\x00.\r\nafter\x00\r\n")
    got = submit(d.port, "a@example.com", nul)
    expect_reply(got.data, 550, "5.6.0", "DATA with a NUL")
    check(b"NUL" in got.data[1], "the reply says why: %r" % (got.data,))
    expect_reply(bdat(d.port, nul, 20), 550, "5.6.0", "BDAT with a NUL")
    d.wait_log("NOQUEUE: reject: END-OF-MESSAGE from unknown[127.0.0.1]: 550 5.6.0 Message "
               "contains a NUL octet; from=<sender@example.org> to=<a@example.com>")
    p = t.daemon(sink, {"limits": {"nul": "pass"}})
    q = submit_ok(p.port, "a@example.com", nul)
    check_relayed(sink.wait_count(1)[0]["data"], nul, q)
    p.wait_log(q, "nul=yes", "status=queued")
    eq(len(sink.accepted()), 1, "messages upstream")
