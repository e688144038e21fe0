"""The command line, configuration checking, the default config, swaks as a person uses it."""

import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time

from harness import LMDB_ONLY
from harness import (BIN, Skip, base_conf, case, check, eq, free_port, merge, port_open,
                     qid_of, render_conf, run, wait_until)


def swaks(port, *extra, to="a@example.com"):
    """swaks - one submission as a person types it; returns the transcript"""
    r = run(["swaks", "--server", "127.0.0.1:%d" % port, "--to", to, "--timeout", "20"]
            + list(extra), timeout=60)
    check(r.returncode == 0, "swaks exited %d:\n%s%s" % (r.returncode, r.stdout, r.stderr))
    return r.stdout


def swaks_qid(out):
    lines = [l for l in out.splitlines() if l.startswith("<-") and "queued as" in l]
    check(len(lines) == 1, "swaks transcript has no single '250 ... queued as':\n%s" % out)
    check(" 250 2.0.0 " in lines[0], "not a 250 2.0.0: %r" % lines[0])
    return qid_of(lines[0])


@case()
def test_swaks_twice_one_delivery(t):
    sink = t.sink()
    d = t.daemon(sink)
    hdr = "X-Idempotency-Key: k1"
    q1 = swaks_qid(swaks(d.port, "--header", hdr))
    time.sleep(1.1)         # a new Date: and Subject: (swaks puts the time in both)
    q2 = swaks_qid(swaks(d.port, "--header", hdr))
    eq(q2, q1, "queued as QID of the second swaks run")
    rec = sink.wait_count(1)[0]
    check(b"X-Idempotency-Key" not in rec["data"], "key header relayed")
    time.sleep(1.5)
    eq(len(sink.accepted()), 1, "messages upstream")


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def conf_for(t, d):
    """conf_for - a daemon's config in directory d, on the test's store: LMDB in
    d/store, or the test's PostgreSQL database (the run's cluster's)"""
    if t.store == "postgresql":
        return base_conf(None, free_port(), free_port(), t.pg_url(), "check")
    return base_conf(os.path.join(d, "store"), free_port(), free_port())


@case(timeout=60)
def test_config_check(t):
    store = os.path.join(t.tmp, "store")
    good = write(os.path.join(t.tmp, "good.conf"), render_conf(conf_for(t, t.tmp)))
    r = run([BIN, "-t", "-c", good])
    eq(r.returncode, 0, "idemrelay -t on a good config (output: %s%s)" % (r.stdout, r.stderr))

    up = 'upstream = { maildir = "%s"; };\n' % os.path.join(t.tmp, "outbox")
    bad = {
        # file name: (text, line, setting the message must name)
        "bad-duration.conf": (up + 'listen = ( { address = "127.0.0.1"; port = 2999; } );\n'
                              'store = {\n'
                              '  path = "%s";\n'
                              '  key_ttl = "5 parsecs";\n'
                              '};\n' % store, 5, "key_ttl"),
        "unknown-setting.conf": (up + 'store = { path = "%s"; };\n'
                                 'bogus_setting = 1;\n' % store, 3, "bogus_setting"),
        "unknown-nested.conf": (up + 'store = { path = "%s"; };\n'
                                'keys = {\n'
                                '  modee = "shadow";\n'
                                '};\n' % store, 4, "modee"),
        "bad-enum.conf": (up + 'store = { path = "%s"; };\n'
                          'limits = {\n'
                          '  recipients = 10;\n'
                          '  bare_lf = "sometimes";\n'
                          '};\n' % store, 5, "bare_lf"),
        # issue 31: one header named twice, in two spellings (names are case-insensitive)
        "dup-key-header.conf": (up + 'store = { path = "%s"; };\n'
                                'keys = {\n'
                                '  headers = [ "X-Idempotency-Key",\n'
                                '              "x-idempotency-key" ];\n'
                                '};\n' % store, 5, "keys.headers[1]"),
        "syntax.conf": (up + 'hostname "x.test";\n'
                        'store = { path = "%s"; };\n' % store, 2, None),
        # issue 26: the missing file named, and a path no store can be made in
        "missing-include.conf": (up + '@include "no-such-part.conf"\n', 2,
                                 "cannot open include file %s: No such file or directory"
                                 % os.path.join(t.tmp, "no-such-part.conf")),
        "store-in-proc.conf": (up + 'store = { path = "/proc/idemrelay-e2e/store"; };\n', 2,
                               "store.path: /proc/idemrelay-e2e/store is on proc, a kernel "
                               "file system"),
    }
    for name, (text, line, setting) in bad.items():
        path = write(os.path.join(t.tmp, name), text)
        r = run([BIN, "-t", "-c", path])
        out = r.stdout + r.stderr
        eq(r.returncode, 1, "idemrelay -t on %s (output: %r)" % (name, out))
        check(name in out, "%s: the message does not name the file: %r" % (name, out))
        check(re.search(r"%s:%d\b|line %d\b" % (re.escape(name), line, line), out),
              "%s: the message does not name line %d: %r" % (name, line, out))
        if setting:
            check(setting in out, "%s: the message does not name %s: %r" % (name, setting, out))
    # and without -t, a bad config is refused the same way
    r = run([BIN, "-c", os.path.join(t.tmp, "unknown-setting.conf")], timeout=10)
    eq(r.returncode, 1, "idemrelay -c with a bad config")


@case(timeout=90, stores=LMDB_ONLY)
def test_default_config_maildir(t):
    """bin/idemrelay with no -c, as a newcomer runs it: swaks twice, one message."""
    if port_open(2525):
        raise Skip("127.0.0.1:2525 is in use; the default config listens there")
    cwd = os.path.join(t.tmp, "newcomer")
    os.makedirs(cwd)
    log_path = os.path.join(t.tmp, "default.log")
    t.extra_logs.append(("default-config daemon log", log_path))
    with open(log_path, "wb") as logf:
        p = subprocess.Popen([BIN], cwd=cwd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)
    try:
        wait_until(lambda: port_open(2525) or p.poll() is not None, 10, "the default port 2525")
        check(p.poll() is None, "idemrelay with no -c exited with %s" % p.poll())
        hdr = "X-Idempotency-Key: newcomer-1"
        q1 = swaks_qid(swaks(2525, "--header", hdr))
        q2 = swaks_qid(swaks(2525, "--header", hdr))
        eq(q2, q1, "queued as QID of the second swaks run")
        new = os.path.join(cwd, "var", "outbox", "new")
        files = wait_until(lambda: os.path.isdir(new) and os.listdir(new), 10,
                           "a message in var/outbox/new")
        time.sleep(1.5)
        files = os.listdir(new)
        eq(len(files), 1, "messages in var/outbox/new (%s)" % files)
        check(os.path.isdir(os.path.join(cwd, "var", "store")), "no var/store")
        with open(os.path.join(new, files[0]), "rb") as f:
            data = f.read()
        check(b"(idemrelay)" in data and q1.encode() in data,
              "the Maildir message lacks the Received header with %s" % q1)
        check(b"X-Idempotency-Key" not in data, "key header kept in the Maildir copy")
        check(b"\r" not in data and data.count(b"\n") > 5,
              "the Maildir copy's lines do not end in LF alone")
        p.send_signal(signal.SIGTERM)
        eq(p.wait(10), 0, "exit status after SIGTERM")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


# ------------------------------------------- -t checks what the start needs (issue 12 item 3)

def line_of(text, setting):
    """line_of - the line a rendered setting is on: "user", "tls.cert", "listen[0].port",
    "routes[0].upstream.tls_ca" (the first of its last name's after its top's)"""
    lines = text.splitlines()
    top, _, rest = setting.partition(".")
    top = top.split("[")[0]
    i = next(n for n, l in enumerate(lines) if l.startswith(top + " = "))
    if rest:
        rest = rest.split(".")[-1]
        i = next(n for n in range(i, len(lines)) if lines[n].strip().startswith(rest + " = "))
    return i + 1


def pem_pair(t, tag):
    """pem_pair - a self-signed certificate and its key, made by openssl"""
    d = os.path.join(t.tmp, "pki")
    os.makedirs(d, exist_ok=True)
    cert, key = os.path.join(d, tag + ".pem"), os.path.join(d, tag + ".key")
    r = run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
             "-days", "2", "-subj", "/CN=localhost"])
    check(r.returncode == 0, "openssl: %s" % r.stderr)
    return cert, key


def as_nobody():
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


def start_fails(conf_path, cwd, preexec=None, binary=BIN):
    """start_fails - a real start of the daemon: it must exit non-zero by itself; its output"""
    p = subprocess.Popen([binary, "-c", conf_path], cwd=cwd, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         preexec_fn=preexec)
    try:
        out, _ = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise AssertionError("idemrelay started (and ran 10 s) with %s" % conf_path)
    check(p.returncode != 0, "idemrelay exited 0 at start with %s" % conf_path)
    return out.decode(errors="replace")


# what each row sets up: (name, setting named, words in the message, make(t, d) -> conf)
def row_cert_missing(t, d):
    cert, key = pem_pair(t, "a")
    return {"tls": {"cert": os.path.join(d, "nonexistent.pem"), "key": key}}


def row_cert_garbage(t, d):
    cert, key = pem_pair(t, "a")
    return {"tls": {"cert": write(os.path.join(d, "garbage.pem"), "not a certificate\n"),
                    "key": key}}


def row_key_mismatch(t, d):
    cert, _ = pem_pair(t, "a")
    _, key = pem_pair(t, "b")
    return {"tls": {"cert": cert, "key": key}}


def row_users_missing(t, d):
    cert, key = pem_pair(t, "a")
    return {"tls": {"cert": cert, "key": key},
            "auth": {"users": os.path.join(d, "no-users")}}


def row_user(t, d):
    return {"user": "nosuchuser"}


def row_control_dir(t, d):
    return {"control": os.path.join(write(os.path.join(d, "a-file"), "x"), "run", "ctl.sock")}


def row_store_under_file(t, d):
    return {"store": {"path": os.path.join(write(os.path.join(d, "a-file"), "x"), "store")}}


def row_store_not_writable(t, d):
    ro = os.path.join(d, "root-only")
    os.makedirs(ro)
    os.chmod(ro, 0o755)
    return {"store": {"path": os.path.join(ro, "store")}}


def row_store_url_refused(t, d):
    return {"store": {"url": "postgresql://idemrelay@127.0.0.1:%d/nodb" % free_port()}}


def row_port_taken(t, d):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    t.held = s          # kept open until the test ends
    return {"listen": [{"address": "127.0.0.1", "port": s.getsockname()[1]}]}


def row_tls_ca(t, d):
    return {"upstream": {"tls": "starttls", "tls_ca": os.path.join(d, "no-ca.pem")}}


def row_tls_ca_root_only(t, d):
    """a CA file only root may read, for a daemon that runs as nobody: delivery reads it
    after the privilege drop, so -t, as root, must read it as nobody"""
    cert, _ = pem_pair(t, "ca")
    ca = os.path.join(d, "root-only-ca.pem")
    shutil.copyfile(cert, ca)
    os.chmod(ca, 0o600)
    return {"user": "nobody", "upstream": {"tls": "starttls", "tls_ca": ca}}


def readable_pair(t, d, key_mode=0o644):
    """readable_pair - a certificate and key in d, mode 0644 (the key key_mode)"""
    cert, key = pem_pair(t, "a")
    cert = shutil.copyfile(cert, os.path.join(d, "cert.pem"))
    key = shutil.copyfile(key, os.path.join(d, "key.pem"))
    os.chmod(cert, 0o644)
    os.chmod(key, key_mode)
    return cert, key


def row_key_root_only(t, d):
    """a TLS key only root may read (mode 0600, not idemrelay.conf(5)'s 0640 with the
    user's group), for a daemon that runs as nobody: the start reads it as root, but
    SIGHUP reads it again after the privilege drop, and a renewed certificate would be
    refused then with only a warning; so -t, as root, reads it as nobody"""
    cert, key = readable_pair(t, d, 0o600)
    return {"user": "nobody", "tls": {"cert": cert, "key": key}}


def row_users_root_only(t, d):
    """the same for auth.users"""
    cert, key = readable_pair(t, d)
    users = write(os.path.join(d, "users"), "u:$6$salt$hash\n")
    os.chmod(users, 0o600)
    return {"user": "nobody", "tls": {"cert": cert, "key": key}, "auth": {"users": users}}


def row_control_dir_root_only(t, d):
    """the control socket's directory is there, root's (0755), for a daemon that runs as
    nobody: the start binds the socket after the privilege drop, so -t, as root, must
    look at the directory as nobody"""
    run_dir = os.path.join(d, "run")
    os.makedirs(run_dir)
    os.chmod(run_dir, 0o755)
    return {"user": "nobody", "control": os.path.join(run_dir, "ctl.sock")}


def row_route_tls_ca(t, d):
    return {"routes": [{"name": "ok", "auth_user": "a", "upstream": {"host": "localhost"}},
                       {"name": "t", "auth_user": "b", "upstream": {
                           "host": "localhost", "tls": "starttls",
                           "tls_ca": os.path.join(d, "no-ca-for-t.pem")}}]}


CHECK_ROWS = [
    ("certificate missing", "tls.cert", "No such file or directory", row_cert_missing),
    ("certificate unreadable", "tls.cert", "want a PEM file with", row_cert_garbage),
    ("key does not match", "tls.key", "is not the private key of the certificate",
     row_key_mismatch),
    ("users file missing", "auth.users", "No such file or directory", row_users_missing),
    ("tls.key only root may read, user nobody", "tls.key", "Permission denied",
     row_key_root_only),
    ("auth.users only root may read, user nobody", "auth.users", "Permission denied",
     row_users_root_only),
    ("no such user", "user", 'no such user "nosuchuser"', row_user),
    ("control in a directory that cannot be made", "control", "which is not a directory",
     row_control_dir),
    ("control in a directory of root's, user nobody", "control",
     "run is not writable by uid", row_control_dir_root_only),
    ("listen port taken", "listen[0].port", "Address already in use", row_port_taken),
    ("upstream.tls_ca missing", "upstream.tls_ca", "No such file or directory", row_tls_ca),
    ("upstream.tls_ca only root may read, user nobody", "upstream.tls_ca",
     "Permission denied", row_tls_ca_root_only),
    ("a route's tls_ca missing", "routes[1].upstream.tls_ca", "No such file or directory",
     row_route_tls_ca),
]
LMDB_CHECK_ROWS = [
    ("store under a file", "store.path", "which is not a directory", row_store_under_file),
    ("store not writable", "store.path", "is not writable by uid 65534",
     row_store_not_writable),
]
PG_CHECK_ROWS = [
    ("nothing listens at store.url", "store.url", "Connection refused", row_store_url_refused),
]


@case(timeout=120, needs_daemon=False)
def test_config_check_startup(t):
    """Each row: idemrelay -t exits 1 naming the setting at FILE:LINE with what to do,
    and a real start fails with the same message (as root; "store not writable" runs
    both as nobody). The store rows are the backend's: store.path's on LMDB,
    store.url's on PostgreSQL."""
    base = tempfile.mkdtemp(prefix="idemrelay-check-")     # nobody must reach it
    os.chmod(base, 0o755)
    # and the program too: a checkout under a private home (0700) is out of its reach
    nobody_bin = os.path.join(base, "idemrelay")
    shutil.copy2(BIN, nobody_bin)
    os.chmod(nobody_bin, 0o755)
    rows = CHECK_ROWS + (PG_CHECK_ROWS if t.store == "postgresql" else LMDB_CHECK_ROWS)
    try:
        for n, (name, setting, words, make) in enumerate(rows):
            d = os.path.join(base, "row%d" % n)
            os.makedirs(d)
            os.chmod(d, 0o755)
            conf = merge(conf_for(t, d), make(t, d))
            text = render_conf(conf)
            path = write(os.path.join(d, "idemrelay.conf"), text)
            os.chmod(path, 0o644)
            pre = as_nobody if "nobody" in words or "65534" in words else None
            binary = nobody_bin if pre else BIN
            r = subprocess.run([binary, "-t", "-c", path], cwd=d, capture_output=True, text=True,
                               timeout=30, preexec_fn=pre)
            eq(r.returncode, 1, "%s: idemrelay -t exit status (stdout %r, stderr %r)"
               % (name, r.stdout, r.stderr))
            where = "%s:%d: %s: " % (path, line_of(text, setting), setting)
            lines = [l for l in r.stderr.splitlines() if where in l]
            check(len(lines) == 1 and words in lines[0],
                  "%s: want one line with %r and %r, got %r" % (name, where, words, r.stderr))
            eq(lines[0].count("%s: " % setting), 1, "%s: the setting named once in %r"
               % (name, lines[0]))
            check(lines[0].rstrip().endswith(tuple("abcdefghijklmnopqrstuvwxyz)")) and
                  re.search(r": (create|choose|point|give|want|stop|make|remove|check)\b|"
                            r"\((useradd)", lines[0]),
                  "%s: the message does not say what to do: %r" % (name, lines[0]))
            msg = lines[0][len("idemrelay: "):]
            print(msg)
            out = start_fails(path, d, pre, binary)
            check(("fatal: " + msg) in out, "%s: the start does not fail with the -t message"
                  " %r:\n%s" % (name, msg, out))
            if getattr(t, "held", None):
                t.held.close()
                t.held = None
    finally:
        shutil.rmtree(base, ignore_errors=True)


@case(timeout=60, needs_daemon=False)
def test_config_check_reports_all(t):
    """-t reports every problem, one line each, not only the first."""
    d = t.tmp
    conf = merge(conf_for(t, d),
                 dict(row_user(t, d), **row_control_dir(t, d), **row_cert_missing(t, d)))
    path = write(os.path.join(d, "several.conf"), render_conf(conf))
    r = run([BIN, "-t", "-c", path])
    eq(r.returncode, 1, "idemrelay -t exit status (%r)" % r.stderr)
    for setting in ("tls.cert", "user", "control"):
        check(re.search(r"several\.conf:\d+: %s: " % re.escape(setting), r.stderr),
              "-t does not report %s: %r" % (setting, r.stderr))
    eq(len(r.stderr.strip().splitlines()), 3, "problems reported: %r" % r.stderr)
    check("configuration OK" not in r.stdout, "-t said OK: %r" % r.stdout)


@case(timeout=60)
def test_control_dir_made(t):
    """A control socket in a missing directory: -t is content, the start makes the
    directory (as systemd's RuntimeDirectory= would) and listens there."""
    sock = os.path.join(t.tmp, "run", "idemrelay", "ctl.sock")
    sink = t.sink()
    d = t.daemon(sink, {"control": sock}, start=False)
    r = run([BIN, "-t", "-c", d.conf_path])
    eq(r.returncode, 0, "idemrelay -t exit status (%r)" % r.stderr)
    d.start()
    wait_until(lambda: os.path.exists(sock), 10, "the control socket in its new directory")
    check(stat.S_ISSOCK(os.lstat(sock).st_mode), "%s is not a socket" % sock)
    if os.getuid() != 0:
        return
    # with user = nobody: the directory made is handed over, the socket made in it
    d.stop()
    for path in (os.path.dirname(t.tmp), t.tmp):
        os.chmod(path, 0o755)
    sock2 = os.path.join(t.tmp, "run2", "idemrelay", "ctl.sock")
    d2 = t.daemon(sink, {"control": sock2, "user": "nobody"}, start=False)
    os.chmod(d2.dir, 0o755)
    d2.start()
    d2.wait_log("running as user nobody")
    wait_until(lambda: os.path.exists(sock2), 10, "the control socket made as nobody")
    eq(os.stat(os.path.dirname(sock2)).st_uid, 65534, "owner of the directory made")
    eq(os.stat(os.path.dirname(os.path.dirname(sock2))).st_uid, 0,
       "owner of the directory above it (root's, as mkdir -p made it)")
