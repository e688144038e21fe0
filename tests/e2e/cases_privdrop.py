"""Privilege drop: bind as root, then run as the configured user (SPEC section 2, user)."""

import os
import pwd

from harness import case, check, eq, make_msg, Skip, submit_ok, wait_until


def proc_ids(pid):
    """proc_ids - real, effective, saved uid and gid of a process"""
    ids = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("Uid:", "Gid:", "Groups:")):
                name, _, rest = line.partition(":")
                ids[name] = rest.split()
    return ids


@case()
def test_privilege_drop(t):
    if os.getuid() != 0:
        raise Skip("needs root to start")   # CI and the sessions run as root
    nobody = pwd.getpwnam("nobody")
    # mkdtemp made the test directory 0700: let the user reach its store
    for d in (os.path.dirname(t.tmp), t.tmp):
        os.chmod(d, 0o755)
    sink = t.sink()
    d = t.daemon(sink, {"user": "nobody"}, start=False)
    os.chmod(d.dir, 0o755)
    d.start()
    # the port is bound (and so open) before the drop: wait for it
    d.wait_log("running as user nobody")
    ids = proc_ids(d.proc.pid)
    eq(ids["Uid"], [str(nobody.pw_uid)] * 4, "uids of the running daemon")
    eq(ids["Gid"], [str(nobody.pw_gid)] * 4, "gids of the running daemon")
    eq(ids["Groups"], [], "supplementary groups")
    if d.backend == "lmdb":
        # the drop is logged before the store is opened (daemon/main.c): wait for the file
        data = os.path.join(d.store, "data.mdb")
        wait_until(lambda: os.path.exists(data), 10, "the store after the drop")
        eq(os.stat(data).st_uid, nobody.pw_uid, "owner of the store")
    else:
        check(not os.path.exists(os.path.join(d.dir, "var")), "a store directory made on PostgreSQL")

    q = submit_ok(d.port, ["a@example.com"], make_msg(key="drop-1"))
    sink.wait_count(1)
    d.wait_log(q, "status=sent")   # delivered after the drop (the log line may trail the sink)
