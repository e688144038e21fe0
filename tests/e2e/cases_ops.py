"""Operations (issue 5): idemrelayctl against a running daemon, and /metrics."""

import fcntl
import json
import os
import re
import shutil
import signal
import smtplib
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

from harness import (BIN, LMDB_ONLY, PG_OUTAGE, STORE, base_conf, case, check, eq, free_port,
                     make_msg, port_open,
                     recv_line, render_conf, run, submit, submit_ok, wait_until)

CTL = os.path.join(os.path.dirname(os.path.abspath(BIN)), "idemrelayctl")

# a deferred message stays deferred until an operator acts
SLOW_RETRY = {"retry": {"first": "1h", "max": "1h", "give_up": "5d"}}


def control_line(d, line):
    """control_line - one raw request line to the control socket, its reply
    (the blank lines the daemon sends while it serves left out)"""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(d.conf["control"])
        s.sendall(line)
        got = recv_line(s)
        while got == b"\n":
            got = recv_line(s)
        return got.decode()


def ops_daemon(t, sink, extra=None):
    """ops_daemon - a daemon with a control socket and slow retries"""
    conf = dict(SLOW_RETRY)
    conf["control"] = os.path.join(t.tmp, "ctl.sock")
    conf.update(extra or {})
    return t.daemon(sink, conf)


def ctl(d, *args, want=0, conf=None, env=None):
    """ctl - run idemrelayctl on the daemon's config; check the exit status"""
    check(os.access(CTL, os.X_OK), "%s is missing: run make first" % CTL)
    r = run([CTL, "-c", conf or d.conf_path] + list(args), env=env)
    check(r.returncode == want, "idemrelayctl %s: exit %d, want %d\nstdout: %s\nstderr: %s"
          % (" ".join(args), r.returncode, want, r.stdout, r.stderr))
    return r


def ctl_json(d, *args, want=0, conf=None):
    """ctl_json - the same with --json; the output must be one JSON object"""
    r = ctl(d, "--json", *args, want=want, conf=conf)
    try:
        out = json.loads(r.stdout)
    except ValueError as e:
        raise AssertionError("idemrelayctl --json %s: not JSON (%s): %r"
                             % (" ".join(args), e, r.stdout))
    eq(out.get("ok"), want == 0, "--json %s: ok" % " ".join(args))
    return out


def stand_in_conf(t):
    """A configuration whose control socket a test's stand-in serves, no
    daemon started: the socket's path and the configuration's."""
    sock = os.path.join(t.tmp, "ctl.sock")
    conf = base_conf(os.path.join(t.tmp, "store"), free_port(), free_port())
    conf["control"] = sock
    path = os.path.join(t.tmp, "idemrelay.conf")
    with open(path, "w") as f:
        f.write(render_conf(conf))
    return sock, path


def ctl_as_nobody(d, *args):
    """ctl_as_nobody - idemrelayctl run as nobody (uid 65534) on the daemon's configuration,
    both copied into a directory of their own that nobody may reach (a test's is 0700)"""
    base = tempfile.mkdtemp(prefix="idemrelay-ctl-")
    os.chmod(base, 0o755)
    ctl_bin, conf = os.path.join(base, "idemrelayctl"), os.path.join(base, "idemrelay.conf")
    shutil.copy2(CTL, ctl_bin)
    shutil.copy2(d.conf_path, conf)
    os.chmod(ctl_bin, 0o755)
    os.chmod(conf, 0o644)

    def as_nobody():
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
    try:
        return subprocess.run([ctl_bin, "-c", conf] + list(args), capture_output=True,
                              text=True, timeout=30, preexec_fn=as_nobody)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def queued_qids(d):
    return [m["qid"] for m in ctl_json(d, "queue")["queue"]]


@case()
def test_ctl_queue_show_flush(t):
    """queue shows a deferred message; show by QID and by KEY tells its story; flush delivers it"""
    sink = t.sink()
    d = ops_daemon(t, sink)
    rcpt = "fail-first-1-ops@example.com"
    msg = make_msg(key="ops-flush-1")
    qid = submit_ok(d.port, rcpt, msg)
    d.wait_log(qid, "status=deferred")

    out = ctl(d, "queue").stdout
    check(qid in out and "deferred" in out and rcpt in out,
          "queue lists the deferred message: %r" % out)
    q = ctl_json(d, "queue")
    eq(q["count"], 1, "queue count")
    m = q["queue"][0]
    eq((m["qid"], m["state"], m["attempts"], m["from"]),
       (qid, "deferred", 1, "sender@example.org"), "queue entry")
    check(m["next_attempt"] is not None and m["age"] >= 0, "next attempt and age: %r" % m)
    eq([(r["addr"], r["state"]) for r in m["recipients"]], [(rcpt, "deferred")], "recipients")
    check(m["recipients"][0]["reply"].startswith("451"), "last reply: %r" % m["recipients"])

    # a duplicate answered with the QID is part of its story at once
    r = submit(d.port, rcpt, msg)
    eq(r.qid, qid, "duplicate's QID")

    text = ctl(d, "show", qid).stdout
    for want in (qid, "deferred", "client.test", "127.0.0.1", "<sender@example.org>",
                 rcpt, "451", "1 answered"):
        check(want in text, "show QID lacks %r:\n%s" % (want, text))
    by_qid = ctl_json(d, "show", qid)["messages"]
    by_key = ctl_json(d, "show", "ops-flush-1")["messages"]
    eq([x["qid"] for x in by_key], [qid], "show KEY finds the message")
    # Times for people are UTC with their Z, the JSON's own, whatever TZ says.
    accepted = by_qid[0]["accepted"]
    check(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", accepted or ""),
          "--json accepted: %r" % accepted)
    for args in (["show", qid], ["queue"]):
        out = ctl(d, *args, env=dict(os.environ, TZ="EST+5")).stdout
        check(accepted in out, "idemrelayctl %s with TZ=EST+5 does not give the arrival as %s:\n%s"
              % (" ".join(args), accepted, out))
    s = by_qid[0]
    eq((s["qid"], s["state"], s["queued"], s["key"], s["duplicates"], s["attempts"]),
       (qid, "deferred", True, True, 1, 1), "story while deferred")
    check(s["client"].startswith("client.test") and s["from"] == "sender@example.org",
          "story names client and sender: %r" % s)

    ctl(d, "flush")
    sink.wait_count(1, timeout=15)
    d.wait_log(qid, "status=sent")
    wait_until(lambda: queued_qids(d) == [], 10, "an empty queue after the flush")
    check("Queue is empty" in ctl(d, "queue").stdout, "queue says it is empty")
    s = ctl_json(d, "show", qid)["messages"][0]
    eq((s["state"], s["queued"], s["attempts"], s["duplicates"]), ("sent", False, 2, 1),
       "story after delivery")
    check(s["recipients"][0]["reply"].startswith("250") and s["finished"],
          "the upstream's 250 is in the story: %r" % s)
    d.wait_log("control: flush")


@case()
def test_ctl_retry_drop(t):
    """retry QID delivers one deferred message now; drop QID removes another for good"""
    sink = t.sink()
    d = ops_daemon(t, sink)
    qa = submit_ok(d.port, "fail-first-1-ra@example.com", make_msg(key="ops-retry-a"))
    qb = submit_ok(d.port, "tempfail-rb@example.com", make_msg(key="ops-drop-b"))
    d.wait_log(qa, "status=deferred")
    d.wait_log(qb, "status=deferred")
    eq(sorted(queued_qids(d)), sorted([qa, qb]), "queued")

    out = ctl(d, "retry", qa).stdout
    check(qa in out, "retry says which: %r" % out)
    rec = sink.wait_count(1, timeout=15)[0]
    eq(rec["to"], ["fail-first-1-ra@example.com"], "retried message delivered")
    d.wait_log(qa, "status=sent")
    wait_until(lambda: queued_qids(d) == [qb], 10, "only the other message left")

    j = ctl_json(d, "drop", qb)
    eq(j["qid"], qb, "drop reply")
    eq(queued_qids(d), [], "queue after drop")
    d.wait_log(qb, "removed by the operator")
    s = ctl_json(d, "show", qb)["messages"][0]
    eq((s["state"], s["queued"]), ("dropped", False), "dropped story")
    eq(s["recipients"][0]["state"], "dropped", "dropped recipient")

    # errors: a QID gone, a QID never seen, a malformed one
    r = ctl(d, "drop", qb, want=1)
    check("not queued" in r.stderr, "drop twice: %r" % r.stderr)
    r = ctl(d, "retry", "0000000000VV", want=1)
    check("unknown QID 0000000000VV" in r.stderr, "retry unknown: %r" % r.stderr)
    j = ctl_json(d, "retry", "0000000000VV", want=1)
    check("unknown QID" in j["error"], "--json error: %r" % j)
    r = ctl(d, "show", "0000000000VV", want=1)
    check("unknown QID or key" in r.stderr, "show unknown: %r" % r.stderr)
    time.sleep(1.5)
    eq(len(sink.accepted()), 1, "nothing else reached the sink")


@case()
def test_ctl_forget_then_resubmit(t):
    """forget KEY: the next submission with that key is a new message, delivered again"""
    sink = t.sink()
    d = ops_daemon(t, sink)
    msg = make_msg(key="ops-forget-1")
    q1 = submit_ok(d.port, ["fa@example.com", "fb@example.com"], msg)
    sink.wait_count(1)
    d.wait_log(q1, "removed")      # out of the queue: forget is refused before
    eq(submit_ok(d.port, ["fa@example.com", "fb@example.com"], msg), q1, "duplicate before")

    r = ctl(d, "-u", "nobody", "forget", "ops-forget-1", want=1)
    check("unknown key" in r.stderr, "another user's key: %r" % r.stderr)
    j = ctl_json(d, "forget", "ops-forget-1")
    eq((j["claims"], j["qids"]), (2, [q1]), "forget reply")
    d.wait_log(q1, "key forgotten by the operator")
    r = ctl(d, "forget", "ops-forget-1", want=1)
    check("unknown key ops-forget-1" in r.stderr, "forget twice: %r" % r.stderr)

    q2 = submit_ok(d.port, ["fa@example.com", "fb@example.com"], msg)
    check(q2 != q1, "resubmission after forget got a new QID (%s, %s)" % (q1, q2))
    recs = sink.wait_count(2, timeout=15)
    eq(sorted(r["to"] for r in recs), [["fa@example.com", "fb@example.com"]] * 2,
       "delivered twice")
    eq(submit_ok(d.port, ["fa@example.com", "fb@example.com"], msg), q2, "duplicate after")

    eq([m["qid"] for m in ctl_json(d, "show", "ops-forget-1")["messages"]], [q2],
       "the key now names the new message")
    old = ctl_json(d, "show", q1)["messages"][0]
    check(old["key_forgotten"] is not None and old["duplicates"] == 1,
          "the old story says its key was forgotten: %r" % old)

    # a Message-ID key is found by the Message-ID itself
    q3 = submit_ok(d.port, "fc@example.com", make_msg(msgid="<ops-3@example.org>"))
    eq([m["qid"] for m in ctl_json(d, "show", "<ops-3@example.org>")["messages"]], [q3],
       "show by Message-ID")
    # the daemon takes one pair of <> off, and so must idemrelayctl (it took all)
    q4 = submit_ok(d.port, "fd@example.com", make_msg(msgid="<<ops-4@example.org>>"))
    eq([m["qid"] for m in ctl_json(d, "show", "<<ops-4@example.org>>")["messages"]], [q4],
       "show by a Message-ID in two pairs of <>")


@case()
def test_ctl_forget_while_queued(t):
    """forget KEY while its message is queued: refused, saying why and what to do;
    --force forgets (both copies are then delivered, as said); --drop drops the
    queued copy too (one delivery); show says the key was forgotten; the same
    rules with no daemon running"""
    sink = t.sink(default="tempfail")
    d = ops_daemon(t, sink)
    rc = ["wq@example.com"]

    qa = submit_ok(d.port, rc, make_msg(key="ops-fq-a"))
    d.wait_log(qa, "status=deferred")
    r = ctl(d, "forget", "ops-fq-a", want=1)
    for want in ("not forgotten", qa, "still queued", "second copy", "both would be delivered",
                 "--drop", "--force"):
        check(want in r.stderr, "refusal lacks %r: %r" % (want, r.stderr))
    j = ctl_json(d, "forget", "ops-fq-a", want=1)
    eq((j["error"], j["queued"]), ("still queued", [qa]), "--json refusal")
    eq(submit_ok(d.port, rc, make_msg(key="ops-fq-a")), qa, "still a duplicate after refusal")
    check("yes, claims answer its duplicates" in ctl(d, "show", qa).stdout, "show before")

    # --drop: the queued copy goes, the key is forgotten, the next submission is new
    r = ctl(d, "--drop", "forget", "ops-fq-a")
    check("1 claim deleted" in r.stdout and "dropped from the queue: %s" % qa in r.stdout,
          "--drop output: %r" % r.stdout)
    d.wait_log(qa, "removed by the operator (idemrelayctl forget --drop)")
    out = ctl(d, "show", qa).stdout
    check("dropped" in out and "forgotten by the operator" in out
          and "claims answer its duplicates" not in out, "show after --drop:\n" + out)

    # --force: forgotten while queued; the old copy and the new one are both delivered
    qb = submit_ok(d.port, rc, make_msg(key="ops-fq-b"))
    d.wait_log(qb, "status=deferred")
    j = ctl_json(d, "--force", "forget", "ops-fq-b")
    eq((j["qids"], j["queued"]), ([qb], [qb]), "--force reply")
    d.wait_log(qb, "key forgotten by the operator (idemrelayctl forget --force, while queued)")
    out = ctl(d, "show", qb).stdout
    check(out.startswith("%s: deferred" % qb) and "forgotten by the operator" in out
          and "its duplicates are new messages" in out, "show after --force:\n" + out)
    qb2 = submit_ok(d.port, rc, make_msg(key="ops-fq-b"))
    check(qb2 != qb, "after --force the resubmission is new (%s, %s)" % (qb, qb2))
    sink.control()
    ctl(d, "flush")
    recs = sink.wait_count(2, timeout=20)
    time.sleep(1.5)
    eq(len(sink.accepted()), 2, "--force: both copies delivered, --drop's copy not")
    check(all(r["to"] == rc for r in recs), "recipients: %r" % [r["to"] for r in recs])

    ctl(d, "forget", "ops-fq-c", want=1)        # unknown key: still 1
    ctl(d, "--force", "--drop", "forget", "ops-fq-a", want=2)
    ctl(d, "--force", "queue", want=2)

    # no daemon: the same refusal, and --drop on the store itself
    sink.control(default="tempfail")
    qc = submit_ok(d.port, rc, make_msg(key="ops-fq-c"))
    d.wait_log(qc, "status=deferred")
    d.stop()
    r = ctl(d, "forget", "ops-fq-c", want=1)
    check("still queued" in r.stderr and qc in r.stderr, "offline refusal: %r" % r.stderr)
    j = ctl_json(d, "--drop", "forget", "ops-fq-c")
    eq((j["dropped"], j["offline"]), ([qc], True), "offline --drop reply")
    check(qc not in ctl(d, "queue").stdout, "offline --drop left %s queued" % qc)


def pg_via_proxy(t):
    """pg_via_proxy - on PostgreSQL, a proxy to the test's database (to cut the
    daemon off it) and the store setting that goes through it; (None, {}) on LMDB"""
    if t.store != "postgresql":
        return None, {}
    proxy = t.pg_proxy()
    return proxy, {"store": {"url": proxy.url_of(t.pg_url())}}


def direct_conf(t, d):
    """direct_conf - d's conf file with its store.url going straight to PostgreSQL"""
    path = os.path.join(t.tmp, "direct.conf")
    with open(d.conf_path) as f:
        text = f.read().replace(d.conf["store"]["url"], t.pg_url())
    with open(path, "w") as f:
        f.write(text)
    return path


@case()
def test_ctl_stats_and_errors(t):
    """stats (text and --json), an absent store, and what needs a daemon when none
    runs; on PostgreSQL, stats while the daemon is cut off the database (it is not
    reachable, one outage) and after (reachable again, still one)"""
    sink = t.sink()
    proxy, over = pg_via_proxy(t)
    d = ops_daemon(t, sink, over)
    pg = d.backend == "postgresql"
    qid = submit_ok(d.port, "tempfail-st@example.com", make_msg(key="ops-stats-1"))
    d.wait_log(qid, "status=deferred")
    out = ctl(d, "stats").stdout
    check("queue        1 message" in out and "pid" in out, "stats text: %r" % out)
    if pg:
        check("reachable    yes from the daemon, 0 outages since its start" in out,
              "stats text, PostgreSQL reachable: %r" % out)
    s = ctl_json(d, "stats")
    eq((s["store"]["queued"], s["store"]["claims"]), (1, 1), "store figures")
    eq(s["daemon"]["store"], {"backend": d.backend, "up": True, "outages": 0,
                              "replication_waiting": 0, "replication_waits": 0, "voided": 0},
       "the store as the daemon sees it")
    if not pg:
        check(s["store"]["map_used"] > 0 and s["store"]["map_size"] >= s["store"]["map_used"],
              "map figures: %r" % s["store"])
    c = s["daemon"]["counters"]
    eq((c["submissions"], c["accepted"], c["deferred"]), (1, 1, 1), "daemon counters")

    if pg:
        stats_pg_outage(t, d, proxy, qid)
    else:
        stats_absent_store(t, d, qid)

    # the daemon stopped: reading still works, flush and retry say why they cannot
    eq(d.stop(), 0, "daemon exit status")
    check(not os.path.exists(d.conf["control"]), "control socket removed at exit")
    eq(queued_qids(d), [qid], "queue read without the daemon")
    r = ctl(d, "flush", want=1)
    check("not running" in r.stderr, "flush without daemon: %r" % r.stderr)
    r = ctl(d, "retry", qid, want=1)
    check("not running" in r.stderr, "retry without daemon: %r" % r.stderr)
    eq(ctl_json(d, "stats")["daemon"], None, "stats without daemon")
    # drop works on the store itself then, and a restarted daemon does not deliver it
    eq(ctl_json(d, "drop", qid)["offline"], True, "offline drop")
    eq(queued_qids(d), [], "queue after offline drop")
    d.start()
    time.sleep(1.5)
    eq(sink.accepted(), [], "dropped message never delivered")


def stats_absent_store(t, d, qid):
    """stats_absent_store - LMDB: a store path with no store in it"""
    absent = os.path.join(t.tmp, "absent.conf")
    with open(d.conf_path) as f:
        text = f.read().replace(d.store, os.path.join(t.tmp, "no-such-store"))
    with open(absent, "w") as f:
        f.write(text)
    for cmd in (["queue"], ["show", qid], ["stats"]):
        r = ctl(d, *cmd, want=1, conf=absent)
        check("no store at %s" % os.path.join(t.tmp, "no-such-store") in r.stderr,
              "%s on an absent store: %r" % (cmd[0], r.stderr))
    j = ctl_json(d, "queue", want=1, conf=absent)
    check(j["error"].startswith("no store at"), "--json absent store: %r" % j)


def stats_pg_outage(t, d, proxy, qid):
    """stats_pg_outage - PostgreSQL: the daemon cut off its database (new
    connections refused), then back. idemrelayctl reads the database through the
    proxy too (it cannot then, and says so) or straight (it can)."""
    direct = direct_conf(t, d)
    proxy.cut(refuse=True)
    r = submit(d.port, "st@example.com", make_msg(key="ops-stats-2"))
    check(r.data is not None and r.data[0] == 451 and r.data[1].startswith(b"4.3.0"),
          "a submission while the daemon is cut off PostgreSQL: %r" % r)
    d.wait_log(PG_OUTAGE)
    want = "reachable    NO from the daemon, 1 outage since its start"
    out = ctl(d, "stats", conf=direct).stdout
    check(want in out and "queue        1 message" in out, "stats text during the outage: %r" % out)
    s = ctl_json(d, "stats", conf=direct)
    eq(s["daemon"]["store"], {"backend": "postgresql", "up": False, "outages": 1,
                              "replication_waiting": 0, "replication_waits": 0, "voided": 0},
       "the store as the daemon sees it during the outage")
    eq(s["store"]["queued"], 1, "queued, read straight from the database")
    # through the cut proxy idemrelayctl cannot read the database either: it shows
    # what the daemon sees, says why it cannot read, and exits 1 (idemrelayctl(8))
    r = ctl(d, "stats", want=1)
    check("store        postgresql: cannot be read: " in r.stdout and want in r.stdout,
          "stats text, cut off as the daemon: %r" % r.stdout)
    check(r.stderr.startswith("idemrelayctl: cannot read the store: "),
          "stats, cut off: stderr %r" % r.stderr)
    s = ctl_json(d, "stats", want=1)
    check(s["store"].get("readable") is False and s["store"].get("error")
          and s.get("error") == s["store"]["error"] and s["daemon"]["store"]["up"] is False,
          "--json stats, cut off: %r" % s)
    r = ctl(d, "queue", want=1)
    check(r.stderr.strip(), "queue cut off says nothing")
    proxy.heal()
    wait_until(lambda: ctl_json(d, "stats", conf=direct)["daemon"]["store"]["up"], 15,
               "the daemon to see PostgreSQL again")
    s = ctl_json(d, "stats")
    eq(s["daemon"]["store"], {"backend": "postgresql", "up": True, "outages": 1,
                              "replication_waiting": 0, "replication_waits": 0, "voided": 0},
       "the store as the daemon sees it after the outage")
    out = ctl(d, "stats").stdout
    check("reachable    yes from the daemon, 1 outage since its start" in out,
          "stats text after the outage: %r" % out)
    d.wait_log("PostgreSQL reachable again")
    eq(len(d.log_lines(PG_OUTAGE)), 1, "outage log lines")
    eq(queued_qids(d), [qid], "the queue after the outage")
    print("outage: %d connection(s) dropped, %d refused" % (proxy.dropped, proxy.accepted
                                                           - proxy.forwarded))


@case(needs_daemon=False)
def test_ctl_store_url_where(t):
    """idemrelayctl names a PostgreSQL store it cannot reach as idemrelay -t does:
    FILE:LINE: store.url: and libpq's words, once, for every command that reads
    or writes the store (stats shows it as the reason it cannot read). The store
    is a free loopback port, so no server is needed and it runs on either store."""
    url = "postgresql://idemrelay@127.0.0.1:%d/nodb" % free_port()
    text = render_conf(base_conf(None, free_port(), free_port(), url, "ctl"))
    path = os.path.join(t.tmp, "refused.conf")
    with open(path, "w") as f:
        f.write(text)
    line = next(n for n, l in enumerate(text.splitlines(), 1) if l.strip().startswith("url = "))
    where = "%s:%d: store.url: " % (path, line)

    def says(what, msg):
        check(msg.startswith(where) and "Connection refused" in msg,
              "%s: want %r... Connection refused, got %r" % (what, where, msg))
        eq(msg.count("store.url"), 1, "%s: store.url named once in %r" % (what, msg))

    r = run([BIN, "-t", "-c", path])
    check(any(l.startswith("idemrelay: " + where) for l in r.stderr.splitlines()),
          "idemrelay -t does not name %r: %r" % (where, r.stderr))
    qid = "ABCDEF012345"
    for cmd in (["queue"], ["show", qid], ["show", "a-key"], ["drop", qid], ["forget", "a-key"]):
        err = ctl(None, *cmd, want=1, conf=path).stderr.strip()
        check(err.startswith("idemrelayctl: ") and "\n" not in err,
              "%s: want one idemrelayctl: line, got %r" % (cmd[0], err))
        says(" ".join(cmd), err[len("idemrelayctl: "):])
    says("--json queue", ctl_json(None, "queue", want=1, conf=path)["error"])
    out = ctl(None, "stats", want=1, conf=path).stdout
    head = "store        postgresql: cannot be read: "
    first = out.splitlines()[0] if out else ""
    check(first.startswith(head), "stats text: %r" % out)
    says("stats", first[len(head):])
    s = ctl_json(None, "stats", want=1, conf=path)["store"]
    eq(s.get("readable"), False, "--json stats: readable")
    says("--json stats", s.get("error", ""))


def scrape(port, path="/metrics"):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, "", ""


def samples(text):
    """samples - {name{labels}: value} of a Prometheus text exposition"""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


# LMDB's map: not served on PostgreSQL
MAP_METRICS = ("idemrelay_store_map_size_bytes", "idemrelay_store_used_bytes",
               "idemrelay_store_map_ceiling_bytes", "idemrelay_store_full_ratio")


@case()
def test_metrics_scrape(t):
    """/metrics after exactly 1 accepted, 1 duplicate, 1 mismatch; on PostgreSQL,
    the outages while the daemon is cut off the database and after"""
    sink = t.sink()
    port = free_port()
    proxy, over = pg_via_proxy(t)
    d = t.daemon(sink, dict(over, metrics={"address": "127.0.0.1", "port": port}))
    pg = d.backend == "postgresql"
    msg = make_msg(key="metrics-1")
    qid = submit_ok(d.port, "m@example.com", msg)
    eq(submit(d.port, "m@example.com", msg).qid, qid, "duplicate")
    r = submit(d.port, "m@example.com", make_msg(key="metrics-1", body="Other.\r\n"))
    eq(r.code, 554, "mismatch")
    sink.wait_count(1)
    d.wait_log(qid, "removed")  # after the outcome is committed

    status, ctype, text = scrape(port)
    eq(status, 200, "GET /metrics")
    check(ctype.startswith("text/plain"), "content type %r" % ctype)
    s = samples(text)
    want = {
        "idemrelay_submissions_total": 3,
        "idemrelay_accepted_total": 1,
        "idemrelay_duplicates_total": 1,
        "idemrelay_mismatches_total": 1,
        "idemrelay_partial_duplicates_total": 0,
        "idemrelay_shadow_duplicates_total": 0,
        'idemrelay_deliveries_total{status="sent"}': 1,
        'idemrelay_deliveries_total{status="deferred"}': 0,
        "idemrelay_queue_depth": 0,
        "idemrelay_claims": 1,
        "idemrelay_accept_latency_seconds_count": 3,
        "idemrelay_delivery_latency_seconds_count": 1,
        # on PostgreSQL the commit thread answers duplicates and mismatches too
        # (relay/submit.c, fast_duplicate), one transaction each here
        'idemrelay_commit_batch_size_bucket{le="+Inf"}': 3 if pg else 1,
        "idemrelay_store_up": 1,
    }
    if pg:
        want["idemrelay_store_outages_total"] = 0
    for k, v in want.items():
        eq(s.get(k), v, k)
    for k in ("idemrelay_queue_oldest_seconds", "idemrelay_commit_batch_size_count"):
        check(k in s, "%s missing from /metrics" % k)
    for k in MAP_METRICS[:2] + ("idemrelay_store_outages_total",):
        eq(k in s, (k in MAP_METRICS) != pg, "%s in /metrics (store %s)" % (k, d.backend))
    check("# TYPE idemrelay_accept_latency_seconds histogram" in text, "histogram type")
    eq(scrape(port, "/other")[0], 404, "GET /other")

    # the Grafana dashboard only asks for what /metrics serves
    dash = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "contrib", "grafana-idemrelay.json")
    with open(dash) as f:
        used = set(re.findall(r"idemrelay_[a-z_]+", json.dumps(json.load(f))))
    served = set(re.findall(r"^# TYPE (idemrelay_[a-z_]+)", text, re.M))
    served |= {n + sfx for n in served for sfx in ("_bucket", "_sum", "_count")}
    if pg:
        served |= set(MAP_METRICS)
    eq(sorted(used - served), [], "dashboard metrics missing from /metrics")
    if pg:
        metrics_pg_outage(d, proxy, port)


def metrics_pg_outage(d, proxy, port):
    """metrics_pg_outage - the daemon cut off PostgreSQL: store down, one outage,
    the store's gauges gone; then back: up, still one outage"""
    proxy.cut(refuse=True)
    r = submit(d.port, "m@example.com", make_msg(key="metrics-2"))
    eq(r.code, 451, "a submission while cut off PostgreSQL")
    s = samples(scrape(port)[2])
    eq((s.get("idemrelay_store_up"), s.get("idemrelay_store_outages_total")), (0, 1),
       "store up, outages during the outage")
    check("idemrelay_queue_depth" not in s, "queue depth served while the store is away")
    proxy.heal()
    wait_until(lambda: samples(scrape(port)[2]).get("idemrelay_store_up") == 1, 15,
               "/metrics to say the store is up again")
    s = samples(scrape(port)[2])
    eq((s.get("idemrelay_store_outages_total"), s.get("idemrelay_queue_depth")), (1, 0),
       "outages, queue depth after the outage")


@case(timeout=240)
def test_expiry_keeps_up(t):
    """stories expire as fast as they come: a backlog of 2,500 goes in one pass, not 1,000 every
    10 s (the old cap took three passes, 20 s and more)"""
    n, clients = 2500, 5
    sink = t.sink()
    d = ops_daemon(t, sink, {"store": {"key_ttl": "1s"}})

    def client(c):
        s = smtplib.SMTP("127.0.0.1", d.port, timeout=30)
        s.ehlo("client.test")
        for i in range(c, n, clients):
            submit_ok(d.port, "a@example.com", make_msg(key="exp-%d" % i), smtp=s)
        s.quit()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wait_until(lambda: len(sink.accepted()) >= n, timeout=150, what="%d messages delivered" % n)
    wait_until(lambda: ctl_json(d, "stats")["store"]["queued"] == 0, what="the queue emptied")
    # every story is due a second later; the daemon looks every 10 s
    deadline, left = time.time() + 14, n
    while left and time.time() < deadline:
        time.sleep(0.5)
        left = ctl_json(d, "stats")["store"]["stories"]
    eq(left, 0, "stories left 14 s after they were due")
    eq(ctl_json(d, "stats")["store"]["claims"], 0, "claims left after expiry")


@case(stores=LMDB_ONLY)
def test_ctl_errors_say_what_is_wrong(t):
    """idemrelayctl's errors name the problem (issue 26 part 2): an unknown
    command or a wrong number of arguments says which (exit 2; as JSON with
    --json), and a user who may not read the store or reach the daemon is told
    that, not 'no store' nor 'not running' while both are there."""
    sink = t.sink()
    d = ops_daemon(t, sink)
    submit_ok(d.port, "a@example.com", make_msg(key="ctl-err-1"))
    r = ctl(d, "frob", want=2)
    check("unknown command \"frob\"" in r.stderr, "unknown command: %r" % r.stderr)
    r = ctl(d, "show", want=2)
    check("show takes one argument, a QID or a key; 0 given" in r.stderr, "show: %r" % r.stderr)
    out = ctl_json(d, "queue", "extra", want=2)
    eq(out["error"], "queue takes no argument; 1 given", "--json error")
    if os.getuid() != 0:
        return                          # the rest needs another user to be
    # the store and the socket exist, and nobody may read or reach them (the test's
    # directory is 0700)
    for args, words in ((["queue"], "cannot read the store at"),
                        (["flush"], "cannot reach the daemon: control socket")):
        r = ctl_as_nobody(d, *args)
        eq(r.returncode, 1, "%s as nobody: %r" % (args[0], r.stderr))
        check(words in r.stderr and "Permission denied" in r.stderr and
              "run as root or as the user the daemon runs as" in r.stderr,
              "%s as nobody says what is wrong: %r" % (args[0], r.stderr))


@case(timeout=90)
def test_ctl_while_daemon_stops(t):
    """idemrelayctl while the daemon stops: its event loop is done and a
    delivery still waits for the reply to its final dot. A drop of that
    message must not be carried out on the store beside the daemon, where
    the daemon's scheduler cannot refuse it as being delivered (it would be
    delivered and said dropped): idemrelayctl fails, nothing changes, and
    the message is recorded sent before the exit."""
    sink = t.sink()
    d = ops_daemon(t, sink, {"upstream": {"timeout": "30s"}})
    qid = submit_ok(d.port, "delay-12-stopping@example.com", make_msg(key="stop-ctl"))
    wait_until(lambda: sink.events("dot"), 15, "the final dot at the sink")
    d.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: not port_open(d.port), 5, "the listeners closed after SIGTERM")
    time.sleep(0.5)                     # the control thread's stop follows the event loop's
    check(d.running(), "the daemon waits for the dot's reply")
    r = ctl(d, "--json", "drop", qid, want=1)
    check("offline" not in r.stdout, "a drop beside the stopping daemon: %r" % r.stdout)
    eq(d.stop(timeout=30), 0, "exit status after SIGTERM")
    lines = d.log_lines(qid, "relay=", "status=")
    check(len(lines) == 1 and "status=sent" in lines[0], "the outcome: %s" % lines)
    check(not d.log_lines(qid, "removed by the operator"), "said dropped: %s" % d.log_lines(qid))


@case(timeout=90, stores=LMDB_ONLY)
def test_ctl_while_daemon_starts(t):
    """idemrelayctl while the daemon starts and has not opened its store yet
    (here held up by a lock on lock.mdb, as a compaction would hold it): a
    release goes to the daemon, which serves it once started, and is not
    carried out on the store beside it (a release written after the start
    read the queue would leave the message unscheduled until a restart)."""
    sink = t.sink()
    sink.control(rcpt={"held-start@example.com": "tempfail"})
    d = ops_daemon(t, sink)
    qid = submit_ok(d.port, "held-start@example.com", make_msg(key="start-ctl"))
    d.wait_log(qid, "status=deferred")
    eq(ctl_json(d, "hold", qid)["held"], [qid], "hold")
    eq(d.stop(), 0, "exit status")
    lock = os.open(os.path.join(d.store, "lock.mdb"), os.O_RDWR)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        with open(d.log_path, "ab") as logf:
            d.proc = subprocess.Popen([BIN, "-c", d.conf_path], cwd=d.dir,
                                      stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)
        d.stopped = False
        wait_until(lambda: port_open(d.port), 10, "the listeners bound")
        time.sleep(0.5)
        r = subprocess.Popen([CTL, "-c", d.conf_path, "--json", "release", qid],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1)
    finally:
        os.close(lock)
    out, err = r.communicate(timeout=30)
    eq(r.returncode, 0, "release during the start: %r %r" % (out, err))
    j = json.loads(out)
    eq((j["released"], j.get("offline")), ([qid], None), "release during the start")
    wait_until(lambda: "started: " in d.log(), 10, "the daemon started")


@case(timeout=90)
def test_ctl_unreachable_daemon_not_bypassed(t):
    """A user who may not connect to the running daemon's control socket
    (Permission denied) is told so (exit 1, "cannot reach the daemon", run
    as root or as the daemon's user), and a drop is not carried out on the
    store instead, beside the daemon, as if none ran; here the store is one
    that user can write (a database whose URL the configuration gives, or
    an LMDB directory opened to everyone)."""
    if os.getuid() != 0:
        return                          # it needs another user to be
    sink = t.sink()
    sink.control(rcpt={"unreach@example.com": "tempfail"})
    d = ops_daemon(t, sink)
    qid = submit_ok(d.port, "unreach@example.com", make_msg(key="unreach-1"))
    d.wait_log(qid, "status=deferred")
    opened = []
    if d.store:                         # the path to the store, and the store, for anyone
        p = d.store
        while p != "/" and p != tempfile.gettempdir():
            opened.append((p, os.stat(p).st_mode & 0o7777))
            p = os.path.dirname(p)
        for p, _ in opened:
            os.chmod(p, 0o777 if p == d.store else 0o755)
        for f in ("data.mdb", "lock.mdb"):
            os.chmod(os.path.join(d.store, f), 0o666)
    os.chmod(os.path.dirname(d.conf["control"]), 0o755)
    try:
        r = ctl_as_nobody(d, "--json", "drop", qid)
    finally:
        for p, mode in opened:
            os.chmod(p, mode)
    check(r.returncode == 1 and "cannot reach the daemon" in r.stderr
          and "run as root or as the user the daemon runs as" in r.stderr,
          "drop as nobody: exit %d %r %r" % (r.returncode, r.stdout, r.stderr))
    eq(queued_qids(d), [qid], "the queue after the refused drop")


@case(timeout=90)
def test_ctl_without_control_socket(t):
    """With no control socket configured (the default), idemrelayctl cannot
    ask the running daemon. On LMDB the daemon schedules what it read at
    start: a release written on the store beside it would never be
    attempted until a restart, and a drop could race its delivery, so hold,
    release and drop are refused while it has the store open (exit 1, "open
    in another process", configure control) and the daemon delivers the
    message as before. On PostgreSQL the nodes take due messages from the
    database, so a hold and a release carried out there by idemrelayctl
    (offline) are kept to: not delivered while held, delivered once
    released."""
    sink = t.sink()
    d = t.daemon(sink, {"retry": {"first": "2s", "max": "2s", "give_up": "5d"}})
    qid = submit_ok(d.port, "fail-first-1-noctl@example.com", make_msg(key="noctl-1"))
    d.wait_log(qid, "status=deferred")
    if STORE == "lmdb":
        for cmd in ("hold", "release", "drop"):
            r = ctl(d, cmd, qid, want=1)
            check("open in another process" in r.stderr and "control" in r.stderr,
                  "%s beside the daemon: %r" % (cmd, r.stderr))
        sink.wait_count(1, timeout=20, what="the message, neither held nor dropped")
        return
    eq((ctl_json(d, "hold", qid)["held"], ctl_json(d, "queue")["queue"][0]["state"]),
       ([qid], "held"), "a hold on the database")
    time.sleep(4)                   # two attempts would have been due
    eq(sink.accepted(), [], "delivered while held")
    eq(ctl_json(d, "release", qid).get("offline"), True, "a release on the database")
    sink.wait_count(1, timeout=20, what="the released message")


@case(needs_daemon=False)
def test_ctl_long_reply(t):
    """The daemon's reply to hold ALL over a long queue (80,000 messages, as a
    day's outage upstream can leave: 1.4 MB of QIDs) is waited for, however
    long the action takes (the daemon holds about 1,700 messages a second
    on a 2-core machine: 20,000 took more than 10 s), and read whole and
    listed, not taken for no reply (the daemon has held them all). The daemon
    here is a stand-in on the control socket that answers as control.c does,
    after 11 s, with a blank line every second meanwhile, as the daemon says
    it is at it (util/admin.h): idemrelayctl gives up only after 10 s of
    silence."""
    sock, path = stand_in_conf(t)
    qids = ["01J1%08d" % i for i in range(80000)]
    reply = json.dumps({"ok": True, "count": len(qids), "held": qids, "busy": []},
                       separators=(",", ":")).encode() + b"\n"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock)
    srv.listen(1)
    got = []

    def serve():
        c, _ = srv.accept()
        with c:
            got.append(recv_line(c))
            for _ in range(11):
                c.sendall(b"\n")
                time.sleep(1)
            c.sendall(reply)
    th = threading.Thread(target=serve, daemon=True)
    th.start()
    r = ctl(None, "hold", "ALL", conf=path)
    th.join(5)
    srv.close()
    eq(got, [b"hold ALL\n"], "the request")
    lines = r.stdout.splitlines()
    eq((len(lines), lines[0], lines[-1]), (80001, "%s: on hold" % qids[0],
                                           "-- 80000 messages on hold"), "the listing")


@case(needs_daemon=False)
def test_ctl_daemon_gone_before_the_request(t):
    """A daemon that goes away between idemrelayctl's connect and its request
    (a stop, a crash) is 'no reply' (exit 1), not idemrelayctl killed by
    SIGPIPE with nothing said. Here a stand-in on the control socket accepts
    and closes at once, and strace holds idemrelayctl for 0.5 s after its
    connect returns, so that its write always comes after the close."""
    check(shutil.which("strace"), "strace is missing (package strace)")
    sock, path = stand_in_conf(t)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock)
    srv.listen(1)

    def serve():
        c, _ = srv.accept()
        c.close()
    th = threading.Thread(target=serve, daemon=True)
    th.start()
    r = run(["strace", "-qq", "-f", "-o", os.devnull, "-e", "trace=connect",
             "-e", "inject=connect:delay_exit=500000", CTL, "-c", path, "flush"])
    th.join(5)
    srv.close()
    eq(r.returncode, 1, "exit status (-13: killed by SIGPIPE)")
    eq(r.stderr.strip(), "idemrelayctl: no reply from the daemon on %s" % sock, "stderr")


@case(timeout=90, stores=LMDB_ONLY)
def test_second_daemon_on_one_store(t):
    """A second daemon started on the store of one that runs (another
    configuration naming the same store.path: other ports, another control
    socket) does not start: it would deliver every message queued at its
    start beside the first, each one twice. It exits 1 saying the store is in
    use, and the first delivers each message once."""
    sink = t.sink()
    sink.control(rcpt={"twice@example.com": "tempfail"})
    a = t.daemon(sink, {"retry": {"first": "1s", "max": "1s", "give_up": "1h"}})
    qid = submit_ok(a.port, "twice@example.com", make_msg(key="two-daemons"))
    a.wait_log(qid, "status=deferred")
    b = t.daemon(sink, {"store": {"path": a.store},
                        "retry": {"first": "1s", "max": "1s", "give_up": "1h"}}, start=False)
    with open(b.log_path, "ab") as logf:
        b.proc = subprocess.Popen([BIN, "-c", b.conf_path], cwd=b.dir,
                                  stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)
    b.stopped = False
    try:
        rc = b.proc.wait(timeout=15)
        b.stopped = True                # its exit is what the test wants
    except subprocess.TimeoutExpired:
        rc = None
    sink.control()
    a.wait_log(qid, "status=sent")
    time.sleep(3)
    eq(len(sink.accepted()), 1, "copies at the sink")
    eq(rc, 1, "the second daemon's exit status")
    check("store.path" in b.log() and "in use" in b.log(), "the second daemon says why:\n%s"
          % b.log())



@case(timeout=120)
def test_ctl_questions_while_daemon_silent(t):
    """While the daemon's control socket is there but nothing is served yet
    (a start binds it before it opens the store, which may take minutes: a
    migration, a compaction), stats and show, which only ask the daemon for
    its figures, wait 10 s for an answer, then show what the store says and
    that the daemon did not answer (exit 0); they do not hang, not even
    when requests fill the socket's backlog. The daemon here is a socket
    that listens and never accepts."""
    sink = t.sink()
    sink.control(rcpt={"silent@example.com": "tempfail"})
    d = ops_daemon(t, sink)
    qid = submit_ok(d.port, "silent@example.com", make_msg(key="silent-1"))
    d.wait_log(qid, "status=deferred")
    eq(d.stop(), 0, "exit status")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(d.conf["control"])
    srv.listen(1)
    waiting = []                        # and its backlog full: a connect waits too
    while True:
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.setblocking(False)
        try:
            c.connect(d.conf["control"])
        except BlockingIOError:
            c.close()
            break
        waiting.append(c)
    try:
        silent = "daemon       no answer from the daemon on %s" % d.conf["control"]
        for args, words in ((["stats"], ("queue        1 message", silent)),
                            (["show", qid], (qid + ": deferred",))):
            t0 = time.monotonic()
            r = run([CTL, "-c", d.conf_path] + args, timeout=40)
            took = time.monotonic() - t0
            eq(r.returncode, 0, "%s: exit status (%r)" % (args[0], r.stderr))
            check(all(w in r.stdout for w in words) and took < 25,
                  "%s in %.1f s: %r" % (args[0], took, r.stdout))
    finally:
        for c in waiting:
            c.close()
        srv.close()


@case(timeout=90, stores=LMDB_ONLY)
def test_control_socket_gone_after_failed_start(t):
    """A start that fails once its control socket is bound (it is bound
    before the store is opened) removes it: left there, mode 0600, with
    nothing listening, it told a non-root idemrelayctl 'cannot reach the
    daemon ... Permission denied: run as root' though no daemon ran. Two
    failures after the bind: the store cannot be opened (data.mdb is a
    directory), and another daemon has the store."""
    sink = t.sink()

    def failed_start(d, why):
        with open(d.log_path, "ab") as logf:
            d.proc = subprocess.Popen([BIN, "-c", d.conf_path], cwd=d.dir,
                                      stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)
        rc = d.proc.wait(timeout=20)
        d.stopped = True
        eq(rc, 1, "exit status, %s:\n%s" % (why, d.log()))
        check(not os.path.lexists(d.conf["control"]),
              "the control socket is left, %s:\n%s" % (why, d.log()))
        r = run([CTL, "-c", d.conf_path, "flush"])
        check(r.returncode == 1 and "the daemon is not running" in r.stderr,
              "idemrelayctl flush, %s: %d %r" % (why, r.returncode, r.stderr))

    a = t.daemon(sink, {"control": os.path.join(t.tmp, "a.sock")}, start=False)
    os.makedirs(os.path.join(a.store, "data.mdb"))
    failed_start(a, "the store cannot be opened")
    check("fatal" in a.log(), "the store's open failed:\n%s" % a.log())
    b = t.daemon(sink, {"control": os.path.join(t.tmp, "b.sock")})
    c = t.daemon(sink, {"store": {"path": b.store}, "control": os.path.join(t.tmp, "c.sock")},
                 start=False)
    failed_start(c, "another daemon has the store")
    check("in use by another idemrelay" in c.log(), "the second daemon says why:\n%s" % c.log())
    check(os.path.exists(b.conf["control"]), "the running daemon's socket is there")


def ctl_start(d, *args):
    """ctl_start - idemrelayctl --json ARGS on the daemon's config, running"""
    return subprocess.Popen([CTL, "-c", d.conf_path, "--json"] + list(args),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@case(timeout=120)
def test_ctl_daemon_stopped(t):
    """A daemon that is stopped (SIGSTOP) or hung takes no request and sends
    nothing: idemrelayctl gives up after 10 s of silence, where it waited for
    ever. Twenty holds at once (past the control socket's backlog: the last
    ones wait in connect()) and a flush exit 1 with 'no answer from the
    daemon ... nothing was done'; stats shows the store's figures (exit 0).
    Once the daemon goes on, none of the requests given up on is carried
    out: the message is not held."""
    sink = t.sink()
    sink.control(rcpt={"stopped@example.com": "tempfail"})
    d = ops_daemon(t, sink)
    qid = submit_ok(d.port, "stopped@example.com", make_msg(key="stopped-1"))
    d.wait_log(qid, "status=deferred")
    os.kill(d.proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        holds = [ctl_start(d, "hold", qid) for _ in range(20)]
        flush, stats = ctl_start(d, "flush"), ctl_start(d, "stats")
        outs = [p.communicate(timeout=40) for p in holds + [flush, stats]]
        took = time.monotonic() - t0
    finally:
        os.kill(d.proc.pid, signal.SIGCONT)
    for p, (out, err) in zip(holds + [flush], outs):
        check(p.returncode == 1 and "no answer from the daemon on %s in 10 s" % d.conf["control"]
              in err and "nothing was done" in err,
              "%s: exit %d %r" % (" ".join(p.args[3:]), p.returncode, err))
    eq(stats.returncode, 0, "stats: %r" % (outs[-1],))
    check(json.loads(outs[-1][0])["store"]["queued"] == 1, "stats: %r" % (outs[-1][0],))
    check(took < 30, "the requests took %.1f s" % took)
    time.sleep(3)                       # the daemon takes what waited in its backlog
    check(not d.log_lines(qid, "placed on hold"), "a hold given up on was carried out:\n%s"
          % "\n".join(d.log_lines(qid)))
    eq(ctl_json(d, "hold", qid)["held"], [qid], "a hold once the daemon goes on")


@case(timeout=120, stores=LMDB_ONLY)
def test_ctl_action_outlasts_silence(t):
    """An action the daemon takes longer than 10 s over (here its write waits
    for LMDB's writer lock, which mdb_load holds as a long action would keep
    the daemon busy) is waited for: the daemon sends a blank line every
    second while it serves it, and idemrelayctl gives up only after 10 s of
    silence. One stopped in the middle of an action (SIGSTOP after it
    began) is given up on after 10 s, saying it may have done part of it."""
    sink = t.sink()
    sink.control(rcpt={"long@example.com": "tempfail"})
    d = ops_daemon(t, sink)
    qid = submit_ok(d.port, "long@example.com", make_msg(key="long-1"))
    d.wait_log(qid, "status=deferred")

    def writer_lock():
        lock = subprocess.Popen(["mdb_load", d.store], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        lock.stdin.write(b"VERSION=3\nformat=bytevalue\ntype=btree\nHEADER=END\n")
        lock.stdin.flush()              # its write transaction is begun; no record follows
        time.sleep(1)
        check(lock.poll() is None, "mdb_load holds the writer lock")
        return lock

    lock = writer_lock()
    try:
        t0 = time.monotonic()
        hold = ctl_start(d, "hold", qid)
        time.sleep(13)
    finally:
        lock.kill()
        lock.wait()
    out, err = hold.communicate(timeout=20)
    took = time.monotonic() - t0
    eq(hold.returncode, 0, "hold over 13 s: %r" % err)
    eq(json.loads(out)["held"], [qid], "held")
    check(took > 12, "the hold took %.1f s: the writer lock did not hold it up" % took)

    lock = writer_lock()
    release = ctl_start(d, "release", qid)
    time.sleep(2)
    os.kill(d.proc.pid, signal.SIGSTOP)
    try:
        out, err = release.communicate(timeout=20)
    finally:
        lock.kill()
        lock.wait()
        os.kill(d.proc.pid, signal.SIGCONT)
    check(release.returncode == 1 and "began and then said nothing for 10 s" in err,
          "release stopped in the middle: exit %d %r" % (release.returncode, err))
    d.wait_log(qid, "released from hold")


@case(timeout=120, stores=LMDB_ONLY)
def test_ctl_action_outlasts_a_stop(t):
    """A stop (SIGTERM) while an action is served waits for it, and the
    blank lines go on until its answer: idemrelayctl waits and says what was
    done (review D: the pulses ended at the stop, and after 10 s of silence
    idemrelayctl said 'began and then said nothing for 10 s' and exit 1
    while the daemon carried the hold out). The hold waits for LMDB's
    writer lock, held by mdb_load for 13 s; the SIGTERM comes 2 s in."""
    sink = t.sink()
    sink.control(rcpt={"long@example.com": "tempfail"})
    d = ops_daemon(t, sink)
    qid = submit_ok(d.port, "long@example.com", make_msg(key="long-1"))
    d.wait_log(qid, "status=deferred")
    lock = subprocess.Popen(["mdb_load", d.store], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        lock.stdin.write(b"VERSION=3\nformat=bytevalue\ntype=btree\nHEADER=END\n")
        lock.stdin.flush()              # its write transaction is begun; no record follows
        time.sleep(1)
        check(lock.poll() is None, "mdb_load holds the writer lock")
        hold = ctl_start(d, "hold", qid)
        time.sleep(2)
        d.proc.send_signal(signal.SIGTERM)
        time.sleep(11)
    finally:
        lock.kill()
        lock.wait()
    out, err = hold.communicate(timeout=20)
    eq(hold.returncode, 0, "hold across a stop: %r" % err)
    eq(json.loads(out)["held"], [qid], "held")
    eq(d.stop(timeout=20), 0, "the daemon's exit status")
    check(d.log_lines(qid, "placed on hold"), "the hold is logged")
