"""Power cuts and failed syncs with the store on tests/powerfs (SPEC section 4:
no 250 before the message is durable; section 5: nothing sent twice).

powerfs keeps every write in memory until the file is synced; a cut throws away
what was not (tests/powerfs/powerfs.c says what it models). Clients retry each
key until they get a 250, as SPEC asks of them, while the power goes at random
moments; every 250 must survive with its QID and reach the sink exactly once.
A failed sync must cost no 250 and the daemon must serve again by itself; and
a commit whose sync failed but which the disk kept whole may come back at the
next open only as one message under one QID, which a retry of its key gets.
"""

import itertools
import random
import re
import smtplib
import threading
import time

from harness import LMDB_ONLY
from harness import case, check, eq, make_msg, received_qids, submit, submit_ok, wait_until
from cases_nodes import check_exactly_once
from cases_ops import ctl, ctl_json, ops_daemon

SUBJECT_RE = re.compile(rb"^Subject: cut (\S+)\r$", re.M)


class Load:
    """Retrying clients: each sends its keys in turn, each until it gets a 250,
    until finish() (the key in progress is still seen through), or until it has
    sent per_client keys if that is given. Every 250 is kept (a key may get
    several, from retries after a cut): all of one key's must name one QID. A
    client in quitters gives a key up at its first 452 (its message must then
    never reach the sink). busy() is how many clients are in a transaction,
    between their EHLO and the reply to their DATA; each attempt is kept with
    the monotonic times it began and ended and whether it got a 250
    (under_way())."""

    def __init__(self, d, n_clients, prefix, per_client=None, quitters=()):
        self.d = d
        self.quitters = quitters
        self.abandoned = []     # keys given up after a 452
        self.got = {}           # key -> the QIDs of every 250 it got
        self.refused = {}       # reply code other than 250 -> count
        self.attempts = []      # (began, ended, got a 250) of each attempt
        self.in_txn = 0         # clients between EHLO and the DATA reply
        self.errors = []
        self.lock = threading.Lock()
        self.stop = False
        self.threads = [threading.Thread(target=self.client, args=(c, per_client, prefix))
                        for c in range(n_clients)]
        for th in self.threads:
            th.start()

    def msg(self, key):
        return make_msg(key=key, subject="cut %s" % key, body="payload of %s\r\n" % key)

    def attempt(self, cid, key):
        """attempt - one connection, one submission of key, counted in busy()
        until its DATA reply (not through its QUIT)"""
        s = smtplib.SMTP("127.0.0.1", self.d.port, timeout=10)
        try:
            s.ehlo("client.test")
            with self.lock:
                self.in_txn += 1
            try:
                return submit(self.d.port, "cut%d@example.com" % cid, self.msg(key), smtp=s)
            finally:
                with self.lock:
                    self.in_txn -= 1
        finally:
            try:
                s.quit()
            except Exception:
                s.close()

    def client(self, cid, n, prefix):
        for i in (range(n) if n else itertools.count()):
            if self.stop:
                return
            key = "%s-%d-%03d" % (prefix, cid, i)
            deadline = time.monotonic() + 40
            while True:
                began = time.monotonic()
                try:
                    r = self.attempt(cid, key)
                    if r.code == 250:
                        with self.lock:
                            self.got.setdefault(key, []).append(r.qid)
                            self.attempts.append((began, time.monotonic(), True))
                        break
                    with self.lock:
                        self.attempts.append((began, time.monotonic(), False))
                        self.refused[r.code] = self.refused.get(r.code, 0) + 1
                        if r.code == 452 and cid in self.quitters:
                            self.abandoned.append(key)
                            break
                except (OSError, EOFError, smtplib.SMTPException) as e:
                    with self.lock:
                        self.attempts.append((began, time.monotonic(), False))
                        self.refused[type(e).__name__] = self.refused.get(type(e).__name__, 0) + 1
                if time.monotonic() > deadline:
                    self.errors.append("%s: no 250 within 40s" % key)
                    return
                time.sleep(0.05)

    def count(self):
        with self.lock:
            return len(self.got)

    def busy(self):
        with self.lock:
            return self.in_txn

    def under_way(self, at):
        """under_way - (attempts under way at time at, those of them that got no 250)"""
        with self.lock:
            span = [ok for began, ended, ok in self.attempts if began < at <= ended]
        return len(span), span.count(False)

    def finish(self, timeout=60):
        self.stop = True
        for th in self.threads:
            th.join(timeout)
        check(not any(th.is_alive() for th in self.threads), "clients still running")


def verify(t, d, sink, load):
    """verify - every key got one QID; a retry now gets it again; the sink has
    each key once under that QID (or the daemon logged it unconfirmed)"""
    check(not load.errors, "clients gave up:\n  " + "\n  ".join(load.errors[:10]))
    total = len(load.got)
    print("%d keys answered 250" % total)
    split = {k: q for k, q in load.got.items() if len(set(q)) != 1}
    check(not split, "keys answered 250 with different QIDs: %s" % list(split.items())[:5])
    qids = {k: q[0] for k, q in load.got.items()}
    for key, qid in sorted(qids.items()):
        eq(submit_ok(d.port, "cut%s@example.com" % key.split("-")[-2], load.msg(key)), qid,
           "QID of %s retried after the cuts" % key)

    def copies():
        by_key = {}
        for r in sink.accepted():
            m = SUBJECT_RE.search(r["data"])
            check(m, "a message upstream that nobody sent: %r" % r["data"][:300])
            by_key.setdefault(m.group(1).decode(), []).append(r)
        return by_key

    def unconfirmed(qid, log):
        return any(qid in l and "status=unconfirmed" in l for l in log.splitlines())

    def waiting():
        """waiting - keys not at the sink and not logged unconfirmed (never to be sent)"""
        there, log = copies(), d.log()
        return [k for k, q in qids.items() if k not in there and not unconfirmed(q, log)]

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and waiting():
        time.sleep(0.3)
    time.sleep(2)           # resends, if any, of what was deferred
    by_key = copies()
    log = d.log()
    dups, lost, wrong = [], [], []
    for key, qid in sorted(qids.items()):
        recs = by_key.get(key, [])
        if len(recs) > 1:
            dups.append("%s (%s) x%d" % (key, qid, len(recs)))
        elif not recs:
            if not unconfirmed(qid, log):
                lost.append("%s (%s)" % (key, qid))
        elif received_qids(recs[0]["data"]) != [qid]:
            wrong.append("%s: got %s, relayed as %s" % (key, qid, received_qids(recs[0]["data"])))
    check(not set(by_key) - set(qids), "keys nobody got a 250 for reached the sink: %s"
          % sorted(set(by_key) - set(qids))[:5])
    check(not dups, "delivered more than once: %s" % dups[:10])
    check(not lost, "answered 250, never delivered, not logged unconfirmed: %s" % lost[:10])
    check(not wrong, "relayed under another QID than the client got: %s" % wrong[:10])
    return qids


@case(timeout=120, stores=LMDB_ONLY)
def test_powercut_under_load(t):
    """Four clients retry their keys until 250 while the power goes four times
    at random moments (the daemon killed -9, powerfs's unsynced writes gone);
    the store opens every time, and every 250 survives with its QID. The
    clients send until the last cut is done; every cut must come while a
    submission is under way, and some cut must break one (a cut after the load
    has ended tests nothing)."""
    rnd = random.Random()
    seed = rnd.randrange(1 << 30)
    rnd.seed(seed)
    print("seed %d" % seed)
    fs = t.powerfs()
    sink = t.sink()
    d = t.daemon(sink, {"store": {"path": fs.mnt + "/store"}, "upstream": {"connections": 4}})
    load = Load(d, 4, "pc")
    kills = []
    try:
        for round_ in range(4):
            want = load.count() + rnd.randrange(5, 25)
            wait_until(lambda: load.count() >= want or load.errors, 30,
                       "%d keys answered before cut %d" % (want, round_ + 1))
            time.sleep(rnd.random() * 0.2)
            # not in the moment after a group commit's replies, when every client may
            # be between its 250 and its next EHLO
            wait_until(lambda: load.busy() or load.errors, 10,
                       "a submission in flight for cut %d" % (round_ + 1), interval=0.0002)
            kills.append(time.monotonic())
            d.kill9()
            fs.cut()
            d.start(timeout=20)
    finally:
        load.finish()
    print("%d cuts, refusals and errors by kind: %r" % (fs.cuts, load.refused))
    # (a 250 the daemon wrote just before its death may still be read after it)
    flight = [load.under_way(at) for at in kills]
    print("submissions in flight at each cut, and those it cut: %r" % flight)
    check(all(n for n, _ in flight), "a cut came with no submission in flight: %r" % flight)
    check(any(c for _, c in flight), "no cut broke a submission: %r" % flight)
    verify(t, d, sink, load)
    replays = d.log_lines("replayed from the journal")
    print("journal replays at open: %d" % len(replays))


@case(timeout=120, stores=LMDB_ONLY)
def test_failed_sync_under_load(t):
    """A sync fails under load (powerfs drops data.mdb's unsynced writes, as
    Linux may): the batch in flight is answered 452 4.3.1, the daemon goes
    on serving 250s by itself, and after a power cut later every 250 is
    still there with its QID, none delivered twice."""
    fs = t.powerfs()
    sink = t.sink()
    d = t.daemon(sink, {"store": {"path": fs.mnt + "/store"}, "upstream": {"connections": 4}})
    # keys enough to last both rounds on a fast machine: a load that has run out makes
    # no commit, and so no sync to fail (the clients stop at finish())
    load = Load(d, 4, "fs", per_client=400, quitters=(3,))
    try:
        for round_ in range(2):
            base = load.count()
            wait_until(lambda: load.count() >= base + 10 or load.errors, 30,
                       "10 more keys answered before failed sync %d" % (round_ + 1))
            # the sync that fails may be a commit of delivery writes alone (its marks
            # and outcomes wait and are written again, nobody is owed a 452): fail
            # another, up to 5, until one carried submissions
            for _ in range(5):
                refused = load.refused.get(452, 0)
                fails = len(fs.log().splitlines())
                fs.fail_next_sync()
                wait_until(lambda: len(fs.log().splitlines()) > fails, 10, "the sync to fail")
                # served again without a restart: more 250s after the failure
                base = load.count()
                wait_until(lambda: load.count() >= base + 10 or load.errors, 30,
                           "10 keys answered after failed sync %d" % (round_ + 1))
                if load.refused.get(452, 0) > refused:
                    break
            check(d.running(), "the daemon died after a failed sync")
            check(len(d.log_lines("reopened from what is durable after a failed sync")) > round_,
                  "served after failed sync %d without reopening the store" % (round_ + 1))
            d.kill9()
            fs.cut()
            d.start(timeout=20)
    finally:
        load.finish()
    print("refusals and errors by kind: %r" % load.refused)
    print("powerfs: %s" % fs.log().strip().replace("\n", " | "))
    check(load.refused.get(452, 0) >= 1, "no 452 was seen after a failed sync: %r" % load.refused)
    print("keys given up after a 452: %s" % load.abandoned)
    verify(t, d, sink, load)     # an abandoned key at the sink fails it: nobody got a 250


@case(timeout=90, stores=LMDB_ONLY)
def test_failed_sync_kept_by_disk(t):
    """The one case where a 452 is not the end of a message: its commit's
    sync wrote everything yet failed, the disk died before the record could
    be voided, and the daemon died before it could reopen. The next open
    then replays the commit (it cannot be told from one whose meta page was
    lost): the message is queued and delivered once, and a retry of its key
    is answered 250 with its QID. Every 250 given before survives."""
    fs = t.powerfs()
    sink = t.sink()
    d = t.daemon(sink, {"store": {"path": fs.mnt + "/store"}})
    before = {}
    for i in range(5):
        key = "kept-%d" % i
        before[key] = submit_ok(d.port, "kept@example.com",
                                make_msg(key=key, subject="cut %s" % key, body="%s\r\n" % key))
    sink.wait_count(5)
    # quiet: every outcome recorded, so that the dying sync is the submission's
    wait_until(lambda: len(d.log_lines(": removed")) >= 5, 15, "5 outcomes recorded")
    time.sleep(0.5)
    fs.die()
    msg = make_msg(key="kept-failed", subject="cut kept-failed", body="kept-failed\r\n")
    r = submit(d.port, "kept@example.com", msg)
    eq(r.code, 452, "reply to the submission whose sync failed")
    d.wait_log("cannot reopen after a failed sync")
    r2 = submit(d.port, "kept@example.com", make_msg(key="kept-later", body="later\r\n"))
    eq(r2.code, 452, "reply while the store cannot be reopened")
    d.kill9()
    fs.cut()
    d.start(timeout=20)
    dying = [l for l in fs.log().splitlines() if "written but failed" in l]
    check(dying, "powerfs did not fail a sync: %r" % fs.log())
    time.sleep(2)
    kept = [rec for rec in sink.accepted() if b"kept-failed" in rec["data"]]
    r = submit(d.port, "kept@example.com", msg)
    eq(r.code, 250, "a retry of the failed key")
    if kept:                # the failed commit was replayed: SPEC's one exception
        print("the failed commit was replayed and its message delivered")
        eq(len(kept), 1, "copies of the message whose commit failed")
        eq(r.qid, received_qids(kept[0]["data"])[0], "QID a retry of the failed key gets")
        check("(duplicate)" in r.text, "the retry is answered as a duplicate: %r" % r.text)
    else:                   # another sync took the failure: the message was never kept
        print("the dying sync was not the submission's: nothing to replay")
        sink.wait_count(6, timeout=20, what="the retried message upstream")
    for key, q in before.items():
        eq(submit_ok(d.port, "kept@example.com",
                     make_msg(key=key, subject="cut %s" % key, body="%s\r\n" % key)), q,
           "QID of %s after the dead disk and the cut" % key)
    time.sleep(2)
    eq(len([rec for rec in sink.accepted() if b"kept-failed" in rec["data"]]), 1,
       "copies of the failed message after its retry")
    eq(len(sink.accepted()), 6, "messages upstream")
    check(not any(b"kept-later" in rec["data"] for rec in sink.accepted()),
          "a submission refused while the store was broken reached the sink")


@case(timeout=90, stores=LMDB_ONLY)
def test_mark_refused_rest_uncharged(t):
    """LMDB: a batch of three in one session, the first one's inflight mark refused
    (the sync of its commit fails: powerfs, armed while the sink holds its 354): that
    one gets no dot and is deferred; the two after it, which never reached the
    upstream, are not charged for it (deferred "delivery temporarily suspended") and
    are sent within seconds once the store is reopened, though retry.first is an hour,
    their attempt counts as they were; a flush then delivers the first, each once.
    PostgreSQL's case is cases_nodes.py's test_nodes_mark_refused_rest_uncharged."""
    fs = t.powerfs()
    sink = t.sink(default="tempfail")
    d = ops_daemon(t, sink, {"store": {"path": fs.mnt + "/store"},
                             "upstream": {"connections": 1}})
    qids = [submit_ok(d.port, "mr%d@example.com" % i, make_msg(key="mark-refused-%d" % i))
            for i in range(3)]
    for q in qids:
        d.wait_log(q, "status=deferred")           # an attempt: the sink's 451
    sink.control(data_delay=2)
    ctl(d, "flush")                                 # the three due at once: one batch
    wait_until(lambda: sink.events("data-delay"), 15, "the first DATA of the batch")
    fs.fail_next_sync()
    sink.control()
    refused = d.wait_log("could not record the inflight mark", timeout=15)[0]
    first = [q for q in qids if q in refused]
    eq(len(first), 1, "the message whose mark failed: %s" % refused)
    rest = [q for q in qids if q not in first]
    try:
        check_exactly_once([sink], rest, timeout=20, settle=0.5,
                           what="the rest of the batch, with retry.first = 1h")
        for q in rest:
            lines = d.log_lines(q, "status=deferred")
            eq(len(lines), 2, "deferral lines of %s: %r" % (q, lines))
            check("delivery temporarily suspended: not sent: the session with" in lines[1]
                  and "inflight mark of %s could not be recorded" % first[0] in lines[1],
                  "the deferral for another's mark says so: %s" % lines[1])
        ctl(d, "flush")
        check_exactly_once([sink], qids, timeout=30, what="after the refused mark")
        # the sink's 451, then: the refused mark and the delivery (first); the delivery (rest)
        eq({q: ctl_json(d, "show", q)["messages"][0]["attempts"] for q in qids},
           {q: 3 if q in first else 2 for q in qids}, "attempts counted")
    finally:
        print("\n".join(d.log_lines("status=")))
        print("powerfs: %s" % fs.log().strip().replace("\n", " | "))
    eq(d.log_lines("status=unconfirmed"), [], "delivered-unconfirmed lines")
