"""A full store (issue 11 items 2 and 8): acceptance is refused while every
outcome of what is queued can still be recorded, and nothing accepted is lost
or sent twice when the queue drains, in both upstream.ambiguous modes."""

import json
import os
import re
import smtplib
import threading
import time

from cases_ops import ctl, ctl_json, ops_daemon
from harness import LMDB_ONLY
from harness import (BIN, case, check, eq, expect_reply, make_msg, received_qids, run, submit,
                     submit_ok, wait_until)

CTL = os.path.join(os.path.dirname(os.path.abspath(BIN)), "idemrelayctl")
SUBJECT_RE = re.compile(rb"^Subject: full (\S+)\r$", re.M)
BODY = "".join("line %03d of a message that fills the store, and then some more\r\n" % i
               for i in range(40))         # ~2.6 KB


def ctl_stats(d):
    """ctl_stats - idemrelayctl --json stats: the store's figures"""
    r = run([CTL, "-c", d.conf_path, "--json", "stats"])
    check(r.returncode == 0, "idemrelayctl stats: exit %d: %s" % (r.returncode, r.stderr))
    return json.loads(r.stdout)["store"]


def by_key(sink):
    """by_key - what the sink received, by the key in each Subject"""
    out = {}
    for r in sink.accepted():
        m = SUBJECT_RE.search(r["data"])
        check(m, "a message upstream without a test subject: %r" % r["data"][:300])
        out.setdefault(m.group(1).decode(), []).append(r)
    return out


def fill(d, n_clients, refusals_each, got, tag):
    """fill - n_clients submit keyed messages until each has seen
    refusals_each 452 4.3.1 replies; got[key] = QID of every 250"""
    errors, lock = [], threading.Lock()

    def client(cid):
        refused, i = 0, 0
        deadline = time.monotonic() + 60
        while refused < refusals_each:
            if time.monotonic() > deadline:
                errors.append("client %d: %d refusals in 60 s" % (cid, refused))
                return
            key = "%s-%d-%04d" % (tag, cid, i)
            i += 1
            msg = make_msg(key=key, subject="full %s" % key, body=BODY)
            try:
                r = submit(d.port, "full%d@example.com" % cid, msg, timeout=15)
            except (OSError, smtplib.SMTPException) as e:
                errors.append("%s: %r" % (key, e))
                return
            if r.data[0] == 250:
                with lock:
                    got[key] = r.qid
            else:
                expect_reply(r.data, 452, "4.3.1", "%s into a full store" % key)
                refused += 1
                time.sleep(0.05)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(n_clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(90)
    check(not errors, "clients failed:\n  " + "\n  ".join(errors[:10]))


def store_full(t, ambiguous):
    """The store fills up under load from four clients while the upstream
    refuses everything (the queue only grows, and every deferral is a write):
    452 4.3.1 once the reserve is reached. kill -9 and a restart while full;
    then the upstream accepts, the queue drains, and every message that got
    250 reaches it exactly once; the store empties and acceptance resumes."""
    sink = t.sink(greeting=421)
    d = t.daemon(sink, {"store": {"map_size": "4M", "map_size_max": "4M"},
                        "limits": {"message_size": "1M"},
                        "upstream": {"ambiguous": ambiguous}})
    got = {}
    fill(d, 4, 3, got, "a")
    check(len(got) > 100, "only %d messages fitted into a 4 MB map" % len(got))
    d.wait_log("status=deferred")
    check(d.running(), "the daemon died on a full store")

    d.kill9()
    d.start()
    r = submit(d.port, "full@example.com", make_msg(key="after-restart", subject="full x",
                                                     body=BODY))
    expect_reply(r.data, 452, "4.3.1", "a submission into the full store after kill -9")
    time.sleep(2.5)                         # deferrals of the whole queue after the restart

    sink.control()
    wait_until(lambda: len(by_key(sink)) >= len(got), 60,
               "%d messages at the sink" % len(got))
    time.sleep(3)                           # resends, if anything is sent twice
    recs = by_key(sink)
    unknown = sorted(set(recs) - set(got))
    check(not unknown, "refused messages reached the sink: %s" % unknown[:5])
    dups = ["%s x%d" % (k, len(v)) for k, v in sorted(recs.items()) if len(v) > 1]
    lost = sorted(k for k in got if k not in recs)
    wrong = ["%s: got %s, relayed as %s" % (k, q, received_qids(recs[k][0]["data"]))
             for k, q in sorted(got.items()) if k in recs
             and received_qids(recs[k][0]["data"]) != [q]]
    check(not dups and not lost and not wrong,
          "%d accepted: %d sent twice %s, %d lost %s, %d under another QID %s"
          % (len(got), len(dups), dups[:5], len(lost), lost[:5], len(wrong), wrong[:3]))
    check(not d.log_lines("cannot record the delivery outcome"),
          "outcomes not recorded:\n" + "\n".join(d.log_lines("cannot record")[:5]))
    check(not d.log_lines("status=unconfirmed"), "deliveries logged unconfirmed")
    wait_until(lambda: ctl_stats(d)["queued"] == 0, 20, "an empty queue")
    submit_ok(d.port, "full@example.com", make_msg(key="after-drain", subject="full y",
                                                    body=BODY))


@case(timeout=240, stores=LMDB_ONLY)
def test_store_full_assume_delivered(t):
    store_full(t, "assume-delivered")


@case(timeout=240, stores=LMDB_ONLY)
def test_store_full_retry(t):
    store_full(t, "retry")


@case(timeout=180, stores=LMDB_ONLY)
def test_store_grows_under_load(t):
    """A 4 MB start map filled under load from four clients while the
    upstream holds everything: the map grows by itself past its start size
    and nothing is refused; then everything is delivered once."""
    sink = t.sink(greeting=421)
    d = t.daemon(sink, {"store": {"map_size": "4M"}, "limits": {"message_size": "1M"}})
    got, errors, lock = {}, [], threading.Lock()

    def client(cid):
        for i in range(300):            # ~3 MB each: three times the start map in all
            key = "g-%d-%04d" % (cid, i)
            msg = make_msg(key=key, subject="full %s" % key, body=BODY)
            try:
                r = submit(d.port, "grow%d@example.com" % cid, msg, timeout=15)
            except (OSError, smtplib.SMTPException) as e:
                errors.append("%s: %r" % (key, e))
                return
            if r.data[0] != 250:
                errors.append("%s: %r" % (key, r.data))
                return
            with lock:
                got[key] = r.qid

    threads = [threading.Thread(target=client, args=(c,)) for c in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    check(not errors, "refused while the map could grow:\n  " + "\n  ".join(errors[:5]))
    eq(len(got), 1200, "messages accepted")
    check(d.log_lines("store: map grown"), "no growth logged")
    s = ctl_stats(d)
    check(s["map_size"] > 4 << 20, "map_size %d: not past the 4 MB start" % s["map_size"])
    check(s["map_ceiling"] >= s["map_size"] and 0 < s["map_used"] < s["map_size"]
          and 0 <= s["full_percent"] <= 100,
          "ceiling and fullness: %r" % s)
    sink.control()
    wait_until(lambda: len(by_key(sink)) >= len(got), 90, "%d messages at the sink" % len(got))
    time.sleep(2)
    eq(sum(len(v) for v in by_key(sink).values()), len(got), "copies at the sink")


@case(timeout=180, stores=LMDB_ONLY)
def test_store_ceiling(t):
    """A start map that may grow to 34 MB: it grows, then 452 4.3.1 at the
    ceiling, and the log warned before (80% and 95% of the ceiling)."""
    sink = t.sink(greeting=421)
    d = t.daemon(sink, {"store": {"map_size": "4M", "map_size_max": "34M"},
                        "limits": {"message_size": "1M"}})
    big = "".join("%05d %s\r\n" % (i, "x" * 90) for i in range(1000))    # ~100 KB
    got = {}
    for i in range(600):
        r = submit(d.port, "ceil@example.com", make_msg(key="c-%d" % i, subject="full c-%d" % i,
                                                         body=big), timeout=15)
        if r.data[0] != 250:
            expect_reply(r.data, 452, "4.3.1", "message %d at the ceiling" % i)
            break
        got[i] = r.qid
    else:
        raise AssertionError("600 messages of 100 KB and no 452 at a 34 MB ceiling")
    check(len(got) > 100, "only %d messages of 100 KB under a 34 MB ceiling" % len(got))
    d.wait_log("store: map grown")
    d.wait_log("store: 80% full")
    d.wait_log("store: 95% full")
    s = ctl_stats(d)
    check(s["full_percent"] > 80, "full_percent %r at the ceiling" % s["full_percent"])


def fill_to_452(d, body, tag, limit):
    """fill_to_452 - submit messages of body to fill@example.com until 452 4.3.1; how many fitted"""
    for i in range(limit):
        r = submit(d.port, "fill@example.com", make_msg(key="%s-%d" % (tag, i), body=body),
                   timeout=15)
        if r.data[0] != 250:
            expect_reply(r.data, 452, "4.3.1", "%s message %d into the store" % (tag, i))
            return i
    raise AssertionError("%d %s messages and no 452 in a 4 MB map" % (limit, tag))


@case(timeout=120, stores=LMDB_ONLY)
def test_store_full_bounce_with_its_notice(t):
    """A recipient bounced (550) while the store is full to its delivery
    reserve, where submissions get 452: its non-delivery notice is part of
    the bounce's outcome, not a submission, and is queued into that reserve
    (as Postfix's queue_minfree holds back incoming mail only), so the
    message bounces at once and the notice reaches the sender while the
    fillers still fill the store."""
    sink = t.sink(greeting=421)             # everything held until the store is full
    d = ops_daemon(t, sink, {"store": {"map_size": "4M", "map_size_max": "4M"},
                             "limits": {"message_size": "1M"},
                             "retry": {"first": "1s", "max": "2s", "give_up": "5d"}})
    page = "".join("line %03d of the bounced message, kept whole in its notice\r\n" % i
                   for i in range(600))     # ~36 KB: its notice takes more than the last filler
    qid = submit_ok(d.port, "permfail-nb@example.com",
                    make_msg(key="notice-wait", subject="bounce me", body=page))
    fill_to_452(d, "x" * 500000 + "\r\n", "big", 20)
    fill_to_452(d, BODY, "small", 2000)
    sink.control(rcpt={"fill@example.com": "tempfail"})     # the store stays full
    ctl(d, "flush")
    notice = sink.wait_count(1, lambda r: r["mail_from"] == "" and
                             r["to"] == ["sender@example.org"], timeout=60,
                             what="the notice at the sender")[0]
    check(b"permfail-nb@example.com" in notice["data"] and b"5.1.1" in notice["data"],
          "the notice does not name the recipient and its status:\n%r" % notice["data"][:2000])
    d.wait_log(qid, "to=<permfail-nb@example.com>", "dsn=5.1.1, status=bounced (550 5.1.1")
    check(not d.log_lines("not queued"),
          "a notice refused at the reserve:\n" + "\n".join(d.log_lines("not queued")[:3]))
    wait_until(lambda: not ctl_json(d, "show", qid)["messages"][0]["queued"], 20,
               "the bounced message out of the queue")


def accepted_again(d):
    """accepted_again - a submission answered 250 (True) or 452 4.3.1 (False)"""
    r = submit(d.port, "after@example.com", make_msg(key="after-drain-%f" % time.time(),
                                                      body=BODY), timeout=15)
    if r.data[0] != 250:
        expect_reply(r.data, 452, "4.3.1", "a submission while the store drains")
    return r.data[0] == 250


@case(timeout=150, stores=LMDB_ONLY)
def test_store_full_drains_past_give_up(t):
    """A store full to its delivery reserve (submissions get 452) after an
    upstream outage: once what is queued is past retry.give_up, each message
    bounces with its notice, queued into the reserve, so the big messages
    leave, the store drains and submissions get 250 again while the upstream
    is still down. Were the notices held to the reserve like submissions,
    nothing could ever bounce: the queue and the 452s would stay until the
    upstream returned. A notice may not use the reserve's floor, kept for
    outcomes, and the notices of one batch all come before its originals
    leave (their outcomes commit at the batch's end): those that find no
    room leave their recipients deferred (dsn=4.3.0), never bounced without
    their notice, and the next attempt bounces them with it."""
    sink = t.sink(greeting=421)             # the outage: nothing leaves
    d = ops_daemon(t, sink, {"store": {"map_size": "4M", "map_size_max": "4M"},
                             "limits": {"message_size": "1M"},
                             "retry": {"first": "1h", "max": "1h", "give_up": "2s"}})
    n_big = fill_to_452(d, "x" * 500000 + "\r\n", "big", 20)
    n_fill = n_big + fill_to_452(d, BODY, "small", 2000)
    time.sleep(2.5)                         # everything queued is past retry.give_up
    ctl(d, "flush")
    wait_until(lambda: accepted_again(d), 60, "a submission answered 250 again")
    ctl(d, "flush")                         # those whose notice found no room: bounced now
    wait_until(lambda: len(d.log_lines("to=<fill@example.com>", "dsn=4.4.7, status=bounced"))
               >= n_fill, 60, "all %d fillers bounced" % n_fill)
    bounced = d.log_lines("to=<fill@example.com>", "dsn=4.4.7, status=bounced")
    check(len(d.log_lines("sender non-delivery notification: ")) >= len(bounced),
          "a bounce without its notice")
    for line in d.log_lines("to=<fill@example.com>", "dsn=4.3.0, status=deferred (sender"
                            " non-delivery notification not queued: "):
        qid = line.split(": to=<")[0].split()[-1]
        check(any(qid + ": to=<" in b for b in bounced),
              "%s deferred for its notice and never bounced with it" % qid)
