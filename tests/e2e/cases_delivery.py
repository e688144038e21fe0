"""Delivery upstream (SPEC section 5): retries, bounces, ambiguity, claim expiry."""

import re
import time

from harness import (MAIL_DATE, case, check, check_relayed, eq, make_msg, received_qids,
                     submit_ok, wait_until)


def log_order(d, qid, first, then):
    """log_order - a log line for qid with `first` comes before one with `then`"""
    lines = [l for l in d.log().splitlines() if qid in l]
    a = [i for i, l in enumerate(lines) if first in l]
    b = [i for i, l in enumerate(lines) if then in l]
    check(a and b and a[0] < b[-1], "want %s then %s in the log for %s, got:\n  %s"
          % (first, then, qid, "\n  ".join(lines)))


def exactly(sink, pred, n, wait, what):
    """exactly - after `wait` seconds, exactly n accepted records match pred"""
    time.sleep(wait)
    got = sink.accepted(pred)
    eq(len(got), n, "%s: copies at the sink" % what)
    return got


@case()
def test_retry_after_rcpt_4xx(t):
    sink = t.sink()
    d = t.daemon(sink)
    rcpt = "fail-first-1-a@example.com"
    msg = make_msg(key="retry-1")
    qid = submit_ok(d.port, rcpt, msg)
    rec = sink.wait_count(1, timeout=20)[0]
    check_relayed(rec["data"], msg, qid)
    eq(len(sink.rcpt_attempts(rcpt)), 2, "RCPT attempts upstream")
    d.wait_log(qid, "status=sent")
    log_order(d, qid, "status=deferred", "status=sent")
    exactly(sink, None, 1, 2.5, "retried message")


@case()
def test_retry_after_data_4xx(t):
    sink = t.sink()
    d = t.daemon(sink)
    rcpt = "data-tempfail-first-1-a@example.com"
    qid = submit_ok(d.port, rcpt, make_msg(key="retry-2"))
    sink.wait_count(1, timeout=20)
    d.wait_log(qid, "status=sent")
    log_order(d, qid, "status=deferred", "status=sent")
    eq(len(sink.events("dot")), 2, "final dots seen upstream (451, then 250)")
    exactly(sink, None, 1, 2.5, "message deferred at data")


@case()
def test_drop_before_data_retried(t):
    """A connection lost before the final dot is a plain deferral, never ambiguous."""
    sink = t.sink()
    d = t.daemon(sink)
    rcpt = "drop-before-data-first-1-a@example.com"
    qid = submit_ok(d.port, rcpt, make_msg(key="retry-3"))
    rec = sink.wait_count(1, timeout=20)[0]
    eq(received_qids(rec["data"]), [qid], "QID relayed")
    d.wait_log(qid, "status=sent")
    log_order(d, qid, "status=deferred", "status=sent")
    exactly(sink, None, 1, 2.5, "message dropped before DATA")


@case()
def test_upstream_down_then_up(t):
    """Refused greeting (421), then the upstream returns: delivered once."""
    sink = t.sink(greeting=421)
    d = t.daemon(sink)
    qid = submit_ok(d.port, "a@example.com", make_msg(key="down-1"))
    d.wait_log(qid, "status=deferred", timeout=10)
    check(not sink.accepted(), "delivered while the upstream refused")
    sink.control()
    sink.wait_count(1, timeout=15)
    d.wait_log(qid, "status=sent")
    exactly(sink, None, 1, 2.5, "after the outage")


def is_dsn(rec, sender):
    data = rec["data"].lower()
    return (rec["mail_from"] == "" and rec["to"] == [sender]
            and b"multipart/report" in data and b"delivery-status" in data)


@case()
def test_bounce_on_rcpt_5xx(t):
    sink = t.sink()
    d = t.daemon(sink)
    sender = "bounce-to@example.org"
    ok, bad = "ok@example.com", "permfail-a@example.com"
    qid = submit_ok(d.port, [ok, bad], make_msg(key="bounce-1"), sender=sender)
    sink.wait_count(1, lambda r: ok in r["to"])
    dsn = sink.wait_count(1, lambda r: is_dsn(r, sender), timeout=20,
                          what="a DSN (multipart/report) to %s" % sender)
    check(bad.encode() in dsn[0]["data"], "the DSN does not name %s" % bad)
    check(b"Remote-MTA: dns; 127.0.0.1" in dsn[0]["data"], "the DSN names no Remote-MTA")
    for field in (b"Date: ", b"Arrival-Date: "):
        check(re.search(b"\r\n" + field + MAIL_DATE + b"\r\n", dsn[0]["data"]),
              "the DSN's %s is not the RFC 5322 form" % field.decode().rstrip())
    d.wait_log(qid, "status=bounced")
    # no retry of the permanent failure: one RCPT attempt, after a few retry periods
    time.sleep(3)
    eq(len(sink.rcpt_attempts(bad)), 1, "RCPT attempts for %s" % bad)
    eq(len(sink.accepted(lambda r: is_dsn(r, sender))), 1, "DSNs")
    eq(len(sink.accepted(lambda r: ok in r["to"])), 1, "copies to %s" % ok)


@case()
def test_bounce_story_keeps_key_ttl(t):
    """a bounce's own story is kept for store.key_ttl, like every other, not a fixed day"""
    import calendar
    import json
    from cases_ops import ctl
    sink = t.sink()
    d = t.daemon(sink, {"store": {"key_ttl": "90s"}, "control": t.tmp + "/ctl.sock"})
    sender = "bounce-to@example.org"
    qid = submit_ok(d.port, "permfail-ttl@example.com", make_msg(key="bounce-ttl"), sender=sender)
    sink.wait_count(1, lambda r: is_dsn(r, sender), timeout=20, what="a DSN to %s" % sender)
    line = d.wait_log("sender non-delivery notification: %s" % qid)[0]
    dsn_qid = re.search(r"(\w+): sender non-delivery notification", line).group(1)
    d.wait_log(dsn_qid, "status=sent")

    def ttl(q):
        s = json.loads(ctl(d, "--json", "show", q).stdout)["messages"][0]
        when = [calendar.timegm(time.strptime(s[k], "%Y-%m-%dT%H:%M:%SZ"))
                for k in ("finished", "story_expires")]
        return when[1] - when[0]
    check(abs(ttl(qid) - 90) <= 1, "the bounced message's story kept %d s, want 90" % ttl(qid))
    check(abs(ttl(dsn_qid) - 90) <= 1, "the bounce's story kept %d s, want 90" % ttl(dsn_qid))


@case()
def test_bounce_on_data_5xx(t):
    sink = t.sink()
    d = t.daemon(sink)
    sender = "bounce-to@example.org"
    bad = "data-permfail-a@example.com"
    qid = submit_ok(d.port, bad, make_msg(key="bounce-2"), sender=sender)
    dsn = sink.wait_count(1, lambda r: is_dsn(r, sender), timeout=20,
                          what="a DSN (multipart/report) to %s" % sender)
    # settled while its session runs (its dot answered): Remote-MTA known by then
    check(b"Remote-MTA: dns; 127.0.0.1" in dsn[0]["data"], "the DSN names no Remote-MTA")
    d.wait_log(qid, "status=bounced")
    time.sleep(3)
    eq(len(sink.events("dot")), 2, "final dots upstream (the 554, then the DSN)")


@case()
def test_bounce_null_sender_no_dsn(t):
    sink = t.sink()
    d = t.daemon(sink)
    qid = submit_ok(d.port, "permfail-b@example.com", make_msg(key="bounce-3"), sender="")
    d.wait_log(qid, "status=bounced", timeout=20)
    time.sleep(2.5)
    eq(sink.accepted(), [], "messages upstream (no DSN for the null sender)")
    eq(len(sink.rcpt_attempts("permfail-b@example.com")), 1, "RCPT attempts")


@case()
def test_ambiguous_drop_not_resent(t):
    """The upstream reads the final dot and hangs up: assume delivered, never resend."""
    sink = t.sink()
    d = t.daemon(sink, {"upstream": {"timeout": "2s"}})
    rcpt = "drop-after-dot-a@example.com"
    msg = make_msg(key="amb-1")
    qid = submit_ok(d.port, rcpt, msg)
    rec = sink.wait_count(1)[0]
    check_relayed(rec["data"], msg, qid)
    # a few retry periods (1s, 2s, 2s): still exactly one copy
    d.wait_log(qid, "unconfirmed")
    exactly(sink, None, 1, 6, "ambiguous delivery")
    eq(len(sink.rcpt_attempts(rcpt)), 1, "RCPT attempts")


@case()
def test_ambiguous_timeout_not_resent(t):
    """No reply to the final dot within upstream.timeout: ambiguous too."""
    sink = t.sink()
    d = t.daemon(sink, {"upstream": {"timeout": "2s"}})
    rcpt = "delay-6-a@example.com"
    qid = submit_ok(d.port, rcpt, make_msg(key="amb-2"))
    rec = sink.wait_count(1)[0]
    eq(received_qids(rec["data"]), [qid], "QID relayed")
    d.wait_log(qid, "unconfirmed")
    exactly(sink, None, 1, 6, "delivery that timed out after the dot")
    eq(len(sink.rcpt_attempts(rcpt)), 1, "RCPT attempts")
    check(d.running(), "daemon died")


@case()
def test_ambiguous_retry_resends(t):
    sink = t.sink()
    d = t.daemon(sink, {"upstream": {"timeout": "2s", "ambiguous": "retry"}})
    rcpt = "drop-after-dot-first-1-a@example.com"
    msg = make_msg(key="amb-3")
    qid = submit_ok(d.port, rcpt, msg)
    recs = sink.wait_count(2, timeout=20, what="the message resent after a drop")
    eq([r["reply"][:3] for r in recs], ["dro", "250"], "upstream replies")
    for r in recs:
        eq(received_qids(r["data"]), [qid], "QID in the resent copy")
    d.wait_log(qid, "status=sent")
    exactly(sink, None, 2, 2.5, "ambiguous=retry")


@case()
def test_key_ttl_expiry(t):
    sink = t.sink()
    d = t.daemon(sink, {"store": {"key_ttl": "2s"}})
    msg = make_msg(key="ttl-1")
    q1 = submit_ok(d.port, "a@example.com", msg)
    sink.wait_count(1)
    eq(submit_ok(d.port, "a@example.com", msg), q1, "QID within the TTL")
    time.sleep(3)
    q2 = submit_ok(d.port, "a@example.com", msg)
    check(q2 != q1, "after key_ttl the key still answered with %s" % q1)
    recs = sink.wait_count(2)
    eq(sorted(q for r in recs for q in received_qids(r["data"])), sorted([q1, q2]), "QIDs relayed")


@case()
def test_no_expiry_while_queued(t):
    sink = t.sink(default="tempfail")
    d = t.daemon(sink, {"store": {"key_ttl": "2s"}})
    msg = make_msg(key="ttl-2")
    q1 = submit_ok(d.port, "a@example.com", msg)
    d.wait_log(q1, "status=deferred")
    time.sleep(3.5)         # past key_ttl, still queued
    eq(submit_ok(d.port, "a@example.com", msg), q1, "QID of a queued message past its TTL")
    check(not sink.accepted(), "delivered while the upstream deferred")
    sink.control()
    rec = sink.wait_count(1, timeout=15)[0]
    eq(received_qids(rec["data"]), [q1], "QID relayed")
    exactly(sink, None, 1, 2.5, "queued past TTL")


@case()
def test_dsn_params_passed_on(t):
    sink = t.sink()
    d = t.daemon(sink)
    body = "Gr\u00fc\u00dfe, caf\u00e9\r\n".encode("utf-8")
    msg = make_msg(key="dsn-1", body=body, extra=["Content-Type: text/plain; charset=utf-8",
                                                  "Content-Transfer-Encoding: 8bit"])
    qid = submit_ok(d.port, "a@example.com", msg,
                    mail_opts=["BODY=8BITMIME", "ENVID=env-7", "RET=HDRS"],
                    rcpt_opts=["NOTIFY=SUCCESS,FAILURE", "ORCPT=rfc822;orig@example.com"])
    rec = sink.wait_count(1)[0]
    check_relayed(rec["data"], msg, qid)
    params = {p.split("=", 1)[0].upper(): p.split("=", 1)[1] for p in rec["mail_params"] if "=" in p}
    eq(params.get("BODY", "").upper(), "8BITMIME", "BODY upstream")
    eq(params.get("ENVID"), "env-7", "ENVID upstream")
    eq(params.get("RET", "").upper(), "HDRS", "RET upstream")
    rp = {p.split("=", 1)[0].upper(): p.split("=", 1)[1] for p in rec["rcpts"][0]["params"] if "=" in p}
    eq(set(rp.get("NOTIFY", "").upper().split(",")), {"SUCCESS", "FAILURE"}, "NOTIFY upstream")
    check(re.fullmatch(r"(?i)rfc822;orig@example\.com", rp.get("ORCPT", "")),
          "ORCPT upstream: %r" % rp.get("ORCPT"))


@case()
def test_dsn_params_past_libesmtp(t):
    """an ENVID and an ORCPT whose xtext is longer than the 255 octets libESMTP
    1.1.0 encodes them into (its own "+XX" for each "+": 87 of them, 261 octets;
    an ORCPT address of 262 octets) are not passed on, where they went out as
    "ENVID=(null)" and "ORCPT=rfc822;(null)"; the other parameters still go"""
    sink = t.sink()
    d = t.daemon(sink)
    msg = make_msg(key="dsn-long")
    qid = submit_ok(d.port, "a@example.com", msg,
                    mail_opts=["ENVID=" + "+2B" * 87, "RET=HDRS"],
                    rcpt_opts=["NOTIFY=FAILURE", "ORCPT=rfc822;" + "o" * 250 + "@example.com"])
    rec = sink.wait_count(1)[0]
    check_relayed(rec["data"], msg, qid)
    params = [p.upper() for p in rec["mail_params"]]
    check(not any(p.startswith("ENVID=") for p in params), "ENVID upstream: %r" % params)
    check("RET=HDRS" in params, "RET upstream: %r" % params)
    eq([p.upper() for p in rec["rcpts"][0]["params"]], ["NOTIFY=FAILURE"], "RCPT parameters")


@case()
def test_8bitmime_upstream_lacks_it(t):
    """upstream without 8BITMIME: an 8-bit message submitted with BODY=8BITMIME goes
    unchanged without BODY= (Postfix with MIME conversion disabled), on the first
    connection, its other parameters kept"""
    sink = t.sink(**{"8bitmime": False})
    d = t.daemon(sink)
    body = "Gr\u00fc\u00dfe, caf\u00e9\r\n".encode("utf-8")
    msg = make_msg(key="8bit-lack", body=body, extra=["Content-Transfer-Encoding: 8bit"])
    qid = submit_ok(d.port, "a@example.com", msg, mail_opts=["BODY=8BITMIME", "ENVID=env-8"])
    rec = sink.wait_count(1)[0]
    check_relayed(rec["data"], msg, qid)
    eq([p for p in rec["mail_params"] if p.upper().startswith("BODY=")], [], "BODY upstream")
    check("ENVID=env-8" in rec["mail_params"], "ENVID upstream: %r" % rec["mail_params"])
    eq(len(sink.events("connect")), 1, "connections to the sink")


@case()
def test_orcpt_xtext_upstream_and_in_dsn(t):
    """An xtext ORCPT is decoded once (smtp_orcpt_split) for both of delivery's uses:
    the upstream gets it encoded again by libesmtp, the bounce's Original-Recipient
    shows it decoded; the ENVID likewise in Original-Envelope-Id."""
    sink = t.sink()
    d = t.daemon(sink)
    sender = "bounce-to@example.org"
    ok, bad = "ok@example.com", "permfail-x@example.com"
    submit_ok(d.port, [ok, bad], make_msg(key="orcpt-xtext"), sender=sender,
              mail_opts=["ENVID=env+2B7"], rcpt_opts=["ORCPT=rfc822;o+2Bk+3Dx@example.com"])
    rec = sink.wait_count(1, lambda r: ok in r["to"])[0]
    for r in rec["rcpts"]:
        rp = dict(p.split("=", 1) for p in r["params"] if "=" in p)
        eq(rp.get("ORCPT"), "rfc822;o+2Bk+3Dx@example.com", "ORCPT upstream for %s" % r["addr"])
    dsn = sink.wait_count(1, lambda r: is_dsn(r, sender), timeout=20,
                          what="a DSN to %s" % sender)[0]["data"]
    check(b"Original-Recipient: rfc822; o+k=x@example.com\r\n" in dsn,
          "the DSN's Original-Recipient is not the decoded ORCPT:\n%s" % dsn.decode(errors="replace"))
    check(b"Original-Envelope-Id: env+7\r\n" in dsn, "the DSN's Original-Envelope-Id")


@case()
def test_many_messages_one_pass(t):
    """A small batch, several recipients each: every one arrives exactly once."""
    sink = t.sink()
    d = t.daemon(sink)
    qids = {}
    for i in range(30):
        qids[i] = submit_ok(d.port, ["m%d-a@example.com" % i, "m%d-b@example.com" % i],
                            make_msg(key="batch-%d" % i, subject="batch %d" % i))
    eq(len(set(qids.values())), 30, "distinct QIDs")

    def all_there():
        got = {}
        for r in sink.accepted():
            for a in r["to"]:
                got[a] = got.get(a, 0) + 1
        return got if len(got) == 60 else None
    wait_until(all_there, 20, "60 recipients delivered")
    time.sleep(1.5)
    got = all_there()
    check(all(v == 1 for v in got.values()), "duplicates: %r" % {k: v for k, v in got.items() if v != 1})
