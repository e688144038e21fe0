#!/usr/bin/env python3
"""
NAME
    sink.py - fault-injecting upstream SMTP server for the end-to-end tests

SYNOPSIS
    python3 tests/e2e/sink.py --port N --record DIR [--control FILE]
                              [--events FILE] [--hostname NAME]
                              [--tls-cert PEM --tls-key PEM [--implicit-tls]
                               [--starttls-inject]] [--auth USER:PASS]

DESCRIPTION
    An ESMTP server (EHLO with PIPELINING, 8BITMIME, DSN, SIZE,
    ENHANCEDSTATUSCODES, and CHUNKING when asked; HELO, MAIL, RCPT, DATA,
    BDAT, RSET, NOOP, VRFY, QUIT; several messages per connection) that stands in for the upstream
    provider idemrelay relays to. With --port 0 it picks a free port. Once
    listening it prints "listening on PORT" on stdout.

    End of data is <CRLF>.<CRLF> only; lines starting with a dot are
    unstuffed; everything else (bare CR, bare LF, NUL) is kept as is so
    that the tests can see exactly what idemrelay relayed.

    Every message whose data was read completely is recorded as one JSON
    file in DIR, written atomically (tmp file + rename):
        conn, seq, time, helo, mail_from, mail_params, rcpts
        ([{addr, params}], the accepted recipients only), data_b64,
        reply (the reply given to the final dot, or "drop" when the
        connection was closed instead), accepted (true when the sink
        took responsibility for the message, or may have: 2xx or drop).

    With --events, one JSON line per connection, RCPT and end of data is
    appended to FILE (so tests can count delivery attempts).

TLS AND AUTH
    With --tls-cert and --tls-key the sink offers STARTTLS and refuses
    MAIL before it ("530 5.7.0 Must issue a STARTTLS command first");
    input pipelined behind STARTTLS is discarded. With --implicit-tls it
    speaks TLS from the first byte instead (port 465 style) and offers
    no STARTTLS. --starttls-inject misbehaves on purpose: it sends
    "250 injected" in the same write as its 220 to STARTTLS, before the
    handshake (the libESMTP 1.1.0 response injection).

    With --auth USER:PASS it offers AUTH PLAIN LOGIN (only over TLS when
    TLS is configured; AUTH before it gets "538 5.7.11") and refuses MAIL
    before a successful AUTH ("530 5.7.0 Authentication required"); bad
    credentials get "535 5.7.8".

    The control file (below) may make them fail for a while: "starttls":
    "off" leaves STARTTLS out of EHLO and answers it 502 (a server, or a
    man in the middle, stripping it), "abort" answers it 220 and resets
    the connection before the handshake; "auth_reply": TEXT refuses every
    AUTH, once its credentials are read, with TEXT (say "535 5.7.8 ...":
    an account suspended, a password changed at the provider); "auth_loop":
    true answers every AUTH and every line after it with another 334, the
    client's "*" included (a broken server: RFC 4954 wants 501 there),
    for as long as the client goes on, each an "auth-334" event;
    "auth_mechs": TEXT offers AUTH TEXT instead of "PLAIN LOGIN" (only PLAIN
    and LOGIN are ever accepted; others get 504). Every AUTH command is an
    "auth-command" event (with mech).

    Records then also carry tls (the protocol version, or null), sni
    (the server name the client sent, or null) and auth (the user, or
    null); events add "starttls" and "auth" (with ok).

FAULTS
    A fault is named by a spec string:
        tempfail            RCPT -> 451 4.3.0
        permfail            RCPT -> 550 5.1.1
        toomany             RCPT -> 452 4.5.3 too many recipients
        throttle            RCPT -> 451 4.7.0 ... sending rate exceeded, then
                            a pause of a second before the next reply (a
                            server that tarpits what was pipelined behind)
        stall               RCPT -> no reply, nor to anything after it, until
                            the client goes
        fail-first-N        RCPT -> 451 4.3.0 for the first N attempts
        data-tempfail       final dot -> 451 4.3.0
        data-permfail       final dot -> 554 5.6.0
        data-throttle       final dot -> 451 4.7.0 ... sending rate exceeded
        drop-after-dot      read the final dot, close without replying
        close-after-dot     read the final dot, close cleanly (FIN once
                            every reply written) without replying: the
                            dot was acknowledged, so this is ambiguous
        hang-after-dot      read the final dot, never reply, keep the
                            connection open until the client goes
        reset-after-N       after the 354, read N octets of the content,
                            stop reading and reset the connection (SO_LINGER
                            0): the rest, final dot included, is never read;
                            with a small "rcvbuf" (below) it is never even
                            acknowledged by this side's TCP
        trickle-data        send the 354 to DATA one octet per second
        trickle-dot         send the reply to the final dot one octet per
                            second
        drop-before-data    close the connection when DATA arrives
        delay-N             sleep N seconds before replying to the dot
    and any of them may carry "-first-N": active only for the first N
    attempts of that recipient, then the recipient is accepted normally.

    One fault is named by the envelope sender's local part instead, as
    it must be known at MAIL, before any recipient:
        reset-reply-K       reset the connection (SO_LINGER 0) right after
                            writing the K-th reply of the transaction: 1 is
                            the reply to MAIL, 2 to the first RCPT, ..., then
                            the 354 to DATA and the reply to the final dot;
                            what the client pipelined behind is never read
    ("reset-reply-3-first-1-x@example.org": only the first transaction of
    that sender; its attempts are counted at MAIL).

    The spec comes, per recipient, from (first match):
      1. the control file's "rcpt" object, keyed by the full address;
      2. the recipient's local part, when it starts with a spec followed
         by "-" or the end: "permfail-x@example.com",
         "drop-after-dot-first-1-y@example.com", "delay-3-z@example.com";
      3. the control file's "default" spec.
    Data-stage faults apply to a message when any accepted recipient has
    one (the first in recipient order wins).

    The control file (JSON, re-read before every command, rewritten
    atomically by the tests) may also say "greeting": 421 to refuse new
    connections with "421 4.3.2" ("hang": accept them and never greet), and "chunking": true to offer CHUNKING
    (RFC 3030) in EHLO and take BDAT (a string instead: that line's text after
    "250-", as a loose server spells it); records then say "via": "BDAT"
    for a message that came that way ("DATA" otherwise); "smtputf8": true
    offers SMTPUTF8 (the sink takes any MAIL parameter either way, so the
    records' mail_params show what was sent). "rcvbuf": N sets
    SO_RCVBUF on the listening socket, for connections from then on (read
    at start and whenever the file changes): a small receive window, so
    that what reset-after-N leaves unread stays unacknowledged in the
    client's send queue.

    "rate": N allows N messages a second, as a provider's sending limit
    does: a token bucket of N tokens refilled at N a second, one taken by
    each MAIL; a MAIL that finds none is refused with "rate_reply"
    (default "421 4.7.0 sink: too many messages, slow down"; a 421
    closes the connection) and counted as a "throttled" event.

    "pipelining": false leaves PIPELINING out of the EHLO reply, "8bitmime":
    false 8BITMIME (the sink takes BODY= either way); "ehlo":
    "refuse" answers EHLO "502 5.5.1" (a server that knows only HELO).
    "data_delay": S waits S seconds before the 354 to DATA, an event
    "data-delay" at its start (a test can act while the client waits
    there, before its content and final dot).
    "data_hold": S does the same, but ends early once the control file no
    longer says "data_hold" (re-read every 0.1 s): a test can hold a
    session long enough for a slow machine and let it go when it is done.
    "reset_after_reply": N resets a connection (SO_LINGER 0) right after
    it has written its N-th reply (1: the greeting, 2: the reply to EHLO);
    "resets": K limits that to the first K connections that reach it
    after the control file last changed (default: every one).
"""

import argparse
import asyncio
import base64
import itertools
import json
import os
import re
import socket
import ssl
import struct
import sys
import time

MAX_LINE = 4096
SIZE_LIMIT = 64 * 1024 * 1024

FAULT_RE = re.compile(
    r"^(?P<kind>tempfail|permfail|fail|toomany|data-tempfail|data-permfail|data-throttle|"
    r"drop-after-dot|close-after-dot|hang-after-dot|reset-after-(?P<reset>\d+)|"
    r"trickle-data|trickle-dot|drop-before-data|delay-(?P<delay>\d+)|"
    r"reset-reply-(?P<rreply>\d+)|throttle|stall)"
    r"(?:-first-(?P<first>\d+))?(?=-|$)")

RCPT_FAULTS = ("tempfail", "permfail", "toomany", "throttle")
DATA_FAULTS = ("data-tempfail", "data-permfail", "data-throttle", "drop-after-dot", "close-after-dot",
               "hang-after-dot", "trickle-dot", "delay")


class Fault:
    """A parsed fault spec."""

    def __init__(self, spec, kind, delay, first):
        self.spec = spec
        self.kind = kind
        self.delay = delay
        self.first = first


def parse_fault(spec):
    """parse_fault - a spec string (or a local part starting with one) -> Fault or None"""
    if not spec:
        return None
    m = FAULT_RE.match(spec.lower())
    if not m:
        return None
    kind = m.group("kind")
    delay = int(m.group("delay")) if m.group("delay") else 0
    if m.group("reset"):
        kind, delay = "reset", int(m.group("reset"))
    if m.group("rreply"):
        kind, delay = "reset-reply", int(m.group("rreply"))
    first = int(m.group("first")) if m.group("first") else None
    if kind == "fail":
        if first is None:
            return None
        kind = "tempfail"
    if kind.startswith("delay-"):
        kind = "delay"
    return Fault(m.group(0), kind, delay, first)


class Sink:
    """Shared state: record dir, control file, attempt counters."""

    def __init__(self, args):
        self.ssl_ctx = None
        if args.tls_cert:
            self.ssl_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.ssl_ctx.load_cert_chain(args.tls_cert, args.tls_key)
            self.ssl_ctx.sni_callback = remember_sni
        self.implicit = args.implicit_tls
        self.inject = args.starttls_inject
        self.auth = tuple(args.auth.split(":", 1)) if args.auth else None
        self.record_dir = args.record
        self.control_path = args.control
        self.events_path = args.events
        self.hostname = args.hostname
        self.control = {}
        self.control_mtime = None
        self.conn_ids = itertools.count(1)
        self.seq = itertools.count(1)
        self.attempts = {}      # (addr, fault spec) -> attempts seen
        self.listener = None    # the listening socket, once serving
        self.rcvbuf = None      # the SO_RCVBUF set on it
        self.resets = 0         # reset_after_reply resets since the control file changed
        self.tokens = None      # "rate": the bucket's tokens, and when they were counted
        self.tokens_at = 0.0

    def reload_control(self):
        """reload_control - re-read the control file if it changed"""
        if not self.control_path:
            return
        try:
            st = os.stat(self.control_path)
        except FileNotFoundError:
            self.control, self.control_mtime = {}, None
            return
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key == self.control_mtime:
            return
        try:
            with open(self.control_path, "rb") as f:
                ctl = json.loads(f.read() or b"{}")
            if isinstance(ctl, dict):
                self.control, self.control_mtime = ctl, key
                self.resets = 0
        except (OSError, ValueError) as e:
            log("control file unreadable, keeping the old one: %s" % e)
        self.apply_rcvbuf()

    def apply_rcvbuf(self):
        """apply_rcvbuf - the control file's "rcvbuf" on the listener (inherited at SYN)"""
        want = self.control.get("rcvbuf")
        if self.listener is None or not want or want == self.rcvbuf:
            return
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, int(want))
        self.rcvbuf = want
        log("listener SO_RCVBUF %d (the kernel doubles it)" % int(want))

    def sender_reset(self, sender):
        """sender_reset - K of an active reset-reply-K in the sender's local part, or None"""
        f = parse_fault(sender.split("@", 1)[0])
        if f is None or f.kind != "reset-reply" or not self.active(sender, f):
            return None
        return f.delay

    def connection_reset(self):
        """connection_reset - N of the control's reset_after_reply for a new
        connection, counted against "resets"; None when it does not apply"""
        n = self.control.get("reset_after_reply")
        limit = self.control.get("resets")
        if not n or (limit is not None and self.resets >= int(limit)):
            return None
        self.resets += 1
        return int(n)

    def rate_allows(self):
        """rate_allows - take a token of the control's "rate" bucket; False if none"""
        rate = self.control.get("rate")
        if not rate:
            return True
        now = time.monotonic()
        if self.tokens is None:
            self.tokens = float(rate)
        else:
            self.tokens = min(float(rate), self.tokens + (now - self.tokens_at) * rate)
        self.tokens_at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True

    def fault_for(self, addr):
        """fault_for - the fault spec that applies to a recipient, or None"""
        rcpt_map = self.control.get("rcpt") or {}
        for k, v in rcpt_map.items():
            if k.lower() == addr.lower():
                return parse_fault(v)
        f = parse_fault(addr.split("@", 1)[0])
        if f:
            return f
        return parse_fault(self.control.get("default"))

    def active(self, addr, fault):
        """active - count one attempt; is the fault in force for it?"""
        key = (addr.lower(), fault.spec)
        n = self.attempts.get(key, 0) + 1
        self.attempts[key] = n
        return fault.first is None or n <= fault.first

    def event(self, **ev):
        """event - append one JSON line to the events file"""
        if not self.events_path:
            return
        ev["t"] = time.time()
        line = (json.dumps(ev, sort_keys=True) + "\n").encode()
        fd = os.open(self.events_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def record(self, conn, tx, data, reply, accepted, via="DATA"):
        """record - write one message as a JSON file, atomically"""
        seq = next(self.seq)
        rec = {
            "conn": conn.id,
            "seq": seq,
            "time": time.time(),
            "helo": conn.helo,
            "mail_from": tx["from"],
            "mail_params": tx["params"],
            "rcpts": tx["rcpts"],
            "data_b64": base64.b64encode(data).decode(),
            "size": len(data),
            "reply": reply,
            "accepted": accepted,
            "tls": conn.tls,
            "sni": conn.sni,
            "auth": conn.auth_user,
            "via": via,
        }
        name = "%019d-%06d-c%d.json" % (time.time_ns(), seq, conn.id)
        tmp = os.path.join(self.record_dir, "." + name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(rec, f, indent=1, sort_keys=True)
        os.rename(tmp, os.path.join(self.record_dir, name))
        return rec


def remember_sni(sslobj, name, ctx):
    """remember_sni - keep the server name a TLS client sent, on its SSL object"""
    sslobj.idemrelay_sni = name


def log(msg):
    sys.stderr.write("%.3f sink: %s\n" % (time.time(), msg))
    sys.stderr.flush()


def show(b, limit=200):
    s = b.decode("latin-1")
    s = s.encode("unicode_escape").decode("ascii")
    return s if len(s) <= limit else s[:limit] + "...(%d)" % len(b)


def unstuff(data):
    """unstuff - remove the leading dot of every CRLF line that has one"""
    lines = data.split(b"\r\n")
    return b"\r\n".join(l[1:] if l.startswith(b".") else l for l in lines)


def parse_path(arg, prefix):
    """parse_path - "FROM:<a@b> P=1 Q" -> ("a@b", ["P=1", "Q"]) or None"""
    if not arg.upper().startswith(prefix):
        return None
    rest = arg[len(prefix):].lstrip(" ")
    if rest.startswith("<"):
        end = rest.find(">")
        if end < 0:
            return None
        addr, params = rest[1:end], rest[end + 1:]
    else:
        parts = rest.split(" ", 1)
        addr, params = parts[0], parts[1] if len(parts) > 1 else ""
    return addr, params.split()


class Conn:
    """One client connection: command loop and DATA reader over one buffer."""

    def __init__(self, sink, reader, writer):
        self.sink = sink
        self.reader = reader
        self.writer = writer
        self.id = next(sink.conn_ids)
        self.buf = b""
        self.helo = None
        self.tx = None
        self.closed = False
        self.tls = None             # TLS version once TLS is up
        self.sni = None
        self.auth_user = None       # the user once AUTH succeeded
        self.replies = 0            # replies written on this connection
        self.reset_conn = None      # reset after this many (reset_after_reply)
        self.tx_replies = 0         # replies written since MAIL of a reset-reply-K sender
        self.reset_tx = None        # K
        if sink.implicit:
            self.tls_up()

    def tls_up(self):
        obj = self.writer.get_extra_info("ssl_object")
        self.tls = obj.version()
        self.sni = getattr(obj, "idemrelay_sni", None)
        log("c%d TLS %s %s sni=%s" % (self.id, self.tls, obj.cipher()[0], self.sni))

    async def fill(self):
        chunk = await self.reader.read(65536)
        if not chunk:
            raise EOFError
        self.buf += chunk

    async def read_line(self):
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line, self.buf = self.buf[:i + 1], self.buf[i + 1:]
                return line
            if len(self.buf) > MAX_LINE:
                line, self.buf = self.buf, b""
                return line
            await self.fill()

    async def read_exact(self, n):
        """read_exact - exactly n octets (BDAT)"""
        while len(self.buf) < n:
            await self.fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    async def read_data(self):
        """read_data - up to <CRLF>.<CRLF>; returns the unstuffed content"""
        start = 0
        while True:
            if self.buf.startswith(b".\r\n"):
                self.buf = self.buf[3:]
                return b""
            i = self.buf.find(b"\r\n.\r\n", start)
            if i >= 0:
                data, self.buf = self.buf[:i + 2], self.buf[i + 5:]
                return unstuff(data)
            start = max(0, len(self.buf) - 4)
            if len(self.buf) > SIZE_LIMIT + 65536:
                raise EOFError
            await self.fill()

    async def reply(self, text):
        log("c%d > %s" % (self.id, text.replace("\r\n", " | ")))
        self.writer.write(text.encode() + b"\r\n")
        await self.writer.drain()
        self.replies += 1
        if self.reset_tx:
            self.tx_replies += 1
        if self.replies == self.reset_conn:
            self.reset_now("reset after reply %d of the connection" % self.replies)
        elif self.reset_tx and self.tx_replies == self.reset_tx:
            self.reset_now("reset after reply %d of the transaction" % self.tx_replies)

    def reset_now(self, why):
        """reset_now - reset the connection (SO_LINGER 0): nothing more is read"""
        self.writer.transport.pause_reading()
        sock = self.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sink.event(ev="reset", conn=self.id, after=self.replies, tx=self.tx_replies)
        self.close(why)
        raise EOFError         # the connection's handler stops here

    async def trickle(self, text):
        """trickle - a reply one octet per second (a peer that stalls without going quiet)"""
        log("c%d > (1 octet/s) %s" % (self.id, text))
        for b in text.encode() + b"\r\n":
            self.writer.write(bytes([b]))
            await self.writer.drain()
            await asyncio.sleep(1)

    async def reset_after(self, n):
        """reset_after - read n octets of content, stop reading, reset (SO_LINGER 0)"""
        while len(self.buf) < n:
            await self.fill()
        self.writer.transport.pause_reading()
        sock = self.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sink.event(ev="reset", conn=self.id, read=len(self.buf))
        self.close("reset after %d octets of content" % len(self.buf))

    async def hang(self):
        """hang - say nothing more; wait for the client to go"""
        log("c%d hanging after the dot" % self.id)
        while True:
            await self.fill()

    def close(self, why, clean=False):
        log("c%d closing: %s" % (self.id, why))
        self.closed = True
        self.sink.event(ev="close", conn=self.id, why=why)
        try:
            if clean:
                self.writer.close()     # FIN once what was written is sent
            else:
                self.writer.transport.abort()
        except Exception:
            pass

    async def run(self):
        sink = self.sink
        sink.reload_control()
        sink.event(ev="connect", conn=self.id)
        log("c%d connect" % self.id)
        self.reset_conn = sink.connection_reset()
        if str(sink.control.get("greeting", "")).startswith("421"):
            await self.reply("421 4.3.2 %s sink: service not available" % sink.hostname)
            self.close("greeting 421")
            return
        if sink.control.get("greeting") == "hang":
            log("c%d hanging before the greeting" % self.id)
            await self.reader.read()        # until the client goes
            self.close("hung before the greeting")
            return
        await self.reply("220 %s ESMTP sink" % sink.hostname)
        while not self.closed:
            line = await self.read_line()
            sink.reload_control()
            log("c%d < %s" % (self.id, show(line)))
            await self.command(line.rstrip(b"\r\n").decode("latin-1"))

    async def command(self, line):
        verb, _, arg = line.partition(" ")
        verb = verb.upper()
        handler = getattr(self, "do_" + verb, None)
        if handler is None:
            await self.reply("500 5.5.2 command not recognized")
            return
        await handler(arg)

    async def do_EHLO(self, arg):
        if self.sink.control.get("ehlo") == "refuse":
            await self.reply("502 5.5.1 EHLO not implemented, say HELO")
            return
        self.helo, self.tx = arg, None
        lines = ["250-%s" % self.sink.hostname]
        if self.sink.control.get("pipelining", True):
            lines.append("250-PIPELINING")
        lines.append("250-SIZE %d" % SIZE_LIMIT)
        if self.sink.control.get("8bitmime", True):
            lines.append("250-8BITMIME")
        lines.append("250-DSN")
        if self.sink.ssl_ctx and not self.tls and self.sink.control.get("starttls") != "off":
            lines.append("250-STARTTLS")
        if self.sink.auth and (self.tls or not self.sink.ssl_ctx):
            lines.append("250-AUTH " + self.sink.control.get("auth_mechs", "PLAIN LOGIN"))
        chunking = self.sink.control.get("chunking")
        if chunking:
            lines.append("250-" + (chunking if isinstance(chunking, str) else "CHUNKING"))
        if self.sink.control.get("smtputf8"):
            lines.append("250-SMTPUTF8")
        lines.append("250 ENHANCEDSTATUSCODES")
        await self.reply("\r\n".join(lines))

    async def do_STARTTLS(self, arg):
        if not self.sink.ssl_ctx or self.sink.implicit or self.sink.control.get("starttls") == "off":
            await self.reply("502 5.5.1 STARTTLS not offered")
            return
        if self.tls:
            await self.reply("503 5.5.1 TLS already active")
            return
        text = "220 2.0.0 ready to start TLS"
        if self.sink.inject:
            text += "\r\n250 injected before the handshake"
        await self.reply(text)
        if self.sink.control.get("starttls") == "abort":
            self.sink.event(ev="starttls", conn=self.id, ok=False, error="aborted")
            self.close("STARTTLS: reset before the handshake (control)")
            return
        self.buf = b""              # what the client pipelined: never executed
        try:
            await self.writer.start_tls(self.sink.ssl_ctx)
        except (ssl.SSLError, OSError) as e:
            self.sink.event(ev="starttls", conn=self.id, ok=False, error=str(e))
            self.close("TLS handshake failed: %s" % e)
            return
        self.helo, self.tx, self.auth_user = None, None, None
        self.tls_up()
        self.sink.event(ev="starttls", conn=self.id, ok=True, version=self.tls, sni=self.sni)

    async def auth_line(self, prompt):
        """auth_line - send a 334 challenge, return the client's decoded answer (None: cancelled)"""
        await self.reply("334 " + base64.b64encode(prompt).decode())
        line = (await self.read_line()).rstrip(b"\r\n")
        log("c%d < (AUTH answer, %d bytes)" % (self.id, len(line)))
        if line == b"*":
            return None
        return base64.b64decode(line, validate=True)

    async def do_AUTH(self, arg):
        if not self.sink.auth:
            await self.reply("502 5.5.1 AUTH not offered")
            return
        if self.sink.ssl_ctx and not self.tls:
            await self.reply("538 5.7.11 Encryption required for requested authentication mechanism")
            return
        if self.auth_user:
            await self.reply("503 5.5.1 already authenticated")
            return
        mech, _, initial = arg.partition(" ")
        mech = mech.upper()
        self.sink.event(ev="auth-command", conn=self.id, mech=mech)
        while self.sink.control.get("auth_loop"):
            self.sink.event(ev="auth-334", conn=self.id)
            await self.reply("334 ")
            await self.read_line()
        try:
            if mech == "PLAIN":
                if initial and initial != "=":
                    raw = base64.b64decode(initial, validate=True)
                else:
                    raw = await self.auth_line(b"")
                if raw is None:
                    await self.reply("501 5.7.0 AUTH cancelled")
                    return
                parts = raw.split(b"\0")
                if len(parts) != 3:
                    await self.reply("501 5.5.2 bad PLAIN response")
                    return
                user, pw = parts[1], parts[2]
            elif mech == "LOGIN":
                user = (base64.b64decode(initial, validate=True) if initial
                        else await self.auth_line(b"Username:"))
                pw = None if user is None else await self.auth_line(b"Password:")
                if user is None or pw is None:
                    await self.reply("501 5.7.0 AUTH cancelled")
                    return
            else:
                await self.reply("504 5.5.4 mechanism not supported")
                return
        except ValueError:
            await self.reply("501 5.5.2 bad base64")
            return
        user, pw = user.decode("latin-1"), pw.decode("latin-1")
        forced = self.sink.control.get("auth_reply")
        ok = (user, pw) == self.sink.auth and not forced
        self.sink.event(ev="auth", conn=self.id, mech=mech, user=user, ok=ok)
        if not ok:
            await self.reply(forced or "535 5.7.8 authentication credentials invalid")
            return
        self.auth_user = user
        await self.reply("235 2.7.0 authentication successful")

    async def do_HELO(self, arg):
        self.helo, self.tx = arg, None
        await self.reply("250 %s" % self.sink.hostname)

    async def do_MAIL(self, arg):
        if self.helo is None:
            await self.reply("503 5.5.1 send EHLO first")
            return
        if self.tx is not None:
            await self.reply("503 5.5.1 nested MAIL")
            return
        if self.sink.ssl_ctx and not self.tls:
            await self.reply("530 5.7.0 Must issue a STARTTLS command first")
            return
        if self.sink.auth and not self.auth_user:
            await self.reply("530 5.7.0 Authentication required")
            return
        p = parse_path(arg, "FROM:")
        if p is None:
            await self.reply("501 5.5.4 syntax: MAIL FROM:<address>")
            return
        if not self.sink.rate_allows():
            reply = self.sink.control.get("rate_reply",
                                          "421 4.7.0 sink: too many messages, slow down")
            self.sink.event(ev="throttled", conn=self.id, mail_from=p[0])
            await self.reply(reply)
            if reply.startswith("421"):
                self.close("rate 421")
            return
        self.tx = {"from": p[0], "params": p[1], "rcpts": [], "faults": []}
        self.reset_tx, self.tx_replies = self.sink.sender_reset(p[0]), 0
        await self.reply("250 2.1.0 ok")

    async def do_RCPT(self, arg):
        if self.tx is None:
            await self.reply("503 5.5.1 need MAIL first")
            return
        p = parse_path(arg, "TO:")
        if p is None:
            await self.reply("501 5.5.4 syntax: RCPT TO:<address>")
            return
        addr, params = p
        fault = self.sink.fault_for(addr)
        if fault and fault.kind == "stall" and self.sink.active(addr, fault):
            self.sink.event(ev="rcpt", conn=self.id, addr=addr, reply="stall")
            await self.hang()
        reply = "250 2.1.5 ok"
        if fault and fault.kind in RCPT_FAULTS:
            if self.sink.active(addr, fault):
                reply = {"tempfail": "451 4.3.0 sink: %s",
                         "toomany": "452 4.5.3 sink: too many recipients (%s)",
                         "throttle": "451 4.7.0 sink: %s, sending rate exceeded"}.get(
                             fault.kind, "550 5.1.1 sink: %s") % fault.spec
        elif fault:
            self.tx["faults"].append((addr, fault))
        if reply.startswith("2"):
            self.tx["rcpts"].append({"addr": addr, "params": params})
        self.sink.event(ev="rcpt", conn=self.id, addr=addr, reply=reply)
        await self.reply(reply)
        if fault and fault.kind == "throttle" and not reply.startswith("2"):
            await asyncio.sleep(1)

    def data_fault(self, tx, kinds):
        """data_fault - the first active fault of these kinds among the recipients"""
        for addr, fault in tx["faults"]:
            if fault.kind in kinds and self.sink.active(addr, fault):
                return fault
        return None

    async def data_hold(self):
        """data_hold - the control's "data_hold": wait before the 354 until it
        is taken out of the control file or its seconds have passed"""
        hold = float(self.sink.control.get("data_hold") or 0)
        if not hold:
            return
        self.sink.event(ev="data-hold", conn=self.id, seconds=hold)
        log("c%d holding the 354 up to %g s (control)" % (self.id, hold))
        end = time.monotonic() + hold
        while time.monotonic() < end:
            await asyncio.sleep(0.1)
            self.sink.reload_control()
            if not self.sink.control.get("data_hold"):
                log("c%d hold let go" % self.id)
                return

    async def do_DATA(self, arg):
        if self.tx is None:
            await self.reply("503 5.5.1 need MAIL first")
            return
        if not self.tx["rcpts"]:
            self.tx = None
            await self.reply("554 5.5.1 no valid recipients")
            return
        if self.data_fault(self.tx, ("drop-before-data",)):
            self.sink.event(ev="drop-before-data", conn=self.id)
            self.close("drop-before-data")
            return
        wait = float(self.sink.control.get("data_delay") or 0)
        if wait:
            self.sink.event(ev="data-delay", conn=self.id, seconds=wait)
            log("c%d delaying the 354 by %g s (control)" % (self.id, wait))
            await asyncio.sleep(wait)
        await self.data_hold()
        start = self.data_fault(self.tx, ("reset", "trickle-data"))
        if start and start.kind == "trickle-data":
            self.sink.event(ev="trickle", conn=self.id, what="354")
            await self.trickle("354 end data with <CRLF>.<CRLF>")
        else:
            await self.reply("354 end data with <CRLF>.<CRLF>")
        if start and start.kind == "reset":
            await self.reset_after(start.delay)
            return
        data = await self.read_data()
        tx, self.tx = self.tx, None
        log("c%d data %d bytes" % (self.id, len(data)))
        fault = self.data_fault(tx, DATA_FAULTS)
        kind = fault.kind if fault else None
        if kind == "drop-after-dot":
            self.sink.record(self, tx, data, "drop", True)
            self.sink.event(ev="dot", conn=self.id, reply="drop")
            self.close("drop-after-dot")
            return
        if kind in ("close-after-dot", "hang-after-dot"):
            word = kind.split("-")[0]
            self.sink.record(self, tx, data, word, True)
            self.sink.event(ev="dot", conn=self.id, reply=word)
            if kind == "close-after-dot":
                self.close(kind, clean=True)
            else:
                await self.hang()
            return
        if kind == "data-tempfail":
            reply = "451 4.3.0 sink: data-tempfail"
        elif kind == "data-throttle":
            reply = "451 4.7.0 sink: data-throttle, sending rate exceeded"
        elif kind == "data-permfail":
            reply = "554 5.6.0 sink: data-permfail"
        else:
            reply = "250 2.0.0 ok: sink stored c%d" % self.id
        rec = self.sink.record(self, tx, data, reply, reply.startswith("2"))
        self.sink.event(ev="dot", conn=self.id, reply=reply, seq=rec["seq"])
        if kind == "delay":
            log("c%d delaying reply %ds" % (self.id, fault.delay))
            await asyncio.sleep(fault.delay)
        if kind == "trickle-dot":
            await self.trickle(reply)
            return
        await self.reply(reply)

    async def do_BDAT(self, arg):
        """BDAT size [LAST]: the chunk is read whatever the reply (RFC 3030)"""
        parts = arg.split()
        if not parts or not parts[0].isdigit() or len(parts) > 2 or (
                len(parts) == 2 and parts[1].upper() != "LAST"):
            await self.reply("501 5.5.4 syntax: BDAT size [LAST]")
            return
        chunk = await self.read_exact(int(parts[0]))
        if not self.sink.control.get("chunking"):
            await self.reply("502 5.5.1 CHUNKING not offered")
            return
        if self.tx is None or not self.tx["rcpts"]:
            await self.reply("503 5.5.1 need MAIL and RCPT first")
            return
        self.tx["bdat"] = self.tx.get("bdat", b"") + chunk
        if len(parts) == 1:
            await self.reply("250 2.0.0 %d octets received" % len(chunk))
            return
        tx, self.tx = self.tx, None
        reply = "250 2.0.0 ok: sink stored c%d" % self.id
        rec = self.sink.record(self, tx, tx["bdat"], reply, True, via="BDAT")
        self.sink.event(ev="dot", conn=self.id, reply=reply, seq=rec["seq"])
        await self.reply(reply)

    async def do_RSET(self, arg):
        self.tx, self.reset_tx = None, None
        await self.reply("250 2.0.0 ok")

    async def do_NOOP(self, arg):
        await self.reply("250 2.0.0 ok")

    async def do_VRFY(self, arg):
        await self.reply("252 2.0.0 cannot verify")

    async def do_QUIT(self, arg):
        await self.reply("221 2.0.0 bye")
        self.close("quit")


async def serve(sink, port):
    async def handle(reader, writer):
        conn = Conn(sink, reader, writer)
        try:
            await conn.run()
        except (EOFError, ConnectionError, asyncio.IncompleteReadError):
            if not conn.closed:
                conn.close("client went away")
        except Exception as e:          # never die on one bad session
            log("c%d error: %r" % (conn.id, e))
            conn.close("error")

    server = await asyncio.start_server(handle, "127.0.0.1", port,
                                        reuse_address=True, limit=MAX_LINE,
                                        ssl=sink.ssl_ctx if sink.implicit else None)
    sink.listener = server.sockets[0]
    sink.reload_control()
    sink.apply_rcvbuf()
    actual = server.sockets[0].getsockname()[1]
    print("listening on %d" % actual, flush=True)
    log("listening on 127.0.0.1:%d" % actual)
    async with server:
        await server.serve_forever()


def main():
    ap = argparse.ArgumentParser(description="fault-injecting upstream SMTP sink")
    ap.add_argument("--port", type=int, required=True, help="0 picks a free port")
    ap.add_argument("--record", required=True, help="directory for message records")
    ap.add_argument("--control", help="JSON control file, re-read on each command")
    ap.add_argument("--events", help="append JSON lines of protocol events here")
    ap.add_argument("--hostname", default="sink.test")
    ap.add_argument("--tls-cert", help="PEM certificate (chain): offer STARTTLS, require it")
    ap.add_argument("--tls-key", help="PEM private key for --tls-cert")
    ap.add_argument("--implicit-tls", action="store_true", help="TLS from the first byte")
    ap.add_argument("--starttls-inject", action="store_true",
                    help="send a reply line behind the 220 to STARTTLS, before TLS")
    ap.add_argument("--auth", metavar="USER:PASS", help="offer and require AUTH PLAIN/LOGIN")
    args = ap.parse_args()
    if bool(args.tls_cert) != bool(args.tls_key):
        ap.error("--tls-cert and --tls-key go together")
    if (args.implicit_tls or args.starttls_inject) and not args.tls_cert:
        ap.error("--implicit-tls and --starttls-inject need --tls-cert")
    os.makedirs(args.record, exist_ok=True)
    try:
        asyncio.run(serve(Sink(args), args.port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
