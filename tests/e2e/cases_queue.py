"""Queue controls a Postfix admin reaches for (issue 26 part 2): hold and release
(postsuper -h/-H), cat (postcat -q), drop ALL and by pattern (postsuper -d ALL), the
node holding a message's lease; each with the daemon running and stopped, where the
same actions (queue/queue_admin.c) run on the store itself."""

import time

from harness import PG_ONLY, case, check, eq, make_msg, submit, submit_ok, wait_until
from cases_ops import control_line, ctl, ctl_json, ops_daemon, queued_qids


# the sink's delay-N holds its reply to the dot: wait for it, never time out
PATIENT = {"upstream": {"timeout": "60s"}}


def states(d):
    """states - {QID: state} of the queue as idemrelayctl --json queue lists it"""
    return {m["qid"]: m["state"] for m in ctl_json(d, "queue")["queue"]}


@case()
def test_hold_release(t):
    """hold KEY: never delivered (flush, retry, a restart; on PostgreSQL no node takes
    it), its claims kept (a duplicate gets its QID), shown as held; release puts it
    back. hold and release also work with the daemon stopped, on the store itself."""
    sink = t.sink()
    d = ops_daemon(t, sink)
    msg_a = make_msg(key="q-hold-a")
    qa = submit_ok(d.port, "fail-first-1-ha@example.com", msg_a)
    qb = submit_ok(d.port, "fail-first-1-hb@example.com", make_msg(key="q-hold-b"))
    d.wait_log(qa, "status=deferred")
    d.wait_log(qb, "status=deferred")

    r = ctl(d, "hold", "q-hold-a")          # by KEY
    check("%s: on hold" % qa in r.stdout and "1 message on hold" in r.stdout,
          "hold output: %r" % r.stdout)
    d.wait_log(qa, "placed on hold by the operator (idemrelayctl hold)")
    eq(states(d), {qa: "held", qb: "deferred"}, "queue states")
    out = ctl(d, "queue").stdout
    check("held" in out and "on hold" in out, "queue text says held:\n" + out)
    s = ctl_json(d, "show", qa)["messages"][0]
    eq((s["state"], s["held"], s["queued"]), ("held", True, True), "show --json")
    check("%s: held: never delivered until released" % qa in ctl(d, "show", qa).stdout,
          "show text")
    eq(submit(d.port, "fail-first-1-ha@example.com", msg_a).qid, qa,
       "a duplicate of a held message is answered with its QID")
    r = ctl(d, "retry", qa, want=1)
    check("on hold: release it first" in r.stderr, "retry of a held message: %r" % r.stderr)
    r = ctl(d, "hold", qa, want=1)
    check("already on hold" in r.stderr, "hold twice: %r" % r.stderr)
    ctl(d, "flush")
    sink.wait_count(1, lambda r: r["to"] == ["fail-first-1-hb@example.com"], timeout=15)
    d.wait_log(qb, "status=sent")
    time.sleep(1.5)
    eq([r["to"] for r in sink.accepted()], [["fail-first-1-hb@example.com"]],
       "the flush delivered the other message only")

    # the daemon stopped: a new held message, and a release, on the store itself
    qc = submit_ok(d.port, "fail-first-1-hc@example.com", make_msg(key="q-hold-c"))
    d.wait_log(qc, "status=deferred")
    eq(d.stop(), 0, "daemon exit status")
    j = ctl_json(d, "hold", qc)
    eq((j["held"], j["offline"]), ([qc], True), "offline hold")
    j = ctl_json(d, "release", qa)
    eq((j["released"], j["offline"]), ([qa], True), "offline release")
    eq(states(d), {qa: "deferred", qc: "held"}, "states after the offline hold and release")
    d.start()
    ctl(d, "flush")
    sink.wait_count(2, timeout=15, what="the released message delivered")
    d.wait_log(qa, "status=sent")
    time.sleep(1.5)
    eq(states(d), {qc: "held"}, "a held message stays held through a restart and a flush")

    r = ctl(d, "release", "ALL")
    check("%s: released from hold" % qc in r.stdout, "release ALL: %r" % r.stdout)
    d.wait_log(qc, "released from hold by the operator (idemrelayctl release)")
    ctl(d, "flush")
    sink.wait_count(3, timeout=15, what="the message released by release ALL")
    d.wait_log(qc, "status=sent")
    eq(len(sink.accepted()), 3, "each message delivered once")
    # status=sent is logged when the reply comes, its write may follow (with
    # the session's next mark or at the batch's end, deliver_record.c)
    wait_until(lambda: qc not in states(d), 15, "the sent message gone from the queue")
    r = ctl(d, "release", qc, want=1)
    check("not queued" in r.stderr, "release of a sent message: %r" % r.stderr)


@case()
def test_cat(t):
    """cat QID: the envelope and the message as it will be sent (the Received: line
    added), like postcat -q; not for a message that left the queue"""
    sink = t.sink()
    d = ops_daemon(t, sink)
    qid = submit_ok(d.port, "tempfail-cat@example.com",
                    make_msg(key="q-cat-1", body="Line one.\r\nLine two.\r\n"))
    d.wait_log(qid, "status=deferred")
    out = ctl(d, "cat", qid).stdout
    lines = out.splitlines()
    eq((lines[0], lines[-1]), ("*** ENVELOPE RECORDS %s ***" % qid,
                               "*** MESSAGE FILE END %s ***" % qid), "cat frame")
    for want in ("sender: sender@example.org", "recipient: tempfail-cat@example.com",
                 "*** MESSAGE CONTENTS %s ***" % qid, "with ESMTP id %s" % qid,
                 "Subject: test", "Line one.", "Line two."):
        check(want in out, "cat lacks %r:\n%s" % (want, out))
    j = ctl_json(d, "cat", qid)
    eq((j["qid"], j["from"], [r["addr"] for r in j["recipients"]], j["held"]),
       (qid, "sender@example.org", ["tempfail-cat@example.com"], False), "cat --json")
    check(j["message"].startswith("Received: ") and j["message"].endswith("Line two.\r\n")
          and j["size"] == len(j["message"]), "cat --json message: %r" % j["message"])
    ctl(d, "drop", qid)
    r = ctl(d, "cat", qid, want=1)
    check("is not queued: it was dropped" in r.stderr, "cat of a dropped message: %r" % r.stderr)
    r = ctl(d, "cat", "0000000000VV", want=1)
    check("unknown QID 0000000000VV" in r.stderr, "cat of an unknown QID: %r" % r.stderr)


@case()
def test_keys_shaped_like_qids(t):
    """a KEY that looks like a QID but is none the daemon can write (13 characters of
    [0-9A-Z], or 12 with a W-Z) is a key to hold and drop, not an unknown QID"""
    sink = t.sink()
    d = ops_daemon(t, sink)
    qa = submit_ok(d.port, "tempfail-ka@example.com", make_msg(key="ORDER2026WXYZ"))
    qb = submit_ok(d.port, "tempfail-kb@example.com", make_msg(key="INVOICE2026Z"))
    d.wait_log(qa, "status=deferred")
    d.wait_log(qb, "status=deferred")
    r = ctl(d, "hold", "ORDER2026WXYZ")
    check("%s: on hold" % qa in r.stdout, "hold by a 13-character key: %r" % r.stdout)
    r = ctl(d, "drop", "INVOICE2026Z")
    check(qb in r.stdout, "drop by a 12-character key with a Z: %r" % r.stdout)
    eq(states(d), {qa: "held"}, "queue states")
    d.stop()
    r = ctl(d, "release", "ORDER2026WXYZ")  # on the store itself
    check(qa in r.stdout, "release by the key, daemon stopped: %r" % r.stdout)


@case()
def test_drop_all_and_patterns(t):
    """drop --from PATTERN / --to PATTERN (shell patterns, any case) and drop ALL, with
    drop's safety: a message being delivered right now is not dropped and is named"""
    sink = t.sink()
    d = ops_daemon(t, sink, PATIENT)
    sent = [("a@spam.example", "tempfail-1@example.com"),
            ("b@SPAM.example", "tempfail-2@example.com"),
            ("ok@good.example", "tempfail-x-3@example.com"),
            ("ok@good.example", "tempfail-4@example.com")]
    q = [submit_ok(d.port, rcpt, make_msg(key="q-drop-%d" % i), sender=frm)
         for i, (frm, rcpt) in enumerate(sent)]
    for qid in q:
        d.wait_log(qid, "status=deferred")

    r = ctl(d, "--from", "*@spam.example", "drop")
    check("%s: dropped from the queue" % q[0] in r.stdout and "2 messages dropped" in r.stdout,
          "drop --from: %r" % r.stdout)
    j = ctl_json(d, "--to", "TEMPFAIL-X-*", "drop")
    eq((j["dropped"], j["busy"]), ([q[2]], []), "drop --to")
    eq(ctl_json(d, "--from", "nobody@nowhere", "drop")["count"], 0, "a pattern matching none")
    eq(queued_qids(d), [q[3]], "the queue after the pattern drops")
    ctl(d, "--from", "x", "drop", q[3], want=2)
    ctl(d, "--from", "x", "queue", want=2)

    # a message being delivered right now stays, and drop ALL says so
    qd = submit_ok(d.port, "delay-8-d@example.com", make_msg(key="q-drop-busy"))
    wait_until(lambda: sink.rcpt_attempts("delay-8-d@example.com"), 15,
               "the delivery of %s under way" % qd)
    j = ctl_json(d, "drop", "ALL", want=1)
    eq((j["dropped"], j["busy"]), ([q[3]], [qd]), "drop ALL while one is being delivered")
    check("being delivered right now" in j["error"], "drop ALL error: %r" % j["error"])
    d.wait_log(qd, "status=sent", timeout=20)
    wait_until(lambda: queued_qids(d) == [], 10, "the queue empty after drop ALL")

    # the daemon stopped: drop ALL on the store itself
    qe = submit_ok(d.port, "tempfail-5@example.com", make_msg(key="q-drop-5"))
    d.wait_log(qe, "status=deferred")
    eq(d.stop(), 0, "daemon exit status")
    r = ctl(d, "drop", "ALL")
    check("%s: dropped from the queue" % qe in r.stdout and "1 message dropped" in r.stdout,
          "offline drop ALL: %r" % r.stdout)
    eq(queued_qids(d), [], "the queue after the offline drop ALL")
    eq(ctl_json(d, "drop", "ALL")["count"], 0, "drop ALL of an empty queue")
    eq([r["to"] for r in sink.accepted()], [["delay-8-d@example.com"]],
       "only the message being delivered reached the sink")


@case()
def test_drop_pattern_control_chars(t):
    """a control character in a pattern, a key or a user name is refused (exit 2) before
    any request is sent: an LF in --from once ended the request line there, and the
    daemon dropped by --from alone, its --to lost. The daemon refuses such a line too,
    whole (not the part before the LF), and a line ended by CR LF is still one line."""
    sink = t.sink()
    d = ops_daemon(t, sink)
    q = [submit_ok(d.port, "tempfail-%d@example.com" % i, make_msg(key="q-nl-%d" % i),
                   sender="a@spam.example") for i in range(2)]
    for qid in q:
        d.wait_log(qid, "status=deferred")
    for args in (["--from", "*@spam.example\nx", "--to", "tempfail-bob@*", "drop"],
                 ["--from", "*@spam.example\r", "drop"],
                 ["--to", "tempfail-bob@*\tx", "hold"],
                 ["drop", "q-nl-0\nx"],
                 ["-u", "alice\nx", "--drop", "forget", "q-nl-0"]):
        r = ctl(d, *args, want=2)
        check("has a control character" in r.stderr, "%r refused: %r" % (args, r.stderr))
    eq(sorted(queued_qids(d)), sorted(q), "nothing dropped by the refused commands")
    # a tab is no control character for a key: it goes as hashes, and a
    # Message-ID's blanks around <> are trimmed as a header's are
    r = ctl(d, "hold", "\t<no-such-id@example.com>\t")
    check("0 messages on hold" in r.stdout, "a key with tabs around it: %r" % r.stdout)

    for line in (b"drop from *@spam.example\nx to tempfail-bob@*\n",
                 b"drop from *@spam.example\rx to tempfail-bob@*\r\n",
                 b"drop from *@spam.example\x01 to tempfail-bob@*\n"):
        got = control_line(d, line)
        check('"error":"a control character in the request line' in got,
              "%r answered %r" % (line, got))
    eq(sorted(queued_qids(d)), sorted(q), "nothing dropped by the refused request lines")
    got = control_line(d, b"drop from *@spam.example to tempfail-1@*\r\n")
    check('"dropped":["%s"]' % q[1] in got, "a CR LF line is one request: %r" % got)

    # the daemon stopped: the same command on the store itself is refused as well
    eq(d.stop(), 0, "daemon exit status")
    ctl(d, "--from", "*@spam.example\nx", "--to", "tempfail-bob@*", "drop", want=2)
    eq(queued_qids(d), [q[0]], "nothing dropped offline")


@case(stores=PG_ONLY)
def test_queue_shows_lease_holder(t):
    """PostgreSQL: queue and show say which node holds a message's lease, and since
    when (active on NODE since TIME), not "queued ... now" """
    sink = t.sink()
    d = ops_daemon(t, sink, PATIENT)
    qid = submit_ok(d.port, "delay-6-l@example.com", make_msg(key="q-lease-1"))
    m = wait_until(lambda: next((x for x in ctl_json(d, "queue")["queue"]
                                 if x["qid"] == qid and x["node"]), None),
                   15, "the message under a node's lease")
    eq((m["state"], m["node"]), ("active", d.node), "queue --json")
    check(m["active_since"] is not None, "active_since: %r" % m)
    out = ctl(d, "queue").stdout
    check("on %s since %s" % (d.node, m["active_since"]) in out,
          "queue text names the node:\n" + out)
    out = ctl(d, "show", qid).stdout
    check("%s: active on %s since %s" % (qid, d.node, m["active_since"]) in out,
          "show text names the node:\n" + out)
    d.wait_log(qid, "status=sent", timeout=20)


@case()
def test_hold_while_delivered(t):
    """hold of a message being delivered right now: the attempt ends as it would, and
    the outcome it records keeps the hold (no attempt follows until the release)"""
    sink = t.sink()
    d = ops_daemon(t, sink, PATIENT)
    qid = submit_ok(d.port, ["delay-4-w1@example.com", "tempfail-w2@example.com"],
                    make_msg(key="q-hold-busy"))
    wait_until(lambda: sink.rcpt_attempts("delay-4-w1@example.com"), 15,
               "the delivery of %s under way" % qid)
    j = ctl_json(d, "hold", qid)
    eq(j["held"], [qid], "hold while being delivered")
    d.wait_log(qid, "to=<tempfail-w2@example.com>", "status=deferred", timeout=20)
    eq(states(d), {qid: "held"}, "held after the attempt's outcome was recorded")
    ctl(d, "flush")
    time.sleep(1.5)
    eq(len(sink.rcpt_attempts("tempfail-w2@example.com")), 1, "no attempt while held")
    ctl(d, "release", qid)
    ctl(d, "flush")
    wait_until(lambda: len(sink.rcpt_attempts("tempfail-w2@example.com")) == 2, 15,
               "an attempt after the release")


@case()
def test_hold_waiting_then_release(t):
    """hold of a message waiting its turn in the node's schedule (the one upstream
    connection busy), then release: it is delivered. On PostgreSQL the node gives up
    the lease it took at acceptance when the hold takes the message out of its
    schedule; a lease kept (and renewed) would hide it from every node's take, the
    release's included, for as long as the node runs."""
    sink = t.sink()
    d = ops_daemon(t, sink, {"upstream": {"timeout": "60s", "connections": 1}})
    qa = submit_ok(d.port, "delay-4-wa@example.com", make_msg(key="q-wait-a"))
    wait_until(lambda: "delaying reply" in sink.log(), 15,
               "the delivery of %s under way" % qa)
    qb = submit_ok(d.port, "wb@example.com", make_msg(key="q-wait-b"))
    eq(ctl_json(d, "hold", qb)["held"], [qb], "hold of the waiting message")
    eq(ctl_json(d, "release", qb)["released"], [qb], "its release")
    d.wait_log(qa, "status=sent", timeout=20)
    d.wait_log(qb, "status=sent", timeout=20)
    eq(len(sink.accepted(lambda r: r["to"] == ["wb@example.com"])), 1,
       "the released message delivered once")


@case()
def test_held_mail_does_not_age_out(t):
    """held mail is never given up while held (retry.give_up passes without a word
    from the queue); show tells the operator, and once released the first attempt
    that fails bounces it, as Postfix does with maximal_queue_lifetime"""
    sink = t.sink()
    d = ops_daemon(t, sink, {"retry": {"first": "1s", "max": "1s", "give_up": "3s"}})
    qid = submit_ok(d.port, "tempfail-age@example.com", make_msg(key="q-hold-age"))
    ctl(d, "hold", qid)
    wait_until(lambda: ctl_json(d, "show", qid)["messages"][0]["age"] > 4, 15,
               "the held message older than retry.give_up")
    eq(states(d), {qid: "held"}, "still queued and held past retry.give_up")
    check(not d.log_lines(qid, "status=bounced"), "a held message was given up")
    out = ctl(d, "show", qid).stdout
    check("older than retry.give_up (3s): once released, an attempt that fails bounces it"
          in out, "show warns of the release:\n" + out)
    ctl(d, "release", qid)
    d.wait_log(qid, "to=<tempfail-age@example.com>", "status=bounced")
    wait_until(lambda: qid not in queued_qids(d), 15, "the bounced message out of the queue")


@case(timeout=120, stores=PG_ONLY)
def test_actions_postgresql_away(t):
    """PostgreSQL stopped: hold, release, drop, retry and forget through the daemon, and
    (but retry, the daemon's alone) on the store itself with the daemon stopped, each
    exit 1 with an error that says the store cannot be reached (never "unknown QID":
    the message is there), print nothing on stdout (--json: ok false), and change
    nothing. Once PostgreSQL is back the same actions work, on the store itself and
    through the daemon."""
    pg = t.pg_cluster()
    sink = t.sink()
    names = ("hold", "release", "drop", "retry")
    sink.control(rcpt={"%s@example.com" % n: "tempfail" for n in names})
    d = ops_daemon(t, sink, {"store": {"url": t.pg_database(pg)}})
    q = {n: submit_ok(d.port, "%s@example.com" % n, make_msg(key="away-%s" % n)) for n in names}
    for qid in q.values():
        d.wait_log(qid, "status=deferred")
    ctl(d, "hold", q["release"])
    q["forget"] = submit_ok(d.port, "forget@example.com", make_msg(key="away-forget"))
    d.wait_log(q["forget"], "status=sent")
    before = states(d)
    acts = [("hold", q["hold"]), ("release", q["release"]), ("drop", q["drop"]),
            ("retry", q["retry"]), ("forget", "away-forget")]

    def refused(how, words):
        for act, arg in acts:
            if how == "offline" and act == "retry":
                continue
            r = ctl(d, act, arg, want=1)
            eq(r.stdout, "", "%s %s %s: stdout" % (how, act, arg))
            check(words in r.stderr and "unknown QID" not in r.stderr
                  and "unknown key" not in r.stderr,
                  "%s %s %s: want an error with %r, got %r" % (how, act, arg, words, r.stderr))
            j = ctl_json(d, act, arg, want=1)
            check(words in j["error"], "%s %s --json: %r" % (how, act, j))

    pg.stop()
    refused("through the daemon", "store unreachable")
    eq(d.stop(), 0, "daemon exit status")
    refused("offline", "store.url: ")
    pg.start()
    eq(states(d), before, "the queue after the refused actions")
    eq(ctl_json(d, "show", "away-forget")["messages"][0]["qid"], q["forget"],
       "the key whose forget was refused")

    check("%s: on hold" % q["hold"] in ctl(d, "hold", q["hold"]).stdout, "offline hold")
    check("%s: released" % q["release"] in ctl(d, "release", q["release"]).stdout,
          "offline release")
    check("%s: dropped" % q["drop"] in ctl(d, "drop", q["drop"]).stdout, "offline drop")
    check("1 claim deleted" in ctl(d, "forget", "away-forget").stdout, "offline forget")
    eq(states(d), {q["hold"]: "held", q["release"]: "deferred", q["retry"]: "deferred"},
       "the queue after the offline actions")
    d.start()
    sink.control()
    r = ctl(d, "retry", q["retry"])
    check("%s: will be attempted now" % q["retry"] in r.stdout, "retry: %r" % r.stdout)
    d.wait_log(q["retry"], "status=sent")
    eq(ctl_json(d, "release", q["hold"])["released"], [q["hold"]], "release")
    eq(ctl_json(d, "hold", q["release"])["held"], [q["release"]], "hold")
    eq(ctl_json(d, "drop", q["release"])["dropped"], [q["release"]], "drop")
    again = submit_ok(d.port, "forget@example.com", make_msg(key="away-forget"))
    check(again != q["forget"], "the key forgotten offline answered with its old QID")
    d.wait_log(again, "status=sent")
    eq(ctl_json(d, "forget", "away-forget")["qids"], [again], "forget")
