#!/usr/bin/env python3
"""
NAME
    run.py - run idemrelay's end-to-end tests against the real daemon

SYNOPSIS
    python3 tests/e2e/run.py [-j JOBS] [-v] [--keep] [--list] [NAME|GLOB|PART|FILE ...]
    E2E_STORE=postgresql python3 tests/e2e/run.py [...]

DESCRIPTION
    Runs the test cases in tests/e2e/cases_*.py, each in its own process
    (its own process group, its own temporary directory, its own
    bin/idemrelay and upstream sink on free 127.0.0.1 ports), JOBS at a
    time (default 4), each within its own deadline. A failing test
    prints its traceback, the daemon's log and the sink's log.

    A FILE (cases_accept, or cases_accept.py) selects every case in it.

    E2E_STORE picks the store backend of every daemon: lmdb (the default)
    or postgresql. Cases run only on the backends they are marked for
    (harness.case(stores=...)); the others are reported skipped. On
    postgresql one cluster (tests/pg/cluster.py) serves the whole run and
    each test gets a fresh database on it; the cluster that
    tests/pg/cluster.py run set up (IDEMRELAY_PG_ADMIN) if there is one,
    else one started here and removed at the end.

    Ends with "N passed, N failed" (", N skipped" when any were) and
    exits 1 if any test failed. IDEMRELAY_BIN overrides bin/idemrelay;
    E2E_TMP sets where temporary directories go.
"""

import argparse
import fnmatch
import glob
import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness  # noqa: E402

EXIT_PASS, EXIT_FAIL, EXIT_SKIP = 0, 1, 3


def load_cases():
    for path in sorted(glob.glob(os.path.join(HERE, "cases_*.py"))):
        importlib.import_module(os.path.basename(path)[:-3])
    return harness.CASES


def select(cases, names):
    if not names:
        return list(cases)
    out = []
    for n in names:
        hits = [c for c in cases if c == n or c == "test_" + n]
        hits = hits or [c for c in cases if cases[c].__module__ == n.rsplit(".py", 1)[0]]
        hits = hits or [c for c in cases if fnmatch.fnmatch(c, n) or n in c]
        if not hits:
            sys.exit("run.py: no test matches %r (try --list)" % n)
        out.extend(h for h in hits if h not in out)
    return out


def child(name, tmp):
    """child - run one test in this process; exit 0 pass, 1 fail, 3 skip"""
    fn = load_cases()[name]
    t = harness.T(name, tmp)

    def on_term(signum, frame):
        raise TimeoutError("test %s ran out of time (deadline %ds)" % (name, fn.timeout))

    signal.signal(signal.SIGTERM, on_term)
    rc = EXIT_PASS
    try:
        fn(t)
        t.finish()
    except harness.Skip as e:
        print("skipped: %s" % e)
        rc = EXIT_SKIP
    except BaseException:
        traceback.print_exc(file=sys.stdout)
        sys.stdout.flush()
        try:
            t.cleanup()
        except BaseException:
            pass
        t.dump_logs(sys.stdout)
        rc = EXIT_FAIL
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        t.cleanup()
        sys.stdout.flush()
    os._exit(rc)


def reap_clusters(tmp):
    """reap_clusters - the private PostgreSQL clusters a test noted (t.pg_cluster()),
    killed and removed if it could not do so itself: pg_ctl starts the server in a
    session of its own, out of reach of killpg"""
    try:
        with open(os.path.join(tmp, "pg-clusters")) as f:
            bases = f.read().split()
    except FileNotFoundError:
        return
    for b in bases:
        harness.pgcluster.reap(b)
        shutil.rmtree(b, ignore_errors=True)


def shared_cluster(cases, todo):
    """shared_cluster - on postgresql, the run's cluster for the tests in todo that
    start a daemon: the one tests/pg/cluster.py run made, or a new one (returned,
    for main to destroy). E2E_PG_ADMIN tells the test processes where it is."""
    if harness.STORE != "postgresql" or not any(cases[n].needs_daemon for n in todo):
        return None
    if os.environ.get("IDEMRELAY_PG_ADMIN"):
        os.environ["E2E_PG_ADMIN"] = os.environ["IDEMRELAY_PG_ADMIN"]
        os.environ["E2E_PG_LOG"] = os.environ.get("IDEMRELAY_PG_LOG", "")
        return None
    pg = harness.pgcluster.Cluster("shared")
    try:
        pg.start()
    except BaseException:
        pg.destroy()
        raise
    os.environ["E2E_PG_ADMIN"] = pg.admin_url()
    os.environ["E2E_PG_LOG"] = pg.log_path
    print("run.py: PostgreSQL on 127.0.0.1:%d for this run (%s)" % (pg.port, pg.base), flush=True)
    return pg


def run_one(name, fn, base, verbose, lock):
    """run_one - a test in a child process with a deadline; returns (status, secs)"""
    tmp = os.path.join(base, name)
    os.makedirs(tmp)
    out_path = os.path.join(tmp, "output.txt")
    start = time.monotonic()
    with open(out_path, "wb") as out:
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", name,
                              "--tmp", tmp], stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        timed_out = False
        try:
            rc = p.wait(fn.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            p.send_signal(signal.SIGTERM)   # the child dumps its logs and cleans up
            try:
                rc = p.wait(10)
            except subprocess.TimeoutExpired:
                rc = None
        try:
            os.killpg(p.pid, signal.SIGKILL)    # whatever the test left behind
        except ProcessLookupError:
            pass
        if rc is None:
            rc = p.wait()
        reap_clusters(tmp)
    secs = time.monotonic() - start
    status = {EXIT_PASS: "PASS", EXIT_SKIP: "SKIP"}.get(rc, "FAIL")
    if timed_out:
        status = "FAIL"
    with open(out_path, "rb") as f:
        output = f.read().decode("utf-8", "replace")
    with lock:
        line = "%s %s (%.1fs)" % (status, name, secs)
        if timed_out:
            line += " -- timed out after %ds" % fn.timeout
        if status == "SKIP":
            line += " -- " + output.strip().splitlines()[-1] if output.strip() else ""
        print(line, flush=True)
        if status == "FAIL" or (verbose and output.strip()):
            for l in output.rstrip().splitlines():
                print("    " + l)
            sys.stdout.flush()
    return status


def main():
    ap = argparse.ArgumentParser(description="idemrelay end-to-end tests")
    ap.add_argument("names", nargs="*",
                    help="test names, globs or parts of names (default: all)")
    ap.add_argument("-j", "--jobs", type=int, default=int(os.environ.get("E2E_JOBS", "4")))
    ap.add_argument("-v", "--verbose", action="store_true", help="show output of passing tests")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directories")
    ap.add_argument("--list", action="store_true", help="list the tests and exit")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    args = ap.parse_args()
    # a SIGTERM unwinds main, so the run's cluster is stopped and removed
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))

    if args.child:
        child(args.child, args.tmp)

    cases = load_cases()
    if args.list:
        for n, fn in cases.items():
            print("%-40s %3ds%s%s" % (n, fn.timeout, "" if fn.needs_daemon else "  (no daemon)",
                                      "" if fn.stores == harness.STORES
                                      else "  (%s only)" % "/".join(fn.stores)))
        return 0
    if harness.STORE not in harness.STORES:
        sys.exit("run.py: E2E_STORE=%s: want one of %s" % (harness.STORE, ", ".join(harness.STORES)))
    names = select(cases, args.names)
    passed = failed = skipped = 0
    lock = threading.Lock()

    todo = []
    for n in names:
        if harness.STORE in cases[n].stores:
            todo.append(n)
            continue
        print("SKIP %s -- %s only (E2E_STORE=%s)" % (n, "/".join(cases[n].stores), harness.STORE))
        skipped += 1
    if not os.access(harness.BIN, os.X_OK):
        print("run.py: %s is missing or not executable: build it with `make` first;"
              " the tests that need the daemon fail." % harness.BIN, flush=True)
        failing = [n for n in todo if cases[n].needs_daemon]
        todo = [n for n in todo if not cases[n].needs_daemon]
        for n in failing:
            print("FAIL %s -- bin/idemrelay missing" % n)
            failed += 1

    base = tempfile.mkdtemp(prefix="idemrelay-e2e-", dir=os.environ.get("E2E_TMP"))
    # the slowest first, so that the pool drains evenly
    todo = sorted(todo, key=lambda n: -cases[n].timeout)
    start = time.monotonic()
    pg = None
    try:
        pg = shared_cluster(cases, todo)
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futs = [pool.submit(run_one, n, cases[n], base, args.verbose, lock) for n in todo]
            for f in futs:
                s = f.result()
                passed += s == "PASS"
                failed += s == "FAIL"
                skipped += s == "SKIP"
    finally:
        if pg:
            pg.destroy()
        if args.keep:
            print("kept %s" % base)
        else:
            shutil.rmtree(base, ignore_errors=True)
    print("(%.0fs)" % (time.monotonic() - start))
    summary = "%d passed, %d failed" % (passed, failed)
    if skipped:
        summary += ", %d skipped" % skipped
    print(summary, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
