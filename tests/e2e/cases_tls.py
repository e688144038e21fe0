"""Inbound TLS and AUTH (SPEC section 6, issue 3): STARTTLS and its injection attack,
implicit TLS, protocol versions, AUTH PLAIN and LOGIN, submission ports, relaying for
AUTH users, per-user key scope, SIGHUP reloads. Certificates and password hashes are
made by the tests (openssl req, openssl passwd -6, libcrypt's yescrypt)."""

import array
import base64
import ctypes
import ctypes.util
import fcntl
import hashlib
import os
import shutil
import signal
import smtplib
import socket
import ssl
import subprocess
import termios
import time

from harness import (BIN, Raw, case, check, eq, expect_reply, free_port, make_msg, port_open,
                     qid_of, render_conf, run, submit, wait_until)

READY = (220, "2.0.0 Ready to start TLS")


# ---------------------------------------------------------------- fixtures

def make_cert(t, name="cert", cn="idemrelay.test"):
    """make_cert - a self-signed EC certificate and key in the test's directory"""
    crt = os.path.join(t.tmp, name + ".pem")
    key = os.path.join(t.tmp, name + "-key.pem")
    r = run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", crt,
             "-days", "2", "-subj", "/CN=" + cn])
    check(r.returncode == 0, "openssl req failed: %s" % r.stderr)
    return crt, key


def hash6(password):
    """hash6 - a $6$ hash as `openssl passwd -6` makes it"""
    r = run(["openssl", "passwd", "-6", password])
    check(r.returncode == 0 and r.stdout.startswith("$6$"), "openssl passwd -6: %r" % r)
    return r.stdout.strip()


def hash_y(password, method="$y$", cost=0):
    """hash_y - a $y$ (yescrypt) hash from libcrypt, or None where it has none;
    another method and cost if told (0: libcrypt's default)"""
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("crypt") or "libcrypt.so.1")
        lib.crypt_gensalt.restype = ctypes.c_char_p
        lib.crypt_gensalt.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p,
                                      ctypes.c_int]
        lib.crypt.restype = ctypes.c_char_p
        lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        setting = lib.crypt_gensalt(method.encode(), cost, None, 0)
        h = lib.crypt(password.encode(), setting) if setting else None
    except (OSError, AttributeError):
        return None
    return h.decode() if h and h.startswith(method.encode()) else None


def write_users(t, users, name="users"):
    """write_users - a users file of name:hash lines ({name: password}), with a comment"""
    path = os.path.join(t.tmp, name)
    lines = ["# idemrelay users, made by the test", ""]
    for user, pw in users.items():
        lines.append("%s:%s" % (user, pw if pw.startswith(("$", "!", "*")) else hash6(pw)))
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.rename(tmp, path)
    return path


def tls_daemon(t, sink, listeners=({},), users=None, conf=None, cert=None):
    """tls_daemon - a daemon with tls { } (and auth { } with users) and these
    listeners (extra settings each); d.ports[i] is listener i's port"""
    crt, key = cert or make_cert(t)
    conf = dict(conf or {})
    conf["tls"] = dict(conf.get("tls", {}), cert=crt, key=key)
    if users:
        conf["auth"] = {"users": write_users(t, users)}
    d = t.daemon(sink, conf, start=False)
    d.ports = [d.port] + [free_port() for _ in listeners[1:]]
    d.conf["listen"] = [dict({"address": "127.0.0.1", "port": p}, **extra)
                        for p, extra in zip(d.ports, listeners)]
    with open(d.conf_path, "w") as f:
        f.write(render_conf(d.conf))
    d.start()
    wait_until(lambda: all(port_open(p) for p in d.ports), 10, "every listener")
    return d


def client_ctx(maximum=None):
    """client_ctx - a TLS client context that takes the test's self-signed certificate"""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if maximum:
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # so the client itself would speak it
        ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        ctx.maximum_version = maximum
    return ctx


def starttls(c):
    """starttls - STARTTLS on a Raw client, then the handshake over its socket"""
    eq(c.cmd("STARTTLS"), READY, "reply to STARTTLS")
    eq(c.buf, b"", "octets after the 220, before the handshake")
    c.sock = client_ctx().wrap_socket(c.sock)
    return c


def tls_raw(port, timeout=10):
    """tls_raw - a Raw client on an implicit-TLS port, greeting read"""
    c = Raw(port, timeout=timeout, greet=False)
    c.sock = client_ctx().wrap_socket(c.sock)
    c.greeting = c.reply()
    return c


def b64(s):
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def plain(user, pw):
    return b64("\0%s\0%s" % (user, pw))


def ehlo_keywords(reply):
    """ehlo_keywords - the extension lines of an EHLO reply (code, text)"""
    expect_reply(reply, 250)
    return reply[1].split("\n")[1:]


def peer_fingerprint(port):
    """peer_fingerprint - SHA-256 of the certificate an implicit-TLS port serves"""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with client_ctx().wrap_socket(s) as ss:
            return hashlib.sha256(ss.getpeercert(binary_form=True)).hexdigest()


def cert_fingerprint(crt):
    r = run(["openssl", "x509", "-in", crt, "-noout", "-fingerprint", "-sha256"])
    check(r.returncode == 0, "openssl x509: %s" % r.stderr)
    return r.stdout.strip().split("=", 1)[1].replace(":", "").lower()


def swaks(port, *extra, to="a@example.com"):
    r = run(["swaks", "--server", "127.0.0.1:%d" % port, "--to", to, "--timeout", "20"]
            + list(extra), timeout=60)
    check(r.returncode == 0, "swaks exited %d:\n%s%s" % (r.returncode, r.stdout, r.stderr))
    return r.stdout


def received_line(data):
    """received_line - our Received: field, unfolded"""
    text = data.decode("latin-1")
    i = text.find("Received: ")
    check(i >= 0, "no Received header in %r" % text[:300])
    return " ".join(text[i:text.find("\r\n\r\n")].split("\r\n\t")[:2])


# ---------------------------------------------------------------- STARTTLS

@case()
def test_starttls_delivers(t):
    sink = t.sink()
    d = tls_daemon(t, sink, users={"alice": "secret"})
    s = smtplib.SMTP("127.0.0.1", d.port, timeout=20)
    try:
        s.ehlo("client.test")
        check(s.has_extn("starttls"), "STARTTLS not offered: %r" % s.esmtp_features)
        check(not s.has_extn("auth"), "AUTH offered before TLS: %r" % s.esmtp_features)
        code, _ = s.starttls(context=client_ctx())
        eq(code, 220, "STARTTLS")
        s.ehlo("client.test")
        check(not s.has_extn("starttls"), "STARTTLS offered again over TLS")
        eq(s.esmtp_features.get("auth", "").split(), ["PLAIN", "LOGIN"], "AUTH over TLS")
        msg = make_msg(key="tls-1", subject="over TLS")
        r = submit(d.port, ["a@example.com"], msg, smtp=s)
        expect_reply(r.data, 250, "2.0.0", "end of DATA over TLS")
    finally:
        s.quit()
    rec = sink.wait_count(1)[0]
    check(b"over TLS" in rec["data"], "the message reached the sink")
    rcv = received_line(rec["data"])
    check(" with ESMTPS id " in rcv, "Received says ESMTPS: %r" % rcv)
    check(d.log_lines("tls: client=[127.0.0.1] tls=TLSv1."), "the handshake is logged")


@case()
def test_starttls_injection(t):
    sink = t.sink()
    d = tls_daemon(t, sink)
    for i, vector in enumerate([b"STARTTLS\r\nRSET\r\n",
                                b"STARTTLS\r\nMAIL FROM:<evil@example.org>\r\n"]):
        with Raw(d.port) as c:
            expect_reply(c.cmd("EHLO client.test"), 250)
            c.send(vector)                          # one segment (TCP_NODELAY, one send)
            c.sock.settimeout(1.5)
            got = b""
            try:
                while True:
                    chunk = c.sock.recv(4096)
                    if not chunk:
                        break
                    got += chunk
            except socket.timeout:
                pass
            eq(got, b"220 2.0.0 Ready to start TLS\r\n", "everything sent before the handshake")
            c.sock.settimeout(10)
            c.sock = client_ctx().wrap_socket(c.sock)
            # the injected command was not run after the handshake either
            eq(c.cmd("HELP")[0], 214, "first reply over TLS")
            expect_reply(c.cmd("RCPT TO:<a@example.com>"), 503, "5.5.1",
                         "RCPT over TLS (no MAIL survived the handshake)")
            expect_reply(c.cmd("QUIT"), 221)
        d.wait_log("discarded %d octets sent after STARTTLS" % (len(vector) - 10))
    time.sleep(0.5)
    eq(sink.accepted(), [], "nothing relayed")


@case()
def test_starttls_required(t):
    sink = t.sink()
    d = tls_daemon(t, sink, listeners=({"starttls": "required"},))
    with Raw(d.port) as c:
        check("STARTTLS" in ehlo_keywords(c.cmd("EHLO client.test")), "STARTTLS offered")
        for cmd in ("MAIL FROM:<sender@example.org>", "RCPT TO:<a@example.com>", "DATA",
                    "VRFY postmaster"):
            expect_reply(c.cmd(cmd), 530, "5.7.0", cmd + " before STARTTLS")
        eq(c.cmd("MAIL FROM:<x@example.org>")[1],
           "5.7.0 Must issue a STARTTLS command first", "the text")
        expect_reply(c.cmd("NOOP"), 250)
        expect_reply(c.cmd("RSET"), 250)
        starttls(c)
        expect_reply(c.cmd("EHLO client.test"), 250)
        expect_reply(c.cmd("MAIL FROM:<sender@example.org>"), 250, "2.1.0", "MAIL after TLS")
        expect_reply(c.cmd("RCPT TO:<a@example.com>"), 250)
        expect_reply(c.cmd("DATA"), 354)
        c.send(make_msg(key="required-1") + b".\r\n")
        expect_reply(c.reply(), 250, "2.0.0", "end of DATA")
        expect_reply(c.cmd("QUIT"), 221)
    sink.wait_count(1)


@case()
def test_implicit_tls(t):
    sink = t.sink()
    d = tls_daemon(t, sink, listeners=({}, {"tls": "implicit", "auth": "required"}),
                   users={"alice": "secret"})
    port = d.ports[1]
    s = smtplib.SMTP_SSL("127.0.0.1", port, context=client_ctx(), timeout=20)
    try:
        s.ehlo("client.test")
        check(not s.has_extn("starttls"), "STARTTLS offered on an implicit-TLS port")
        check(s.has_extn("auth"), "AUTH not offered over implicit TLS")
        expect_reply(s.mail("sender@example.org"), 530, "5.7.0", "MAIL before AUTH")
        s.rset()
        eq(s.login("alice", "secret")[0], 235, "AUTH")
        r = submit(port, ["a@example.com"], make_msg(key="implicit-1"), smtp=s)
        expect_reply(r.data, 250, "2.0.0")
    finally:
        s.quit()
    out = swaks(port, "--tlsc", "--auth", "PLAIN", "--auth-user", "alice",
                "--auth-password", "secret", "--header", "X-Idempotency-Key: implicit-2")
    check("250 2.0.0 Ok: queued as" in out, "swaks --tlsc: %s" % out)
    recs = sink.wait_count(2)
    for rec in recs:
        rcv = received_line(rec["data"])
        check(" with ESMTPSA id " in rcv, "Received says ESMTPSA: %r" % rcv)
    # a client speaking in the clear to the TLS port gets no SMTP at all
    failed = len(d.log_lines("tls: handshake failed from unknown[127.0.0.1]"))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"EHLO client.test\r\n")
        try:
            data = s.recv(4096)             # a TLS alert, at most
        except ConnectionResetError:
            data = b""
        check(not data.startswith(b"220") and not data.startswith(b"250"),
              "SMTP in the clear on the TLS port: %r" % data)
    wait_until(lambda: len(d.log_lines("tls: handshake failed from unknown[127.0.0.1]")) > failed,
               10, "the failed handshake in the log")


@case()
def test_old_tls_refused(t):
    sink = t.sink()
    d = tls_daemon(t, sink, listeners=({}, {"tls": "implicit"}))
    for port, how in ((d.ports[1], "implicit"), (d.port, "STARTTLS")):
        with Raw(port, greet=how == "STARTTLS") as c:
            if how == "STARTTLS":
                eq(c.cmd("STARTTLS"), READY, "STARTTLS")
            try:
                c.sock = client_ctx(ssl.TLSVersion.TLSv1_1).wrap_socket(c.sock)
                raise AssertionError("a TLS 1.1 handshake succeeded (%s)" % how)
            except ssl.SSLError as e:
                check("PROTOCOL_VERSION" in str(e).upper(),
                      "TLS 1.1 refused by the server with protocol_version (%s): %s" % (how, e))
    with socket.create_connection(("127.0.0.1", d.ports[1]), timeout=10) as s:
        with client_ctx(ssl.TLSVersion.TLSv1_2).wrap_socket(s) as ss:
            eq(ss.version(), "TLSv1.2", "TLS 1.2 is still spoken")
            check(ss.recv(100).startswith(b"220 "), "greeting over TLS 1.2")
    d.wait_log("unsupported protocol")


@case()
def test_tls_handshake_timeout(t):
    sink = t.sink()
    d = tls_daemon(t, sink, listeners=({}, {"tls": "implicit"}),
                   conf={"limits": {"command_timeout": "2s"}})
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", d.ports[1]), timeout=15) as s:
        eq(s.recv(100), b"", "the silent client is dropped without a word")
    check(time.monotonic() - start < 8, "dropped within command_timeout and a sweep")
    d.wait_log("timeout during TLS handshake from unknown[127.0.0.1]")
    with Raw(d.port) as c:                  # STARTTLS, then silence
        eq(c.cmd("STARTTLS"), READY, "STARTTLS")
        c.sock.settimeout(15)
        eq(c.sock.recv(100), b"", "dropped in the handshake")


@case()
def test_tls_big_and_pipelined(t):
    sink = t.sink()
    d = tls_daemon(t, sink, listeners=({}, {"tls": "implicit"}))
    body = b"".join(b"line %06d of a big message over TLS\r\n" % i for i in range(60000))
    one = make_msg(key="big-1", body=body)
    two = make_msg(key="big-2", body=b"small\r\n")
    with tls_raw(d.ports[1]) as c:
        c.send(b"EHLO client.test\r\nMAIL FROM:<s@example.org>\r\nRCPT TO:<a@example.com>\r\n"
               b"DATA\r\n")
        for _ in range(4):
            c.reply()
        c.send(one + b".\r\nMAIL FROM:<s@example.org>\r\nRCPT TO:<b@example.com>\r\nDATA\r\n")
        q1 = qid_of(expect_reply(c.reply(), 250, "2.0.0", "big message"))
        expect_reply(c.reply(), 250)
        expect_reply(c.reply(), 250)
        expect_reply(c.reply(), 354)
        c.send(two + b".\r\nQUIT\r\n")
        q2 = qid_of(expect_reply(c.reply(), 250, "2.0.0", "second message"))
        expect_reply(c.reply(), 221)
    check(q1 != q2, "two messages")
    recs = sink.wait_count(2, timeout=30)
    big = [r for r in recs if b"big-1" in r["data"] or len(r["data"]) > len(body)]
    check(big and big[0]["data"].endswith(body), "the big message arrived whole")


@case()
def test_tls_input_while_waiting(t):
    """Commands that come while the engine waits, in records of their own (during
    a failed AUTH's delay; after a message's dot, while it is committed), are
    answered after the reply it waits for, in order (the event loop leaves
    EPOLLIN in the set while the engine waits, and takes it off only when such
    input comes: issue 27's epoll_ctl calls)."""
    sink = t.sink()
    d = tls_daemon(t, sink, listeners=({}, {"tls": "implicit"}), users={"alice": "secret"})
    with tls_raw(d.ports[1], timeout=20) as c:
        expect_reply(c.cmd("EHLO client.test"), 250)
        start = time.monotonic()
        c.send("AUTH PLAIN " + plain("alice", "wrong") + "\r\n")
        time.sleep(0.3)                 # the 535 waits a second: the NOOP comes meanwhile
        c.send(b"NOOP\r\n")
        eq(c.reply(), (535, "5.7.8 Error: authentication failed"), "the failed AUTH")
        check(time.monotonic() - start >= 0.9, "the 535 came without its delay")
        expect_reply(c.reply(), 250, what="the NOOP sent during the delay")
        expect_reply(c.cmd("AUTH PLAIN " + plain("alice", "secret")), 235)
        c.send(b"MAIL FROM:<s@example.org>\r\nRCPT TO:<a@example.com>\r\nDATA\r\n")
        eq([c.reply()[0] for _ in range(3)], [250, 250, 354], "replies before the message")
        c.send(make_msg(key="while-1") + b".\r\n")
        c.send(b"NOOP\r\n")
        c.send(b"QUIT\r\n")
        expect_reply(c.reply(), 250, "2.0.0", "the message")
        expect_reply(c.reply(), 250, what="the NOOP after it")
        expect_reply(c.reply(), 221)
    sink.wait_count(1)


class RecordClient(Raw):
    """RecordClient - TLS over memory BIOs on an implicit-TLS port: lumps()
    makes one TLS record of each piece and writes them all in one send, so
    the server finds several records in one read (its read-ahead holds the
    ones after the first, which no epoll event announces)"""

    def __init__(self, port, timeout=10):
        super().__init__(port, timeout=timeout, greet=False)
        self.inc, self.out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = client_ctx().wrap_bio(self.inc, self.out)
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.sock.sendall(self.out.read())
                self.pull()
        self.sock.sendall(self.out.read())
        self.greeting = self.reply()

    def pull(self):
        """pull - more octets from the socket into the TLS object"""
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("connection closed by server (pending %r)" % self.buf)
        self.inc.write(data)

    def readline(self):
        while b"\n" not in self.buf:
            try:
                self.buf += self.tls.read(65536)
            except ssl.SSLWantReadError:
                self.pull()
        line, self.buf = self.buf.split(b"\n", 1)
        return line.rstrip(b"\r").decode("latin-1")

    def lumps(self, *pieces):
        """lumps - a record a piece, all in one send"""
        for p in pieces:
            self.tls.write(p)
        self.sock.sendall(self.out.read())


@case()
def test_tls_records_in_one_read(t):
    """Pipelined commands, each its own TLS record, arrive in one segment:
    the server's read-ahead reads them in one go and holds the records after
    the first; those after a final dot wait in OpenSSL while the message is
    committed, with no epoll event for them, and are answered once it is"""
    sink = t.sink()
    d = tls_daemon(t, sink, listeners=({"tls": "implicit"},))
    first, second = make_msg(key="rec-1"), make_msg(key="rec-2")
    with RecordClient(d.ports[0]) as c:
        expect_reply(c.greeting, 220)
        c.lumps(b"EHLO client.test\r\n", b"MAIL FROM:<s@example.org>\r\n",
                b"RCPT TO:<a@example.com>\r\n", b"DATA\r\n")
        expect_reply(c.reply(), 250)
        expect_reply(c.reply(), 250)
        expect_reply(c.reply(), 250)
        expect_reply(c.reply(), 354)
        c.lumps(first[:40], first[40:] + b".\r\n", b"MAIL FROM:<s@example.org>\r\n",
                b"RCPT TO:<b@example.com>\r\n", b"DATA\r\n")
        q1 = qid_of(expect_reply(c.reply(), 250, "2.0.0", "first message"))
        expect_reply(c.reply(), 250, what="MAIL held in the read-ahead during the commit")
        expect_reply(c.reply(), 250)
        expect_reply(c.reply(), 354)
        c.lumps(second + b".\r\n", b"QUIT\r\n")
        q2 = qid_of(expect_reply(c.reply(), 250, "2.0.0", "second message"))
        expect_reply(c.reply(), 221, what="QUIT held in the read-ahead during the commit")
    check(q1 != q2, "two messages")
    recs = sink.wait_count(2, timeout=30)
    eq(sorted(r["to"][0] for r in recs), ["a@example.com", "b@example.com"], "both delivered")


def proc_cpu_ticks(pid):
    """proc_cpu_ticks - user and system clock ticks a process has used"""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


@case()
def test_tls_partial_record_waits(t):
    """A TLS record that arrives in two pieces, a pause between: OpenSSL's
    read-ahead holds the first piece, which is nothing to read yet; the
    loop must wait for the rest in epoll, not read it again and again (a
    busy loop there served no other session: a second client was never
    greeted, and SIGTERM was never handled). Split within a command and
    within a message's last record"""
    sink = t.sink()
    d = tls_daemon(t, sink, listeners=({"tls": "implicit"},))
    with RecordClient(d.ports[0]) as c:
        expect_reply(c.greeting, 220)
        c.tls.write(b"EHLO client.test\r\n")
        rec = c.out.read()
        c.sock.sendall(rec[:7])
        ticks = proc_cpu_ticks(d.proc.pid)
        start = time.monotonic()
        with RecordClient(d.ports[0], timeout=5) as other:
            expect_reply(other.greeting, 220, what="a second session while a record is half in")
        time.sleep(max(0.0, 2.0 - (time.monotonic() - start)))
        used = proc_cpu_ticks(d.proc.pid) - ticks
        hz = os.sysconf("SC_CLK_TCK")
        check(used < hz, "the daemon waits, not spins, for the record's rest: %d ticks in 2 s"
              % used)
        c.sock.sendall(rec[7:])
        expect_reply(c.reply(), 250, what="EHLO once its record is whole")
        c.lumps(b"MAIL FROM:<s@example.org>\r\n", b"RCPT TO:<a@example.com>\r\n", b"DATA\r\n")
        expect_reply(c.reply(), 250)
        expect_reply(c.reply(), 250)
        expect_reply(c.reply(), 354)
        c.tls.write(make_msg(key="split-rec") + b".\r\n")
        rec = c.out.read()
        c.sock.sendall(rec[:30])
        time.sleep(0.5)
        c.sock.sendall(rec[30:])
        expect_reply(c.reply(), 250, "2.0.0", "the message once its last record is whole")
    sink.wait_count(1, timeout=30)


@case()
def test_tls_held_input_after_unread_replies(t):
    """Commands whose replies pile up past the unread-output bound (32 KB)
    and, in the next record of the same segment, QUIT: the engine stops
    taking commands with its input used up and QUIT held by OpenSSL's
    read-ahead; once the replies are written it must read QUIT from there,
    since no epoll event will say it is there"""
    sink = t.sink()
    d = tls_daemon(t, sink, listeners=({"tls": "implicit"},))
    with RecordClient(d.ports[0]) as c:
        c.lumps(b"EHLO client.test\r\n")
        code, text = c.reply()
        eq(code, 250, "EHLO")
        size = sum(len(x) + 6 for x in text.split("\n"))    # "250-" or "250 ", CRLF
        n = -(-32 * 1024 // size)     # the last of them takes the unread replies past 32 KB
        c.lumps(b"EHLO client.test\r\n" * n, b"QUIT\r\n")
        for i in range(n):
            eq(c.reply()[0], 250, "EHLO %d of %d" % (i + 1, n))
        expect_reply(c.reply(), 221, what="QUIT, held in the read-ahead")


def tx_queue(daemon_port, sock):
    """tx_queue - the send queue of the daemon's end of sock's connection
    (/proc/net/tcp): what it has written that the client has not acknowledged"""
    port = sock.getsockname()[1]
    want = ("0100007F:%04X" % daemon_port, "0100007F:%04X" % port)
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if (fields[1], fields[2]) == want:
                return int(fields[4].split(":")[0], 16)
    raise AssertionError("the daemon's end of port %d is not in /proc/net/tcp" % port)


def sent_unread(daemon_port, sock):
    """sent_unread - octets the daemon has written to sock's connection that
    its client has not read: the daemon's socket's send queue and the
    client's receive queue"""
    inq = array.array("i", [0])
    fcntl.ioctl(sock.fileno(), termios.FIONREAD, inq)
    return tx_queue(daemon_port, sock) + inq[0]


def tx_stuck(daemon_port, sock):
    """tx_stuck - is the daemon's send queue non-zero and unchanged over half a second?"""
    tx = tx_queue(daemon_port, sock)
    time.sleep(0.5)
    return tx > 0 and tx_queue(daemon_port, sock) == tx


@case()
def test_tls_close_waits_for_held_replies(t):
    """A session that closes with replies still held by the TLS transport
    (up to 16 KB of records sent when the loop flushes, tls/tls_hold.c) in front
    of a full socket waits for EPOLLOUT before it closes, as it does for
    output the transport has not taken: it closed with one write attempt,
    losing the last replies, the 221 and the close_notify, silently. The
    client (a small receive buffer) reads nothing while it sends EHLOs, a
    few at a time, until the daemon's socket takes no more of their replies
    (/proc/net/tcp: what was written stops growing, and its send queue is
    non-zero and does not move), the rest held; then QUIT, and it reads it
    all: every reply and the 221 must come."""
    sink = t.sink()
    d = tls_daemon(t, sink, listeners=({"tls": "implicit"},))
    c = Raw(d.ports[0], greet=False, sockopts=((socket.SOL_SOCKET, socket.SO_RCVBUF, 4096),
                                               (socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)))
    with client_ctx().wrap_socket(c.sock) as s:
        c.sock = s
        expect_reply(c.reply(), 220, what="greeting")
        code, text = c.cmd("EHLO client.test")
        eq(code, 250, "EHLO")
        size = sum(len(x) + 6 for x in text.split("\n"))    # "250-" or "250 ", CRLF
        batch = 8192 // size                # replies well under the 16 KB held at most
        time.sleep(0.2)                     # our ACKs are out: nothing counted twice
        want = sent_unread(d.ports[0], s)
        sent, full, deadline = 0, False, time.monotonic() + 60
        while not full and time.monotonic() < deadline:
            s.sendall(b"EHLO client.test\r\n" * batch)
            sent += batch
            want += batch * size            # the replies' octets, TLS adds to them
            wait = time.monotonic() + 2     # the daemon answers the batch, or cannot
            while sent_unread(d.ports[0], s) < want and time.monotonic() < deadline:
                if time.monotonic() > wait and tx_stuck(d.ports[0], s):
                    full = True
                    break
                time.sleep(0.001)
        check(full, "the daemon's socket never filled (%d EHLOs)" % sent)
        s.sendall(b"QUIT\r\n")
        time.sleep(0.5)                     # the daemon reads QUIT with its socket full
        got, deadline = [], time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except (ssl.SSLEOFError, ConnectionError):
                break
            if not chunk:
                break
            got.append(chunk)
    ends = [x[:3] for x in (c.buf + b"".join(got)).split(b"\r\n") if x[3:4] == b" "]
    eq(ends.count(b"250"), sent, "replies to the %d EHLOs sent a batch at a time" % sent)
    eq(ends[-1:], [b"221"], "the last reply")


@case()
def test_tls_data_rate_counts_held_records(t):
    """Inside DATA every octet buys time (min_data_rate, 500 octets/s by default),
    the octets of records held by OpenSSL's read-ahead too: a client sending
    1,400 octets/s, each half second a 1-octet record and a 700-octet one in one
    segment (well above the minimum, so a slow turn of a loaded machine does not
    matter), goes on past data_timeout (3 s); counting only the first record of
    each read (1 octet of the 701) would drop it after about 3 s"""
    sink = t.sink()
    d = tls_daemon(t, sink, listeners=({"tls": "implicit"},),
                   conf={"limits": {"data_timeout": "3s", "command_timeout": "60s"}})
    with RecordClient(d.ports[0], timeout=20) as c:
        for line in (b"EHLO client.test\r\n", b"MAIL FROM:<s@example.org>\r\n",
                     b"RCPT TO:<a@example.com>\r\n", b"DATA\r\n"):
            c.lumps(line)
            c.reply()
        c.lumps(make_msg(key="tls-rate-1", body=b""))
        start = time.monotonic()
        while time.monotonic() - start < 5:
            c.lumps(b"y", b"y" * 698 + b"\r\n")
            time.sleep(0.5)
        c.lumps(b".\r\n")
        reply = c.reply()
    expect_reply(reply, 250, "2.0.0", "a message sent at 1,400 octets/s over 5 s, data_timeout=3s")
    sink.wait_count(1)


# ---------------------------------------------------------------- AUTH

@case()
def test_auth_needs_tls(t):
    sink = t.sink()
    d = tls_daemon(t, sink, users={"alice": "secret"})
    with Raw(d.port) as c:
        kw = ehlo_keywords(c.cmd("EHLO client.test"))
        check(not any(k.startswith("AUTH") for k in kw), "AUTH offered in the clear: %r" % kw)
        for cmd in ("AUTH PLAIN " + plain("alice", "secret"), "AUTH LOGIN"):
            eq(c.cmd(cmd), (538, "5.7.11 Encryption required for requested authentication "
                                 "mechanism"), cmd + " in the clear")
        starttls(c)
        kw = ehlo_keywords(c.cmd("EHLO client.test"))
        check("AUTH PLAIN LOGIN" in kw, "AUTH PLAIN LOGIN offered over TLS: %r" % kw)
        check("STARTTLS" not in kw, "STARTTLS offered over TLS: %r" % kw)
        eq(c.cmd("AUTH PLAIN " + plain("alice", "secret")),
           (235, "2.7.0 Authentication successful"), "AUTH over TLS")


@case()
def test_auth_plain_and_login(t):
    sink = t.sink()
    users = {"alice": "secret", "bob": "hunter2"}
    hy = hash_y("yes-pass")
    if hy:
        users["yves"] = hy
    d = tls_daemon(t, sink, listeners=({}, {"tls": "implicit"}), users=users)
    port = d.ports[1]
    ok = (235, "2.7.0 Authentication successful")
    with tls_raw(port) as c:                # PLAIN with an initial response
        eq(c.cmd("AUTH PLAIN " + plain("alice", "secret")), ok, "AUTH PLAIN")
        expect_reply(c.cmd("AUTH PLAIN " + plain("alice", "secret")), 503, "5.5.1",
                     "a second AUTH")
    with tls_raw(port) as c:                # PLAIN after an empty challenge
        eq(c.cmd("AUTH PLAIN"), (334, ""), "PLAIN challenge")
        eq(c.cmd(plain("bob", "hunter2")), ok, "PLAIN response")
    with tls_raw(port) as c:                # LOGIN, both challenges
        eq(c.cmd("AUTH LOGIN"), (334, "VXNlcm5hbWU6"), "LOGIN user challenge")
        eq(c.cmd(b64("alice")), (334, "UGFzc3dvcmQ6"), "LOGIN password challenge")
        eq(c.cmd(b64("secret")), ok, "LOGIN")
    with tls_raw(port) as c:                # cancelled, then a syntax error, then right
        eq(c.cmd("AUTH LOGIN"), (334, "VXNlcm5hbWU6"), "LOGIN")
        eq(c.cmd("*"), (501, "5.7.0 Authentication aborted"), "cancel")
        expect_reply(c.cmd("AUTH PLAIN not-base64"), 501, "5.5.2", "bad base64")
        expect_reply(c.cmd("AUTH CRAM-MD5"), 504, "5.5.4", "unknown mechanism")
        eq(c.cmd("AUTH LOGIN " + b64("bob")), (334, "UGFzc3dvcmQ6"), "LOGIN with the name")
        eq(c.cmd(b64("hunter2")), ok, "LOGIN with an initial response")
    if hy:
        with tls_raw(port) as c:
            eq(c.cmd("AUTH PLAIN " + plain("yves", "yes-pass")), ok, "a $y$ (yescrypt) user")
    for mech in ("PLAIN", "LOGIN"):
        out = swaks(port, "--tlsc", "--auth", mech, "--auth-user", "bob",
                    "--auth-password", "hunter2", "--quit-after", "AUTH")
        check("235 2.7.0" in out, "swaks --auth %s: %s" % (mech, out))
    check(d.log_lines("auth: client=[127.0.0.1] sasl_username=alice status=ok"), "logged")
    check(not [l for l in d.log().splitlines() if "secret" in l or "hunter2" in l],
          "a password in the log")


@case()
def test_auth_failures(t):
    sink = t.sink()
    d = tls_daemon(t, sink, listeners=({}, {"tls": "implicit"}), users={"alice": "secret"})
    port = d.ports[1]
    fail = (535, "5.7.8 Error: authentication failed")
    with tls_raw(port, timeout=20) as c:
        for i, cmd in enumerate(["AUTH PLAIN " + plain("alice", "wrong"),
                                 "AUTH PLAIN " + plain("mallory", "secret")]):
            start = time.monotonic()
            eq(c.cmd(cmd), fail, "bad credentials #%d" % (i + 1))
            check(time.monotonic() - start >= 0.9, "535 #%d came without a delay" % (i + 1))
        eq(c.cmd("AUTH LOGIN"), (334, "VXNlcm5hbWU6"), "LOGIN")
        eq(c.cmd(b64("alice")), (334, "UGFzc3dvcmQ6"), "LOGIN")
        eq(c.cmd(b64("wrong")), fail, "bad credentials #3")
        code, text = c.reply()
        eq(code, 421, "after the third failure: %r" % text)
        check("too many failed authentication attempts" in text, text)
        eq(c.rest(timeout=5), "", "the connection is closed")
    # others are not slowed meanwhile, and the right password still works
    with tls_raw(port) as c:
        start = time.monotonic()
        eq(c.cmd("AUTH PLAIN " + plain("alice", "secret"))[0], 235, "good credentials")
        check(time.monotonic() - start < 0.9, "a success was delayed")
    eq(len(d.log_lines("sasl_username=alice status=failed")), 2, "failures logged")
    eq(len(d.log_lines("sasl_username=mallory status=failed")), 1, "unknown user logged")


@case()
def test_auth_failure_counts_as_error(t):
    """A failed AUTH's 535, which the checking threads give after the failure
    delay, counts toward limits.hard_errors as every 4xx and 5xx reply does
    (idemrelay.conf(5); Postfix counts a failed AUTH as an error), once, as an
    AUTH refused at once does (a user name no users file can hold)."""
    sink = t.sink()
    d = tls_daemon(t, sink, listeners=({"tls": "implicit"},), users={"alice": "secret"},
                   conf={"limits": {"hard_errors": 3}})
    too_many = (421, "4.7.0 %s Error: too many errors" % d.conf.get("hostname", "localhost"))
    for name, ir in (("a wrong password", plain("alice", "wrong")),
                     ("a name with a space", plain("al ice", "secret"))):
        with tls_raw(d.port, timeout=20) as c:
            expect_reply(c.cmd("FROB"), 500, "5.5.2", name)
            eq(c.cmd("AUTH PLAIN " + ir)[0], 535, name)
            expect_reply(c.cmd("NOOP"), 250, "2.0.0", "%s: two errors so far" % name)
            expect_reply(c.cmd("FROB"), 500, "5.5.2", name)
            eq(c.reply(), too_many, "%s: the third error" % name)
            eq(c.rest(timeout=5), "", "%s: the connection is closed" % name)


@case()
def test_auth_required_submission(t):
    sink = t.sink()
    d = tls_daemon(t, sink, listeners=({"starttls": "required", "auth": "required"},),
                   users={"alice": "secret"})
    with Raw(d.port) as c:
        expect_reply(c.cmd("EHLO client.test"), 250)
        eq(c.cmd("MAIL FROM:<sender@example.org>"),
           (530, "5.7.0 Must issue a STARTTLS command first"), "MAIL before TLS")
        expect_reply(c.cmd("AUTH PLAIN " + plain("alice", "secret")), 530, "5.7.0",
                     "AUTH before TLS on a starttls=required port")
        starttls(c)
        expect_reply(c.cmd("EHLO client.test"), 250)
        eq(c.cmd("MAIL FROM:<sender@example.org>"), (530, "5.7.0 Authentication required"),
           "MAIL before AUTH")
        eq(c.cmd("AUTH PLAIN " + plain("alice", "secret"))[0], 235, "AUTH")
        expect_reply(c.cmd("MAIL FROM:<sender@example.org>"), 250, "2.1.0", "MAIL after AUTH")
        expect_reply(c.cmd("RCPT TO:<a@example.com>"), 250)
        expect_reply(c.cmd("DATA"), 354)
        c.send(make_msg(key="submission-1") + b".\r\n")
        expect_reply(c.reply(), 250, "2.0.0")
    out = swaks(d.port, "--tls", "--auth", "PLAIN", "--auth-user", "alice",
                "--auth-password", "secret", "--header", "X-Idempotency-Key: submission-2")
    check("250 2.0.0 Ok: queued as" in out, "swaks --tls --auth: %s" % out)
    sink.wait_count(2)


@case()
def test_auth_relay(t):
    sink = t.sink()
    d = tls_daemon(t, sink, users={"alice": "secret"},
                   conf={"access": {"networks": ["10.0.0.0/8"]}})
    with Raw(d.port) as c:                  # TLS alone is not enough
        starttls(c)
        expect_reply(c.cmd("EHLO client.test"), 250)
        expect_reply(c.cmd("MAIL FROM:<sender@example.org>"), 250)
        eq(c.cmd("RCPT TO:<a@example.com>"),
           (554, "5.7.1 <a@example.com>: Relay access denied"), "unauthenticated RCPT")
    with Raw(d.port) as c:
        starttls(c)
        expect_reply(c.cmd("EHLO client.test"), 250)
        eq(c.cmd("AUTH PLAIN " + plain("alice", "secret"))[0], 235, "AUTH")
        expect_reply(c.cmd("MAIL FROM:<sender@example.org>"), 250)
        expect_reply(c.cmd("RCPT TO:<a@example.com>"), 250, "2.1.5", "authenticated RCPT")
        expect_reply(c.cmd("DATA"), 354)
        c.send(make_msg(key="relay-1", subject="relayed for alice") + b".\r\n")
        q = qid_of(expect_reply(c.reply(), 250, "2.0.0"))
    rec = sink.wait_count(1)[0]
    check(b"relayed for alice" in rec["data"], "delivered")
    check(" with ESMTPSA id %s" % q in received_line(rec["data"]), "ESMTPSA in Received")


def auth_submit(port, user, pw, key, to="same@example.com", subject="s"):
    """auth_submit - one message over implicit TLS as user, the same sender and body
    whoever sends it (so that only the scope tells them apart); the end-of-DATA reply"""
    with tls_raw(port) as c:
        eq(c.cmd("AUTH PLAIN " + plain(user, pw))[0], 235, "AUTH as " + user)
        expect_reply(c.cmd("MAIL FROM:<app@example.org>"), 250)
        expect_reply(c.cmd("RCPT TO:<%s>" % to), 250)
        expect_reply(c.cmd("DATA"), 354)
        c.send(make_msg(key=key, subject=subject, frm="app@example.org", to=to) + b".\r\n")
        return expect_reply(c.reply(), 250, "2.0.0", "end of DATA for " + user)


@case()
def test_scope_user(t):
    sink = t.sink()
    users = {"alice": "secret", "bob": "hunter2"}
    d = tls_daemon(t, sink, listeners=({}, {"tls": "implicit", "auth": "required"}),
                   users=users, conf={"keys": {"scope": "user"}})
    port = d.ports[1]
    a1 = auth_submit(port, "alice", "secret", "order-42", subject="from alice")
    b1 = auth_submit(port, "bob", "hunter2", "order-42", subject="from bob")
    check("duplicate" not in b1, "bob's message taken for alice's: %r" % b1)
    check(qid_of(a1) != qid_of(b1), "one QID for two tenants")
    a2 = auth_submit(port, "alice", "secret", "order-42", subject="from alice")
    eq(qid_of(a2), qid_of(a1), "alice's retry gets her original QID")
    check("duplicate" in a2, "alice's retry is a duplicate: %r" % a2)
    sink.wait_count(2)
    time.sleep(1)
    recs = sink.accepted()
    eq(sorted(r["data"].split(b"Subject: ")[1].split(b"\r\n")[0] for r in recs),
       [b"from alice", b"from bob"], "one message per tenant at the sink")
    # in one global namespace the same key from bob is alice's duplicate
    d2 = tls_daemon(t, sink, listeners=({}, {"tls": "implicit", "auth": "required"}),
                    users=users, conf={"keys": {"scope": "global"}})
    g1 = auth_submit(d2.ports[1], "alice", "secret", "order-43")
    g2 = auth_submit(d2.ports[1], "bob", "hunter2", "order-43")
    eq(qid_of(g2), qid_of(g1), "global scope: bob's is alice's duplicate")


# ---------------------------------------------------------------- SIGHUP

@case()
def test_sighup_reloads_certificate(t):
    sink = t.sink()
    crt, key = make_cert(t, "live")
    d = tls_daemon(t, sink, listeners=({}, {"tls": "implicit"}), cert=(crt, key))
    port = d.ports[1]
    eq(peer_fingerprint(port), cert_fingerprint(crt), "the first certificate")
    old = tls_raw(port)                     # a session that outlives the reload
    crt2, key2 = make_cert(t, "next", cn="next.idemrelay.test")
    shutil.copy(crt2, crt)
    shutil.copy(key2, key)
    d.proc.send_signal(signal.SIGHUP)
    fp2 = cert_fingerprint(crt2)
    d.wait_log("sha256=" + fp2)
    eq(peer_fingerprint(port), fp2, "the certificate after SIGHUP")
    with Raw(d.port) as c:                  # STARTTLS gets it too
        starttls(c)
        eq(hashlib.sha256(c.sock.getpeercert(binary_form=True)).hexdigest(), fp2,
           "STARTTLS certificate after SIGHUP")
    expect_reply(old.cmd("NOOP"), 250, what="a session from before the reload")
    old.close()
    # a broken file: the reload fails, the certificate in use stays
    with open(crt, "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n")
    d.proc.send_signal(signal.SIGHUP)
    d.wait_log("reload: tls: cert " + crt)
    check(d.log_lines("keeping the certificate in use"), "the failure says what stays")
    eq(peer_fingerprint(port), fp2, "the certificate after a failed reload")


@case()
def test_sighup_reloads_users(t):
    sink = t.sink()
    d = tls_daemon(t, sink, listeners=({}, {"tls": "implicit"}), users={"alice": "secret"})
    port = d.ports[1]

    def try_auth(user, pw):
        with tls_raw(port) as c:
            return c.cmd("AUTH PLAIN " + plain(user, pw))[0]

    eq(try_auth("alice", "secret"), 235, "alice before the reload")
    eq(try_auth("carol", "s3cret"), 535, "carol before the reload")
    write_users(t, {"carol": "s3cret", "alice": "!locked"})
    d.proc.send_signal(signal.SIGHUP)
    d.wait_log("reload: auth: 2 users from")
    eq(try_auth("carol", "s3cret"), 235, "carol after the reload")
    eq(try_auth("alice", "secret"), 535, "alice (locked) after the reload")
    with open(os.path.join(t.tmp, "users"), "a") as f:
        f.write("broken line without a colon\n")
    d.proc.send_signal(signal.SIGHUP)
    d.wait_log("keeping the users in use")
    check(d.log_lines("expected name:hash"), "the error names the problem")
    eq(try_auth("carol", "s3cret"), 235, "carol after a failed reload")


def s_client(port, *args):
    """s_client - openssl s_client through STARTTLS to port with args; (handshake
    done, its output)"""
    r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port,
                        "-starttls", "smtp", "-brief"] + list(args), input="QUIT\n",
                       capture_output=True, text=True, timeout=30)
    out = r.stdout + r.stderr
    return "Protocol version:" in out or "CONNECTION ESTABLISHED" in out, out


@case()
def test_tls_groups(t):
    """Key exchange (issue 30): X25519, P-256 and P-384 by default, not OpenSSL's
    finite-field groups (ffdhe8192 costs the event loop ~100 ms a handshake),
    and TLS 1.2's DHE suites only when tls.groups names an ffdhe group;
    tls.groups sets the list, and -t refuses a name OpenSSL does not know."""
    sink = t.sink()
    d = tls_daemon(t, sink)
    for g in ("X25519", "P-256", "P-384"):
        ok, out = s_client(d.port, "-tls1_3", "-groups", g)
        check(ok, "a TLS 1.3 handshake offering only %s: %s" % (g, out))
    for g in ("ffdhe8192", "ffdhe2048"):
        ok, out = s_client(d.port, "-tls1_3", "-groups", g)
        check(not ok, "a TLS 1.3 handshake offering only %s succeeded: %s" % (g, out))
    rsa = os.path.join(t.tmp, "rsa.pem"), os.path.join(t.tmp, "rsa-key.pem")
    r = run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", rsa[1],
             "-out", rsa[0], "-days", "2", "-subj", "/CN=idemrelay.test"])
    check(r.returncode == 0, "openssl req: %s" % r.stderr)
    e = tls_daemon(t, sink, cert=rsa)
    ok, out = s_client(e.port, "-tls1_2", "-cipher", "DHE-RSA-AES128-GCM-SHA256")
    check(not ok, "a TLS 1.2 handshake offering only DHE succeeded: %s" % out)
    ok, out = s_client(e.port, "-tls1_2", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256")
    check(ok, "TLS 1.2 with ECDHE: %s" % out)
    f = tls_daemon(t, sink, cert=rsa, conf={"tls": {"groups": "ffdhe2048:X25519"}})
    for args in (("-tls1_3", "-groups", "ffdhe2048"),
                 ("-tls1_2", "-cipher", "DHE-RSA-AES128-GCM-SHA256")):
        ok, out = s_client(f.port, *args)
        check(ok, "%s with tls.groups naming ffdhe2048: %s" % (" ".join(args), out))
    bad = dict(f.conf, tls=dict(f.conf["tls"], groups="X25519:nosuch"))
    path = os.path.join(t.tmp, "bad-groups.conf")
    with open(path, "w") as fh:
        fh.write(render_conf(bad))
    r = run([BIN, "-t", "-c", path])
    eq(r.returncode, 1, "idemrelay -t with an unknown group (%r)" % (r.stdout + r.stderr))
    check("tls.groups" in r.stderr + r.stdout, "-t names tls.groups: %r" % (r.stdout + r.stderr))


@case()
def test_tls13_suites_server_order(t):
    """TLS 1.3's suites in the server's order, AES-128-GCM with SHA-256 first
    (issue 27: its key schedule runs on SHA-256, which the CPU does in
    hardware), although OpenSSL's clients list AES-256-GCM first; but a client
    that lists ChaCha20-Poly1305 first (one without AES in hardware) gets it
    (SSL_OP_PRIORITIZE_CHACHA), in TLS 1.3 and in TLS 1.2. Each client offers
    several suites, so that its own order and the server's differ: Python's
    ssl module orders TLS 1.2's ciphers (set_ciphers) but not TLS 1.3's
    suites, which s_client -ciphersuites does."""
    def suite12(order):
        ctx = client_ctx(ssl.TLSVersion.TLSv1_2)
        ctx.set_ciphers(":".join("ECDHE-%s-%s" % (k, c) for c in order
                                 for k in ("ECDSA", "RSA")))
        with Raw(d.port) as c:
            c.cmd("EHLO client.test")
            eq(c.cmd("STARTTLS"), READY, "reply to STARTTLS")
            c.sock = ctx.wrap_socket(c.sock)
            eq(c.sock.version(), "TLSv1.2", "protocol")
            return c.sock.cipher()[0]

    sink = t.sink()
    d = tls_daemon(t, sink)
    with Raw(d.port) as c:
        c.cmd("EHLO client.test")
        starttls(c)
        eq(c.sock.version(), "TLSv1.3", "protocol")
        eq(c.sock.cipher()[0], "TLS_AES_128_GCM_SHA256", "the suite chosen for a default client")
    aes128, aes256, chacha = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                              "TLS_CHACHA20_POLY1305_SHA256")
    for offer, want in (((chacha, aes128, aes256), chacha),
                        ((aes256, chacha, aes128), aes128),
                        ((aes128, chacha), aes128),
                        ((aes256, chacha), aes256)):
        ok, out = s_client(d.port, "-tls1_3", "-ciphersuites", ":".join(offer))
        check(ok and ("Ciphersuite: " + want) in out,
              "a client offering %s gets %s: %s" % (":".join(offer), want, out))
    chacha12 = suite12(("CHACHA20-POLY1305", "AES128-GCM-SHA256", "AES256-GCM-SHA384"))
    check(chacha12.endswith("-CHACHA20-POLY1305"),
          "TLS 1.2, a client offering ChaCha20 first gets %s" % chacha12)
    aes12 = suite12(("AES256-GCM-SHA384", "CHACHA20-POLY1305", "AES128-GCM-SHA256"))
    check(aes12.endswith("-AES128-GCM-SHA256"),
          "TLS 1.2, a client offering AES-256 first gets %s" % aes12)


@case()
def test_tls13_one_ticket_resumes(t):
    """A full TLS 1.3 handshake issues one session ticket, not OpenSSL's default
    two (issue 27: each ticket is a session encoded, encrypted and written, on
    every connection, and the mail clients that submit a connection per message
    rarely resume); a client that does resume with it is resumed, and gets a
    fresh ticket for its next connection."""
    def resumed(out):    # -brief does not say "Reused": no certificate was sent
        return "], ServerHello" in out and "], Certificate\n" not in out

    sink = t.sink()
    d = tls_daemon(t, sink)
    sess = os.path.join(t.tmp, "session.pem")
    # -ign_eof: s_client reads until the server closes after QUIT, tickets and all
    ok, out = s_client(d.port, "-tls1_3", "-ign_eof", "-msg", "-sess_out", sess)
    check(ok and not resumed(out), "a full TLS 1.3 handshake: %s" % out[-2000:])
    eq(out.count("NewSessionTicket"), 1, "session tickets after a full handshake")
    ok, out = s_client(d.port, "-tls1_3", "-ign_eof", "-msg", "-sess_in", sess, "-sess_out", sess)
    check(ok and resumed(out), "the ticket resumes a session: %s" % out[-2000:])
    eq(out.count("NewSessionTicket"), 1, "session tickets after a resumption")
    ok, out = s_client(d.port, "-tls1_3", "-ign_eof", "-msg", "-sess_in", sess)
    check(ok and resumed(out), "the resumed session's own ticket resumes: %s" % out[-2000:])


@case()
def test_tls13_tickets_follow_resumption(t):
    """An address that never resumes stops getting session tickets (issue 27: a
    ticket is a session encoded, encrypted and written for nothing when the
    client never comes back with it, as PHPMailer, nodemailer or Django do not):
    after two unused ones only every 32nd full handshake gets one; a client that
    resumes with such a ticket gets a fresh one, and its address gets tickets
    after full handshakes again."""
    def tickets(*args):
        ok, out = s_client(d.port, "-tls1_3", "-ign_eof", "-msg", *args)
        check(ok, "a TLS 1.3 handshake: %s" % out[-2000:])
        return out.count("NewSessionTicket"), "], Certificate\n" not in out

    sink = t.sink()
    d = tls_daemon(t, sink)
    sess = os.path.join(t.tmp, "session.pem")
    got = [tickets("-sess_out", sess)[0]]          # the last ticket given is kept
    got += [tickets()[0] for _ in range(32)]
    eq([i + 1 for i, n in enumerate(got) if n], [1, 2, 33],
       "the full handshakes (1st to 33rd) that got a ticket")
    eq(got.count(1), 3, "one ticket each")
    n, resumed = tickets("-sess_in", sess, "-sess_out", sess)
    check(resumed, "the address's last ticket resumes")
    eq(n, 1, "session tickets after a resumption")
    eq(tickets()[0], 1, "session tickets after a full handshake, the address having resumed")
    n, resumed = tickets("-sess_in", sess)
    check(resumed, "the resumed session's own ticket resumes")


@case()
def test_tls_chain_from_file(t):
    """The certificate chain a client gets is the cert file's, intermediates
    included, in its order (issue 27: the server builds no chain of its own on
    each handshake, SSL_MODE_NO_AUTO_CHAIN, so the file's must be sent whole),
    and a file of the leaf alone sends the leaf alone."""
    def req(*args):
        r = run(["openssl", "req", "-nodes", "-newkey", "ec", "-pkeyopt",
                 "ec_paramgen_curve:prime256v1", "-days", "2"] + list(args))
        check(r.returncode == 0, "openssl req: %s" % r.stderr)

    def sign(csr, ca, ca_key, out, ext=""):
        extfile = os.path.join(t.tmp, "ext.cnf")
        with open(extfile, "w") as f:
            f.write(ext)
        r = run(["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key,
                 "-CAcreateserial", "-days", "2", "-out", out, "-extfile", extfile])
        check(r.returncode == 0, "openssl x509 -req: %s" % r.stderr)

    p = lambda name: os.path.join(t.tmp, name)  # noqa: E731
    req("-x509", "-keyout", p("root-key.pem"), "-out", p("root.pem"), "-subj", "/CN=Test Root")
    req("-keyout", p("int-key.pem"), "-out", p("int.csr"), "-subj", "/CN=Test Intermediate")
    sign(p("int.csr"), p("root.pem"), p("root-key.pem"), p("int.pem"),
         "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign\n")
    req("-keyout", p("leaf-key.pem"), "-out", p("leaf.csr"), "-subj", "/CN=idemrelay.test")
    sign(p("leaf.csr"), p("int.pem"), p("int-key.pem"), p("leaf.pem"))
    with open(p("chain.pem"), "w") as f:
        for name in ("leaf.pem", "int.pem"):
            with open(p(name)) as c:
                f.write(c.read())
    sink = t.sink()
    for cert, want in ((p("chain.pem"), ["idemrelay.test", "Test Intermediate"]),
                       (p("leaf.pem"), ["idemrelay.test"])):
        d = tls_daemon(t, sink, cert=(cert, p("leaf-key.pem")))
        r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % d.port,
                            "-starttls", "smtp", "-showcerts", "-CAfile", p("root.pem")],
                           input="QUIT\n", capture_output=True, text=True, timeout=30)
        out = r.stdout + r.stderr
        # " 0 s:CN = idemrelay.test", " 1 s:CN = Test Intermediate": one line a certificate sent
        got = [line.split("CN = ", 1)[1].strip() for line in out.splitlines()
               if line.lstrip()[1:4] == " s:" and "CN = " in line]
        eq(got, want, "subjects of the chain sent with %s" % os.path.basename(cert))
        if len(want) == 2:
            check("Verify return code: 0 (ok)" in out, "the chain verifies to the root: %s"
                  % out[-2000:])
        d.stop()
