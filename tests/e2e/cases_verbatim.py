"""Messages arrive upstream as they were submitted (SPEC section 4: idemrelay adds one
Received: header, strips the key header, and changes nothing else), even those that
libesmtp 1.1.0 would edit on its own: no Date: or From:, Return-Path: and
Original-Recipient:, repeated To:/Date:/Subject:, no body at all. The bridge's filter
cuts libesmtp's header block out (deliver/esmtp/deliver_filter.h); the sink offers CHUNKING,
which the filter hides, so libesmtp must use DATA.

Each transport: plain, STARTTLS, implicit TLS. One delivery thread, held up by a
first message whose final dot the sink answers late, so the others queue meanwhile
and go together, over one reused upstream connection."""

from cases_upstream_tls import make_certs, tls_sink, trust, upstream
from harness import case, check, check_relayed, eq, make_msg, submit_ok, wait_until

DATE = "Date: Mon, 01 Jan 2024 00:00:00 +0000"


def messages(tag):
    """messages - (name, bytes) pairs, each with its own key header"""
    key = "X-Idempotency-Key: verbatim-%s-%%s" % tag

    def msg(name, *lines, body=None):
        head = "".join(l + "\r\n" for l in lines if l is not None).replace("KEY", key % name)
        return name, (head + ("" if body is None else "\r\n" + body)).encode()

    return [
        msg("no-date-no-from", "To: <rcpt@example.com>", "Subject: no Date, From or Message-ID",
            "KEY", body="Nothing libesmtp would like here.\r\n"),
        msg("trace-headers", "Return-Path: <bounce@example.org>",
            "Original-Recipient: rfc822;orig@example.com", "From: <sender@example.org>",
            "To: <rcpt@example.com>", "Subject: trace headers", DATE, "KEY",
            "Message-ID: <trace@example.org>", body="Return-Path: in the body too\r\n"),
        msg("duplicates", "From: <sender@example.org>", "To: <one@example.com>",
            "To: <two@example.com>", "Cc: <three@example.com>", "Cc: <four@example.com>",
            DATE, "Date: Tue, 02 Jan 2024 00:00:00 +0000", "Subject: first subject",
            "Subject: second subject", "KEY", "Message-ID: <dup@example.org>",
            body="Two of everything.\r\n"),
        msg("header-only", "From: <sender@example.org>", "To: <rcpt@example.com>",
            "Subject: no empty line, no body", DATE, "KEY"),
        msg("empty-body", "From: <sender@example.org>", "To: <rcpt@example.com>",
            "Subject: empty body", DATE, "KEY", body=""),
        msg("folded-and-dots", "From: <sender@example.org>", "Subject: folded",
            "\t.and a dot", DATE, "KEY",
            body=".leading dot\r\n..two dots\r\n.\r\nX-Idemrelay-Cut: 1\r\n\r\n"),
    ]


def relay_verbatim(t, sink, conf, tag, chunking=True):
    """relay_verbatim - submit each message while the only delivery thread waits on
    a slow one; each arrives byte for byte, by DATA, all over one connection"""
    sink.control(chunking=chunking)
    conf["upstream"]["connections"] = 1
    d = t.daemon(sink, conf)
    submit_ok(d.port, "delay-2-first@example.com", make_msg(key="verbatim-%s-first" % tag))
    wait_until(lambda: [e for e in sink.events("rcpt") if e["addr"].startswith("delay-2")],
               15, "the slow message's RCPT at the sink")
    sent = {}
    for name, data in messages(tag):
        sent[name] = (data, submit_ok(d.port, "%s@example.com" % name, data))
    recs = sink.wait_count(1 + len(sent), timeout=30)
    got = {r["to"][0].split("@")[0]: r for r in recs if not r["to"][0].startswith("delay")}
    eq(sorted(got), sorted(sent), "messages at the sink")
    for name, (data, qid) in sent.items():
        try:
            check_relayed(got[name]["data"], data, qid)
        except AssertionError as e:
            raise AssertionError("%s: %s" % (name, e))
        eq(got[name]["via"], "DATA", "%s came by" % name)
        d.wait_log(qid, "status=sent")
    eq(len({r["conn"] for r in got.values()}), 1, "upstream connections for the batch")
    check(not d.log_lines("bridge hung up"), "the bridge refused libesmtp's content")
    return got


@case()
def test_verbatim_plain(t):
    sink = t.sink()
    relay_verbatim(t, sink, {"upstream": {}}, "plain")


@case()
def test_verbatim_starttls(t):
    certs = make_certs(t)
    sink = tls_sink(t, certs)
    trust(certs["ca"])
    got = relay_verbatim(t, sink, upstream(sink), "starttls")
    check(all(r["tls"] for r in got.values()), "a message came without TLS")


@case()
def test_verbatim_implicit(t):
    certs = make_certs(t)
    sink = tls_sink(t, certs, implicit=True)
    trust(certs["ca"])
    got = relay_verbatim(t, sink, upstream(sink, tls="implicit"), "implicit")
    check(all(r["tls"] for r in got.values()), "a message came without TLS")


@case()
def test_verbatim_chunking_after_blanks(t):
    """CHUNKING offered as "250-  CHUNKING": libESMTP reads a keyword after blanks
    (cb_ehlo), so the filter must hide it there too. It did not: libesmtp sent BDAT,
    the filter refused that content and hung up with replies owed, and libESMTP 1.1.0
    crashed the daemon (seen: SIGSEGV at address 0)."""
    relay_verbatim(t, t.sink(), {"upstream": {}}, "blanks", chunking="  CHUNKING")
