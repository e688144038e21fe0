"""An upstream that resets the connection (RST, SO_LINGER 0) right after one of
its reply lines, whatever is still owed (issue 25, item 1).

With PIPELINING, libesmtp writes every RCPT and the DATA of a message in one
go; a reset after the reply to MAIL or to one RCPT, with two or more replies
still owed, drove libESMTP 1.1.0 to call the handler of its state -1 (SIGSEGV,
12 of 42 scripted scenarios). The bridge now answers for a server that is gone
(deliver_bridge.c): the daemon lives, and every message is deferred and then
delivered exactly once per recipient when the upstream behaves again.

Each message names its own reset in its sender ("reset-reply-K-first-1-..."):
the sink resets after the K-th reply of its first transaction (1: MAIL, 2..n+1:
the RCPTs, n+2: the 354, n+3: the final dot's reply), so one case loops over
every position for 1 to 3 recipients, RCPT answered 250 or 451, at once; the
greeting and EHLO positions come from the control file ("reset_after_reply").
"""

import time

from harness import case, check, eq, make_msg, received_qids, submit_ok, wait_until

RETRY = {"first": "1s", "max": "1s", "give_up": "1h"}


def scenarios(tag, counts=(1, 2, 3)):
    """scenarios - (sender, recipients) for every reset position, with each
    count of recipients, the first RCPT answered 250 or (once) 451"""
    out = []
    for n in counts:
        for k in range(1, n + 4):
            for mode in (250, 451):
                name = "%s-n%dk%dm%d" % (tag, n, k, mode)
                sender = "reset-reply-%d-first-1-%s@example.org" % (k, name)
                rcpts = ["r%d-%s@example.com" % (i, name) for i in range(n)]
                if mode == 451:
                    rcpts[0] = "tempfail-first-1-" + rcpts[0]
                out.append((name, sender, rcpts))
    return out


def delivered_once(t, sink, d, sent, what, settle=2.0):
    """delivered_once - every recipient of every message (name -> (qid, rcpts))
    at the sink exactly once, in a copy naming its QID; the daemon alive"""
    def copies():
        got = {}
        for r in sink.accepted():
            subj = [l for l in r["data"].split(b"\r\n") if l.startswith(b"Subject: ")]
            name = subj[0][9:].decode() if subj else "?"
            for a in r["to"]:
                got.setdefault((name, a), []).append(r)
        return got

    want = {(name, a) for name, (_, rcpts) in sent.items() for a in rcpts}
    mine = {name for name in sent}
    wait_until(lambda: want <= set(copies()) or not d.running(), 90,
               "%s: every recipient delivered" % what)
    check(d.running(), "%s: idemrelay died (status %r)" % (what, d.proc.poll()))
    time.sleep(settle)          # a duplicate would come within a retry or two
    got = copies()
    for name, a in sorted(want):
        eq(len(got[(name, a)]), 1, "%s: copies of %s for %s" % (what, name, a))
        eq(received_qids(got[(name, a)][0]["data"]), [sent[name][0]],
           "%s: QID in the copy of %s" % (what, name))
    extra = sorted(k for k in set(got) - want if k[0] in mine)
    eq(extra, [], "%s: copies nobody sent" % what)
    check(d.running(), "%s: idemrelay died (status %r)" % (what, d.proc.poll()))
    eq(d.log_lines("status=bounced"), [], "%s: bounces" % what)


def reachable(name):
    """reachable - does the first transaction of this scenario get to its reset?
    Not when its only recipient is answered 451: then DATA gets 554 from the
    sink, and there is no 354 or dot to reset after (n1, k4, 451)."""
    return not name.endswith("-n1k4m451")


def reset_positions(t, pipelining, counts):
    """reset_positions - every scenario, through a daemon with one upstream
    connection and one with three, at once (one sink)"""
    sink = t.sink(pipelining=pipelining)
    daemons = [t.daemon(sink, {"upstream": {"connections": c}, "retry": RETRY})
               for c in (1, 3)]
    sent = {}
    for d, c in zip(daemons, (1, 3)):
        tag = "p%dc%d" % (int(pipelining), c)
        sent[d] = {}
        for name, sender, rcpts in scenarios(tag, counts):
            qid = submit_ok(d.port, rcpts, make_msg(key=name, subject=name), sender=sender)
            sent[d][name] = (qid, rcpts)
    for d in daemons:
        delivered_once(t, sink, d, sent[d], "connections %s" % d.conf["upstream"]["connections"])
    # every position was reached: the sink reset each message's first transaction
    want = sum(1 for names in sent.values() for name in names if reachable(name))
    resets = sink.events("reset")
    check(len(resets) >= want, "resets: %d, want %d or more" % (len(resets), want))


@case()
def test_reset_every_reply_pipelining(t):
    """PIPELINING: a reset after each reply of a transaction, 1-3 recipients,
    RCPT 250 or 451, over one upstream connection and over three: no crash,
    every recipient delivered once."""
    reset_positions(t, True, (1, 2, 3))


@case()
def test_reset_every_reply_no_pipelining(t):
    """The same without PIPELINING: one command at a time, so three recipients
    go through every state fewer would (after MAIL, each RCPT, 354, the dot)."""
    reset_positions(t, False, (3,))


@case()
def test_reset_after_greeting_and_ehlo(t):
    """A reset right after the greeting, then right after the EHLO reply, with
    and without PIPELINING: nothing of the message went out; each is sent once."""
    sink = t.sink()
    d = t.daemon(sink, {"upstream": {"connections": 1}, "retry": RETRY})
    sent = {}
    for pipelining in (True, False):
        for n in (1, 2):
            sink.control(pipelining=pipelining, reset_after_reply=n, resets=2)
            name = "conn-p%dn%d" % (int(pipelining), n)
            rcpts = ["r%d-%s@example.com" % (i, name) for i in range(3)]
            qid = submit_ok(d.port, rcpts, make_msg(key=name, subject=name))
            sent[name] = (qid, rcpts)
            wait_until(lambda: len(sink.events("reset")) >= len(sent) * 2, 30,
                       "two resets for %s" % name)
            wait_until(lambda: any(r["to"] == rcpts for r in sink.accepted()), 30,
                       "%s delivered" % name)
    delivered_once(t, sink, d, sent, "greeting and EHLO")
