#!/usr/bin/env python3
"""
NAME
    cluster.py - a private PostgreSQL cluster for idemrelay's tests

SYNOPSIS
    python3 tests/pg/cluster.py run [--standby] -- CMD [ARG ...]
    python3 tests/pg/cluster.py selftest

    import cluster
    pg = cluster.Cluster().start()          # initdb, start, role idemrelay
    url = pg.new_database()                 # postgresql://idemrelay@127.0.0.1:PORT/DB
    sb = pg.add_standby()                   # synchronous streaming standby
    pg.kill9(); sb.promote()
    pg.freeze()                             # SIGSTOP: hangs, connections open
    url = cluster.multi_url([pg, sb], db)   # ...?target_session_attrs=read-write
    pb = cluster.Bouncer(pg, "session").start()   # PgBouncer in front of pg
    url = pb.url_of(url)                    # the same database through it
    pb.stop(); pg.destroy()

DESCRIPTION
    A cluster lives in a temporary directory of its own (under $PG_TMP,
    else /tmp), owned by the postgres user when the tests run as root
    (initdb, pg_ctl and postgres refuse to run as root; every server
    program runs through "runuser -u postgres --"); run as another user,
    it is that user's. It listens on 127.0.0.1 only, on a free port; its
    UNIX socket is in its own directory, never in /var/run. fsync is on
    (the tests kill it with -9 and expect every acknowledged commit
    back), shared_buffers small. Authentication is trust on loopback:
    this is a throw-away test cluster.

    The role "idemrelay" owns the databases new_database() creates (one
    per test: CREATE DATABASE is fast, initdb is not, so one cluster
    serves a whole run). add_standby() makes a streaming standby with
    pg_basebackup -R and names it in the primary's
    synchronous_standby_names, so a commit the primary acknowledged is on
    both; promote() makes it the primary (pg_ctl promote), after
    forget_primary() if its primary is gone. freeze() stops a server and
    its backends where they are (SIGSTOP): a machine that hangs, its
    connections open and unanswered, until kill9().

    Bouncer runs PgBouncer (Debian: apt-get install pgbouncer) in front
    of a server, as operators put it between the nodes and PostgreSQL: a
    generated pgbouncer.ini and userlist.txt (auth_type trust, every
    database of the server, the pool mode asked for) in a directory of its
    own, under the cluster's, listening on a free loopback port; run as
    the postgres user when we are root (PgBouncer refuses root), in the
    foreground, so that it stays in the caller's process group.

    Every wait has a deadline. destroy() stops the server (kill -9 when a
    clean stop does not finish in time) and removes the directory; reap()
    kills any server (and PgBouncer) left under a directory, for a runner whose test
    process died before it could clean up.

    run: starts a cluster, creates the database "idemrelay", runs CMD with
    IDEMRELAY_PG_URL set to its URL and IDEMRELAY_PG_ADMIN to a superuser
    URL (for tests that create databases of their own: tests/e2e/run.py
    then uses this cluster) and IDEMRELAY_PG_LOG to its log, stops the cluster
    and exits with CMD's status. --standby adds a synchronous standby
    first (IDEMRELAY_PG_STANDBY_PORT names its port).

    selftest: a cluster starts, a database is created, a standby
    replicates synchronously (a commit waits while the standby is down),
    the primary is killed with -9, the standby is promoted and takes
    writes through a multi-host URL, and a killed primary restarts with
    its commits. Exits 0 when all of that held.

ENVIRONMENT
    PG_BINDIR   the PostgreSQL programs (default: the newest
                /usr/lib/postgresql/*/bin, else $PATH)
    PG_TMP      where cluster directories go (default /tmp)
"""

import atexit
import glob
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

SUPERUSER = "postgres"
ROLE = "idemrelay"
START_TIMEOUT = 30


class ClusterError(Exception):
    """a server program failed or a wait ran out"""


def bindir():
    """bindir - where initdb, pg_ctl and psql are"""
    if os.environ.get("PG_BINDIR"):
        return os.environ["PG_BINDIR"]
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                  key=lambda p: int(p.split("/")[-2]) if p.split("/")[-2].isdigit() else 0)
    for d in reversed(dirs):
        if os.access(os.path.join(d, "initdb"), os.X_OK):
            return d
    found = shutil.which("initdb")
    if not found:
        raise ClusterError("initdb not found: install postgresql (Debian: apt-get install "
                           "postgresql) or set PG_BINDIR")
    return os.path.dirname(found)


def prog(name):
    return os.path.join(bindir(), name)


def ephemeral_low():
    """ephemeral_low - the first port the kernel hands out for bind(0) and connect()"""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port():
    """free_port - a loopback TCP port free now, below the kernel's ephemeral
    range: one that bind(0) gave goes back to that range when the probe
    closes, and any outgoing connection (a client's, libpq's) could take it
    before the server meant for it binds ("Address already in use")"""
    high = ephemeral_low()
    low = max(1024, high - 16384)
    for _ in range(100):
        port = random.randrange(low, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise ClusterError("no free port in %d-%d" % (low, high - 1))


def as_root():
    return os.geteuid() == 0


def server_cmd(args):
    """server_cmd - args run as the postgres user when we are root"""
    if as_root():
        return ["runuser", "-u", SUPERUSER, "--"] + args
    return args


def wait_until(fn, timeout, what, interval=0.05, error=ClusterError):
    """wait_until - poll fn until truthy; error (ClusterError) at the deadline.
    The e2e harness's wait_until is this one, raising AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise error("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def children_of(pid):
    """children_of - pids whose parent is pid (from /proc)"""
    out = []
    for st in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(st) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(st.split("/")[2]))
    return out


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_tree(pid, timeout=10):
    """kill_tree - SIGKILL a postmaster and its backends, as a crash would end them,
    and wait until they are gone (a new postmaster refuses to start while an old
    backend still holds the shared memory)"""
    pids = [pid] + children_of(pid)
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_until(lambda: not any(alive(p) for p in pids), timeout,
               "the killed postmaster %d and its backends to exit" % pid)


def postmaster_pid(datadir):
    """postmaster_pid - the pid in datadir/postmaster.pid, or None"""
    try:
        with open(os.path.join(datadir, "postmaster.pid")) as f:
            return int(f.readline().strip())
    except (OSError, ValueError):
        return None


def reap(top):
    """reap - kill -9 every server whose data directory is under top (a test
    process that died before its cleanup leaves them behind: pg_ctl puts the
    postmaster in a session of its own, out of reach of the test's process group)"""
    for pidfile in glob.glob(os.path.join(top, "**", "pgbouncer.pid"), recursive=True):
        try:
            with open(pidfile) as f:
                os.kill(int(f.read().strip()), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    for pidfile in glob.glob(os.path.join(top, "**", "postmaster.pid"), recursive=True):
        pid = postmaster_pid(os.path.dirname(pidfile))
        if pid and alive(pid):
            try:
                kill_tree(pid)
            except ClusterError:
                pass


def multi_url(clusters, db, user=ROLE, **params):
    """multi_url - a libpq URL naming every cluster's host:port that connects to
    whichever is the primary (target_session_attrs=read-write)"""
    params.setdefault("target_session_attrs", "read-write")
    hosts = ",".join("127.0.0.1:%d" % c.port for c in clusters)
    query = "&".join("%s=%s" % kv for kv in sorted(params.items()))
    return "postgresql://%s@%s/%s?%s" % (user, hosts, db, query)


class Server:
    """A running PostgreSQL server reached over TCP on 127.0.0.1: SQL and URLs.
    A Cluster is one this module started; attach() gives one someone else did."""

    def __init__(self, name, port=None, log_path=None):
        self.name = name
        self.port = port
        self.log_path = log_path
        self.dbs = 0

    def url(self, db, user=ROLE, **params):
        """url - libpq URL of database db on this server"""
        q = "&".join("%s=%s" % kv for kv in sorted(params.items()))
        return "postgresql://%s@127.0.0.1:%d/%s%s" % (user, self.port, db, "?" + q if q else "")

    def admin_url(self):
        return self.url("postgres", SUPERUSER)

    def log_tail(self, n=40, only=None):
        """log_tail - the server log's last n lines (those containing only, if given)"""
        try:
            with open(self.log_path, errors="replace") as f:
                lines = f.read().splitlines()
        except (OSError, TypeError):
            return ""
        if only:
            lines = [l for l in lines if only in l]
        return "--- %s (last %d lines%s) ---\n%s" % (
            self.log_path, n, " with %s" % only if only else "", "\n".join(lines[-n:]))

    def sql(self, sql, db="postgres", user=SUPERUSER, timeout=30):
        """sql - run SQL with psql over TCP; the rows as text ('|' between columns)"""
        try:
            r = subprocess.run([prog("psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                                "-d", self.url(db, user, connect_timeout=5), "-c", sql],
                               capture_output=True, text=True, errors="replace",
                               stdin=subprocess.DEVNULL, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ClusterError("%s: psql did not finish within %ds: %s" % (self.name, timeout, sql))
        if r.returncode != 0:
            raise ClusterError("%s: psql failed: %s: %s" % (self.name, sql, r.stderr.strip()))
        return r.stdout.strip()

    def new_database(self, prefix="t"):
        """new_database - a fresh, empty database owned by idemrelay; its URL"""
        self.dbs += 1
        name = "%s_%d_%d" % ("".join(c if c.isalnum() else "_" for c in prefix.lower())[:40],
                             os.getpid(), self.dbs)
        self.sql('CREATE DATABASE "%s" OWNER %s' % (name, ROLE), timeout=60)
        return self.url(name)

    def in_recovery(self):
        return self.sql("SELECT pg_is_in_recovery()") == "t"


def attach(admin_url, log_path=None):
    """attach - a Server for a cluster another process started (its superuser URL)"""
    return Server("shared", urllib.parse.urlsplit(admin_url).port, log_path)


class Cluster(Server):
    """One PostgreSQL server with its data directory in a temporary directory."""

    def __init__(self, name="primary", base=None):
        self.owned_base = base is None
        self.base = base or tempfile.mkdtemp(prefix="idemrelay-pg-", dir=os.environ.get("PG_TMP"))
        self.dir = os.path.join(self.base, name)
        Server.__init__(self, name, None, os.path.join(self.dir, "postgresql.log"))
        self.data = os.path.join(self.dir, "data")
        self.sock = os.path.join(self.dir, "sock")
        self.standbys = []
        self.destroyed = False
        os.makedirs(self.sock, exist_ok=True)
        self._own(self.base)
        self._own(self.dir)
        self._own(self.sock)

    # ------------------------------------------------------------ plumbing

    def _own(self, path):
        """_own - give path to the postgres user (it runs the server)"""
        if as_root():
            pw = pwd.getpwnam(SUPERUSER)
            os.chown(path, pw.pw_uid, pw.pw_gid)
        os.chmod(path, 0o700 if path != self.base else 0o755)

    def _server(self, args, timeout=60):
        """_server - a server program as the postgres user, with a deadline"""
        try:
            r = subprocess.run(server_cmd(args), cwd=self.dir, capture_output=True, text=True,
                               errors="replace", stdin=subprocess.DEVNULL, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ClusterError("%s: %s did not finish within %ds"
                               % (self.name, " ".join(args[:2]), timeout))
        if r.returncode != 0:
            raise ClusterError("%s: %s failed (%d): %s%s\n%s" % (
                self.name, " ".join(args), r.returncode, r.stdout, r.stderr, self.log_tail()))
        return r.stdout

    def _conf(self, **settings):
        """_conf - append settings to postgresql.conf (a later line wins)"""
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("\n# tests/pg/cluster.py\n")
            for k, v in settings.items():
                f.write("%s = %s\n" % (k, "'%s'" % v if isinstance(v, str) else v))

    def _hba(self):
        with open(os.path.join(self.data, "pg_hba.conf"), "w") as f:
            f.write("# tests/pg/cluster.py: a throw-away cluster on loopback\n"
                    "local all all trust\n"
                    "host all all 127.0.0.1/32 trust\n"
                    "local replication all trust\n"
                    "host replication all 127.0.0.1/32 trust\n")

    # ------------------------------------------------------------ life

    def init(self):
        """init - initdb with the settings the tests rely on"""
        self._server([prog("initdb"), "-D", self.data, "-U", SUPERUSER, "-A", "trust",
                      "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"], timeout=120)
        self.port = free_port()
        self._conf(listen_addresses="127.0.0.1", port=self.port,
                   unix_socket_directories=self.sock, cluster_name=self.name,
                   fsync="on", synchronous_commit="on", shared_buffers="16MB",
                   max_connections=300, wal_level="replica", max_wal_senders=5,
                   wal_keep_size="64MB", hot_standby="on", logging_collector="off",
                   log_line_prefix="%m [%p] %d ", log_min_messages="warning",
                   dynamic_shared_memory_type="mmap")
        self._hba()
        return self

    def start(self, timeout=START_TIMEOUT):
        """start - initdb if new, then start and wait until it takes connections;
        a first start also creates the role idemrelay"""
        first = self.port is None
        if first:
            self.init()
        for attempt in range(3):
            try:
                self._server([prog("pg_ctl"), "-D", self.data, "-l", self.log_path, "-w",
                              "-t", str(timeout), "start"], timeout=timeout + 10)
                break
            except ClusterError:
                # the free port may have been taken between our probe and its bind
                if attempt == 2 or "could not bind" not in self.log_tail(10):
                    raise
                self.port = free_port()
                self._conf(port=self.port)
        self.wait_ready(timeout)
        if first and not self.standby_of():
            self.sql("CREATE ROLE %s LOGIN" % ROLE)
        return self

    def wait_ready(self, timeout=START_TIMEOUT):
        wait_until(lambda: subprocess.run(
            [prog("pg_isready"), "-q", "-U", SUPERUSER, "-h", "127.0.0.1", "-p", str(self.port), "-t", "1"],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=5).returncode == 0,
            timeout, "%s on port %d to take connections" % (self.name, self.port))

    def stop(self, mode="fast", timeout=30):
        """stop - pg_ctl stop (fast: running transactions are rolled back)"""
        if self.running():
            self._server([prog("pg_ctl"), "-D", self.data, "-m", mode, "-w",
                          "-t", str(timeout), "stop"], timeout=timeout + 10)

    def kill9(self):
        """kill9 - the server dies at once with its backends, as in a crash"""
        pid = postmaster_pid(self.data)
        if pid and alive(pid):
            kill_tree(pid)
        if pid and os.path.exists("/proc/%d" % pid):
            # a zombie nobody has reaped yet (a container's init may be slow to):
            # the next postmaster would take it for a live one; after a real
            # crash no process would be left, so neither are the lock files
            for lock in [os.path.join(self.data, "postmaster.pid")] + \
                    glob.glob(os.path.join(self.sock, ".s.PGSQL.*.lock")):
                try:
                    os.unlink(lock)
                except FileNotFoundError:
                    pass

    def freeze(self):
        """freeze - the server and its backends stopped (SIGSTOP) where they are, as
        a machine that hangs: connections stay open, nothing answers; kill9() ends it"""
        pid = postmaster_pid(self.data)
        if not pid or not alive(pid):
            raise ClusterError("%s: no server to freeze" % self.name)
        os.kill(pid, signal.SIGSTOP)        # first: it forks nothing more
        for p in children_of(pid):
            try:
                os.kill(p, signal.SIGSTOP)
            except ProcessLookupError:
                pass

    def configure(self, **settings):
        """configure - settings into postgresql.conf (a later line wins); those that
        need it take effect at the next restart()"""
        self._conf(**settings)
        return self

    def restart(self, timeout=START_TIMEOUT):
        """restart - stop (if running) and start again; after kill9 this is crash recovery"""
        self.stop()
        return self.start(timeout)

    def running(self):
        pid = postmaster_pid(self.data)
        return bool(pid and alive(pid))

    def destroy(self):
        """destroy - stop (kill -9 if a stop does not finish) and remove the directory"""
        if self.destroyed:
            return
        self.destroyed = True
        for s in self.standbys:
            s.destroy()
        try:
            self.stop("immediate", 15)
        except Exception:
            pass
        try:
            self.kill9()
        except Exception:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.owned_base:
            shutil.rmtree(self.base, ignore_errors=True)

    # ------------------------------------------------------------ replication

    def standby_of(self):
        return os.path.exists(os.path.join(self.data, "standby.signal"))

    def add_standby(self, name=None, sync=True, timeout=START_TIMEOUT):
        """add_standby - a streaming standby from pg_basebackup -R, started; with
        sync, the primary waits for it on every commit (synchronous_standby_names)"""
        sb = Cluster(name or "standby%d" % (len(self.standbys) + 1), self.base)
        sb.owned_base = False
        self.standbys.append(sb)
        sb._server([prog("pg_basebackup"), "-h", "127.0.0.1", "-p", str(self.port),
                    "-U", SUPERUSER, "-D", sb.data, "-R", "-X", "stream", "-c", "fast",
                    "--no-sync"], timeout=120)
        sb.port = free_port()
        # cluster_name is the application_name the walreceiver gives the primary
        sb._conf(port=sb.port, unix_socket_directories=sb.sock, cluster_name=sb.name)
        sb.start(timeout)
        if sync:
            # set after the base backup, so the standby, once promoted, does not
            # wait for a standby of its own
            self.sql("ALTER SYSTEM SET synchronous_standby_names = '%s'" % sb.name)
            self.sql("SELECT pg_reload_conf()")
        want = "sync" if sync else "async"
        wait_until(lambda: self.sql("SELECT sync_state FROM pg_stat_replication "
                                    "WHERE application_name = '%s' AND state = 'streaming'"
                                    % sb.name) == want,
                   timeout, "%s streaming (%s) from %s" % (sb.name, want, self.name), 0.1)
        return sb

    def forget_primary(self):
        """forget_primary - this standby, stopped, will not stream from its primary
        when started again (primary_conninfo emptied where pg_basebackup -R wrote it:
        postgresql.auto.conf, read last); it replays what it has and can be promoted"""
        with open(os.path.join(self.data, "postgresql.auto.conf"), "a") as f:
            f.write("primary_conninfo = ''\n")
        return self

    def promote(self, timeout=START_TIMEOUT):
        """promote - this standby becomes a primary (pg_ctl promote) and takes writes"""
        self._server([prog("pg_ctl"), "-D", self.data, "-w", "-t", str(timeout), "promote"],
                     timeout=timeout + 10)
        wait_until(lambda: not self.in_recovery(), timeout, "%s out of recovery" % self.name)
        return self


class Bouncer:
    """PgBouncer in front of server (a Server), on a free port on 127.0.0.1: every
    database of the server, pool_mode as given ("session", "transaction",
    "statement"), trust authentication; settings go into [pgbouncer] as they
    are (ignore_startup_parameters="options", server_round_robin=1, ...)."""

    def __init__(self, server, pool_mode="session", base=None, **settings):
        self.server = server
        self.base = base or getattr(server, "base", None)
        self.owned_base = self.base is None
        if self.owned_base:
            self.base = tempfile.mkdtemp(prefix="idemrelay-pgb-", dir=os.environ.get("PG_TMP"))
        self.dir = tempfile.mkdtemp(prefix="pgbouncer-", dir=self.base)
        self.ini = os.path.join(self.dir, "pgbouncer.ini")
        self.log_path = os.path.join(self.dir, "pgbouncer.log")
        self.pidfile = os.path.join(self.dir, "pgbouncer.pid")
        self.pool_mode = pool_mode
        self.settings = dict(settings)
        self.port = None
        self.proc = None
        if as_root():
            pw = pwd.getpwnam(SUPERUSER)
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            os.chmod(self.base, 0o755)

    def _write(self):
        with open(os.path.join(self.dir, "userlist.txt"), "w") as f:
            f.write('"%s" ""\n"%s" ""\n' % (ROLE, SUPERUSER))
        settings = dict(listen_addr="127.0.0.1", listen_port=self.port, unix_socket_dir="",
                        auth_type="trust", auth_file=os.path.join(self.dir, "userlist.txt"),
                        pool_mode=self.pool_mode, logfile=self.log_path, pidfile=self.pidfile,
                        admin_users=SUPERUSER, max_client_conn=500, default_pool_size=20)
        settings.update(self.settings)
        with open(self.ini, "w") as f:
            f.write("; tests/pg/cluster.py: PgBouncer in front of %s\n[databases]\n"
                    "* = host=127.0.0.1 port=%d\n[pgbouncer]\n" % (self.server.name, self.server.port))
            for k, v in settings.items():
                f.write("%s = %s\n" % (k, v))
        if as_root():
            pw = pwd.getpwnam(SUPERUSER)
            for name in ("pgbouncer.ini", "userlist.txt"):
                os.chown(os.path.join(self.dir, name), pw.pw_uid, pw.pw_gid)

    def start(self, timeout=START_TIMEOUT):
        """start - write the files and run it; wait until it takes connections"""
        exe = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not os.access(exe, os.X_OK):
            raise ClusterError("pgbouncer not found: install pgbouncer (Debian: apt-get "
                               "install pgbouncer)")
        for attempt in range(3):
            self.port = free_port()
            self._write()
            log = open(os.path.join(self.dir, "stderr"), "ab")
            self.proc = subprocess.Popen(server_cmd([exe, self.ini]), cwd=self.dir,
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            log.close()
            try:
                wait_until(lambda: self.proc.poll() is not None or self._listening(), timeout,
                           "PgBouncer on port %d" % self.port)
            except ClusterError:
                self.stop()
                raise
            if self.proc.poll() is None:
                return self
            # the free port may have been taken between our probe and its bind
            if attempt == 2 or "bind" not in self.log_tail():
                raise ClusterError("pgbouncer exited with %d:\n%s"
                                   % (self.proc.returncode, self.log_tail()))

    def _listening(self):
        with socket.socket() as s:
            s.settimeout(1)
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def log_tail(self, n=40):
        out = []
        for name in ("stderr", "pgbouncer.log"):
            try:
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    out += f.read().splitlines()[-n:]
            except OSError:
                pass
        return "\n".join(out)

    def url_of(self, url):
        """url_of - url (of the server behind) with this PgBouncer's host and port"""
        u = urllib.parse.urlsplit(url)
        netloc = "%s127.0.0.1:%d" % (u.netloc.rsplit("@", 1)[0] + "@" if "@" in u.netloc else "",
                                     self.port)
        return urllib.parse.urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment))

    def stop(self, timeout=10):
        """stop - SIGTERM (PgBouncer's immediate shutdown), SIGKILL after timeout"""
        if self.proc is None or self.proc.poll() is not None:
            return
        pid = None
        try:
            with open(self.pidfile) as f:
                pid = int(f.read().strip())
        except (OSError, ValueError):
            pass
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5)):
            for p in filter(None, (pid, self.proc.pid)):
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass
            try:
                self.proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue

    def destroy(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.owned_base:
            shutil.rmtree(self.base, ignore_errors=True)


# ---------------------------------------------------------------- CLI

def selftest():
    """selftest - what the failover tests rely on, checked on a real server"""
    t0 = time.monotonic()
    pg = Cluster()
    try:
        pg.start()
        check_eq(pg.sql("SHOW fsync"), "on", "fsync")
        check_eq(pg.sql("SHOW listen_addresses"), "127.0.0.1", "listen_addresses")
        url = pg.new_database("selftest")
        db = url.rsplit("/", 1)[1]
        pg.sql("CREATE TABLE t (v int)", db, ROLE)
        pg.sql("INSERT INTO t VALUES (1)", db, ROLE)
        print("selftest: cluster on port %d, database %s (%.1fs)" % (pg.port, db, time.monotonic() - t0))

        sb = pg.add_standby()
        pg.sql("INSERT INTO t VALUES (2)", db, ROLE)
        # synchronous: the commit is on the standby when the primary answers
        check_eq(sb.sql("SELECT count(*) FROM t", db), "2", "rows on the standby right after commit")
        sb.stop()
        try:
            pg.sql("INSERT INTO t VALUES (3)", db, ROLE, timeout=2)
            raise ClusterError("a commit returned with the synchronous standby down")
        except ClusterError as e:
            if "did not finish" not in str(e):
                raise
        sb.start()
        wait_until(lambda: sb.sql("SELECT count(*) FROM t", db) == "3", 15,
                   "the waiting commit on the standby once it is back")
        print("selftest: synchronous standby %s on port %d (%.1fs)"
              % (sb.name, sb.port, time.monotonic() - t0))

        murl = multi_url([pg, sb], db)
        pg.kill9()
        check(not pg.running(), "primary still running after kill9")
        sb.promote()
        r = subprocess.run([prog("psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                            "-d", murl + "&connect_timeout=2", "-c",
                            "INSERT INTO t VALUES (4); SELECT count(*) FROM t"],
                           capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        check_eq((r.returncode, r.stdout.strip()), (0, "4"), "write through %s after promote" % murl)
        print("selftest: primary killed, standby promoted, multi-host URL writes (%.1fs)"
              % (time.monotonic() - t0))

        # the old primary, killed, restarts with every commit it acknowledged
        pg.start()
        check_eq(pg.sql("SELECT count(*) FROM t", db), "3", "rows on the killed primary after restart")
        pg.kill9()
        print("selftest: killed primary restarted with its commits (%.1fs)" % (time.monotonic() - t0))
    finally:
        pg.destroy()
    check(not os.path.exists(pg.base), "cluster directory left behind")
    print("selftest: passed (%.1fs)" % (time.monotonic() - t0))
    return 0


def check(cond, msg):
    if not cond:
        raise ClusterError(msg)


def check_eq(got, want, what):
    check(got == want, "%s: got %r, want %r" % (what, got, want))


def run(cmd, standby=False):
    """run - CMD with IDEMRELAY_PG_URL pointing at a fresh cluster; its exit status"""
    pg = Cluster()
    atexit.register(pg.destroy)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    signal.signal(signal.SIGINT, lambda *a: sys.exit(130))
    pg.start()
    pg.sql('CREATE DATABASE idemrelay OWNER %s' % ROLE)
    env = dict(os.environ, IDEMRELAY_PG_URL=pg.url("idemrelay"), IDEMRELAY_PG_ADMIN=pg.admin_url(),
               IDEMRELAY_PG_LOG=pg.log_path)
    if standby:
        env["IDEMRELAY_PG_STANDBY_PORT"] = str(pg.add_standby().port)
    print("cluster.py: PostgreSQL on 127.0.0.1:%d (%s)" % (pg.port, pg.base), flush=True)
    child = subprocess.Popen(cmd, env=env)
    try:
        return child.wait()
    finally:
        if child.poll() is None:        # we were interrupted: CMD goes first
            child.terminate()
            try:
                child.wait(15)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        pg.destroy()


def main(argv):
    if len(argv) >= 1 and argv[0] == "selftest":
        try:
            return selftest()
        except ClusterError as e:
            print("selftest: FAILED: %s" % e)
            return 1
    if len(argv) >= 1 and argv[0] == "run":
        args = argv[1:]
        standby = "--standby" in args[:args.index("--")] if "--" in args else False
        if "--" not in args or not args[args.index("--") + 1:]:
            sys.exit("usage: cluster.py run [--standby] -- CMD [ARG ...]")
        try:
            return run(args[args.index("--") + 1:], standby)
        except ClusterError as e:
            print("cluster.py: %s" % e, file=sys.stderr)
            return 1
    sys.exit("usage: cluster.py run [--standby] -- CMD [ARG ...] | cluster.py selftest")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
