"""The README's "Several nodes" recipe, run as written (issue 26 part 4).

README.md marks each code block of the recipe with an HTML comment that a
reader does not see (<!-- recipe: NAME -->). This test reads those blocks
from the README, changes only what must differ on one test machine (every
change is a row of SUBST or ACTIONS below, and a row whose README text is
gone fails the test: the table and the README move together), and runs them
on two private PostgreSQL servers (tests/pg/cluster.py), db1 and db2:

    db1-conf    appended to db1's postgresql.conf (after the settings
                cluster.py gives a test server: its port, its socket
                directory); db1's pg_hba.conf is the README's lines, then
                trust for the postgres user alone (Debian's default lets it
                in by peer), so that nothing but those lines lets idemrelay
                and replicator in, by password
    commands    one by one with sh, on the host named by the "# on dbN"
                comment above them: PGHOST and PGPORT are that host's
                server (its socket directory and port), as a host's default
                server is; every password prompt is answered with PASSWORD
                (on stdin: each command runs in a session of its own, with
                no terminal); a systemctl command is an ACTION on the host's
                private server
    node-conf   the store settings of relay1 as written, and of relay2 with
                its own name, after the test's listen, upstream and log
                settings (harness.base_conf less store and node)
    pgpass      written to a file of the test's, mode 0600, which the nodes
                find through PGPASSFILE, set in their environment only (they run
                as the test's user)
    ctl         with sh, once the message is delivered, without PGPASSFILE
                but what the command gives itself

Then a keyed message submitted to relay1 and the same bytes to relay2 must
have one QID (relay2 answers "(duplicate)"), be delivered once, and reach
db2, which db1 lists as its synchronous standby. A command that fails or
does not finish in time fails the test with its output and the server's log.
The "Postfix in front" lines are not run here (cases_postfix.py runs
Postfix with a relayhost).

It runs with E2E_STORE=postgresql only (make test-pg).
"""

import os
import re
import signal
import subprocess

from harness import (DELETE, PG_ONLY, REPO, case, check, eq, expect_reply, make_msg, merge,
                     pgcluster, render_conf, submit, submit_ok, wait_until)
from cases_nodes import check_exactly_once
from cases_ops import CTL

README = os.path.join(REPO, "README.md")
PASSWORD = "recipe-Secret-1"
COMMAND_TIMEOUT = 60

# What is not run as the README says it, and why: (block, README text, test text, why).
SUBST = [
    ("db1-conf", "listen_addresses = '*'", "listen_addresses = '127.0.0.1'",
     "test traffic stays on loopback"),
    ("db1-conf", "10.0.0.0/24", "127.0.0.1/32", "the nodes' network"),
    ("db1-conf", "10.0.0.2/32", "127.0.0.1/32", "db2's address"),
    ("commands", "sudo -u postgres ", "{as_postgres}",
     "runuser -u postgres -- (no sudo policy here; PGHOST and PGPORT kept); run by "
     "another user than root, the servers are that user's (cluster.py), so nothing"),
    ("commands", "-h db1 ", "-h 127.0.0.1 -p {db1_port} ", "db1's address and port"),
    ("commands", "/var/lib/postgresql/15/main", "{db2_data}", "db2's data directory"),
    ("node-conf", "@db1,db2/", "@127.0.0.1:{db1_port},127.0.0.1:{db2_port}/",
     "both servers on loopback, each on a port of its own"),
    ("pgpass", "db1:5432:", "127.0.0.1:{db1_port}:", "db1's address and port"),
    ("pgpass", "db2:5432:", "127.0.0.1:{db2_port}:", "db2's address and port"),
    ("pgpass", "SECRET", "{password}", "what the createuser -P prompt was given"),
    ("ctl", "sudo ", "{as_root}", "the test runs as root, or as a user whose files these are"),
    ("ctl", "/var/lib/idemrelay/.pgpass", "{pgpass}", "the nodes' password file"),
    ("ctl", "idemrelayctl -c /etc/idemrelay/idemrelay.conf", "{ctl} -c {relay1_conf}",
     "this tree's idemrelayctl, relay1's configuration"),
]

# Commands that are an action on the host's private server instead:
# command -> what the test does (host_start below).
ACTIONS = {
    "sudo systemctl restart postgresql": "pg_ctl restart (stop if running, start)",
    "sudo systemctl start postgresql": "pg_ctl start; a server that has no port yet (db2, "
                                       "whose postgresql.conf pg_basebackup copied from db1) "
                                       "gets a port and socket directory of its own first",
}

MARK_RE = re.compile(r"^<!-- recipe: ([a-z0-9-]+) -->\n```[a-z]*\n(.*?)^```$", re.M | re.S)


def readme_blocks():
    """readme_blocks - the README's recipe blocks by name"""
    with open(README) as f:
        text = f.read()
    blocks = {m.group(1): m.group(2) for m in MARK_RE.finditer(text)}
    for name in ("db1-conf", "commands", "node-conf", "pgpass", "ctl"):
        check(name in blocks, "README.md has no block marked <!-- recipe: %s -->" % name)
    return blocks


def substitute(name, text, values):
    """substitute - block name's text with SUBST's rows for it applied; a row whose
    README text is not in the block fails"""
    for block, readme, test, why in SUBST:
        if block != name:
            continue
        check(readme in text, "README block %s no longer says %r (SUBST: %s): update the "
              "table in %s" % (name, readme, why, os.path.basename(__file__)))
        text = text.replace(readme, test.format(**values))
    return text


def commands(text):
    """commands - (host, README command) in order: continuation lines joined, a
    comment "# on dbN ..." naming the host of the commands below it"""
    out, host = [], None
    for line in re.sub(r"\\\n\s*", "", text).splitlines():
        line = line.strip()
        m = re.match(r"# on (db\d)\b", line)
        if m:
            host = m.group(1)
        elif line and not line.startswith("#"):
            check(host is not None, "README command before any '# on dbN': %r" % line)
            out.append((host, line))
    return out


def host_start(c):
    """host_start - what a systemctl command does to a host's private server"""
    if c.port is None:
        c.port = pgcluster.free_port()
        c.configure(port=c.port, unix_socket_directories=c.sock)
    c.restart()


def sh(c, written, cmd):
    """sh - cmd with sh on host c (its server the default one; None: none),
    prompts answered with PASSWORD, within COMMAND_TIMEOUT; fails with its
    output"""
    env = dict(os.environ)
    for name in ("PGHOST", "PGPORT", "PGPASSFILE"):
        env.pop(name, None)
    if c is not None:
        env["PGHOST"] = c.sock
    if c is not None and c.port:
        env["PGPORT"] = str(c.port)
    p = subprocess.Popen(["sh", "-c", cmd], env=env, cwd="/", stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        out, _ = p.communicate(("%s\n" % PASSWORD * 2).encode(), COMMAND_TIMEOUT)
        why = "exited %d" % p.returncode if p.returncode else None
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        why = "did not finish within %d s" % COMMAND_TIMEOUT
    check(why is None, "README command on %s %s:\n  as written: %s\n  as run:     %s\n%s\n%s"
          % (c.name if c else "a node", why, written, cmd, out.decode(errors="replace").rstrip(),
             c.log_tail(20) if c else ""))


def private_servers(t):
    """private_servers - db1 (initdb'd, not started) and db2 (an empty place for
    its data directory); both go with the test"""
    db1 = pgcluster.Cluster("db1")
    t.pg_clusters.append(db1)
    with open(os.path.join(t.tmp, "pg-clusters"), "a") as f:
        f.write(db1.base + "\n")
    db1.init()
    db2 = pgcluster.Cluster("db2", db1.base)
    db1.standbys.append(db2)
    for c in (db1, db2):
        t.extra_logs.append(("postgresql log %s" % c.name, c.log_path))
    return db1, db2


def db1_conf(db1, text):
    """db1_conf - the README's postgresql.conf and pg_hba.conf lines on db1"""
    files = {}
    name = None
    for line in text.splitlines():
        m = re.match(r"# (postgresql\.conf|pg_hba\.conf)\b", line)
        if m:
            name = m.group(1)
        elif line.strip() and not line.startswith("#"):
            check(name is not None, "README db1-conf line before a file name: %r" % line)
            files.setdefault(name, []).append(line)
    eq(sorted(files), ["pg_hba.conf", "postgresql.conf"], "files of the README's db1-conf")
    with open(os.path.join(db1.data, "postgresql.conf"), "a") as f:
        f.write("# README.md\n" + "\n".join(files["postgresql.conf"]) + "\n")
    with open(os.path.join(db1.data, "pg_hba.conf"), "w") as f:
        f.write("# README.md\n" + "\n".join(files["pg_hba.conf"]) + "\n"
                "# tests/e2e/cases_recipe.py: the postgres user only\n"
                "local all postgres trust\n"
                "host all postgres 127.0.0.1/32 trust\n")


def node(t, sink, name, text, pgpass):
    """node - a daemon whose store settings are the README's text, finding its
    password in the file pgpass (PGPASSFILE in its environment alone)"""
    d = t.daemon(sink, {"store": {"url": "README"}}, start=False, node=name)
    d.env["PGPASSFILE"] = pgpass
    d.conf = merge(d.conf, {"store": DELETE, "node": DELETE})
    with open(d.conf_path, "w") as f:
        f.write(render_conf(d.conf) + "# README.md\n" + text)
    return d.start()


@case(timeout=240, stores=PG_ONLY)
def test_readme_several_nodes(t):
    """README's "Several nodes": a primary and a synchronous standby set up by its
    commands, two nodes by its configuration; a retry on the second node is
    answered with the first one's QID, and the message is delivered once."""
    blocks = readme_blocks()
    db1, db2 = private_servers(t)
    hosts = {"db1": db1, "db2": db2}
    values = dict(db1_port=db1.port, db2_port=None, db2_data=db2.data, password=PASSWORD,
                  as_postgres="runuser -u postgres -- " if pgcluster.as_root() else "",
                  as_root="", ctl=CTL)
    db1_conf(db1, substitute("db1-conf", blocks["db1-conf"], values))

    written = commands(blocks["commands"])
    for (host, readme), (_, cmd) in zip(written, commands(substitute("commands",
                                                                     blocks["commands"], values))):
        if readme in ACTIONS:
            host_start(hosts[host])
        else:
            sh(hosts[host], readme, cmd)
    check(db2.running(), "db2 is not running after the README's commands")
    wait_until(lambda: db1.sql("SELECT sync_state FROM pg_stat_replication "
                               "WHERE application_name = 'db2'") == "sync", 30,
               "db1 to list db2 as its synchronous standby")

    values["db2_port"] = db2.port
    values["pgpass"] = pgpass = os.path.join(t.tmp, "pgpass")
    with open(pgpass, "w") as f:
        f.write(substitute("pgpass", blocks["pgpass"], values))
    os.chmod(pgpass, 0o600)

    sink = t.sink()
    conf = substitute("node-conf", blocks["node-conf"], values)
    check('node = "relay1";' in conf, "README node-conf does not name relay1")
    relay1 = node(t, sink, "relay1", conf, pgpass)
    relay2 = node(t, sink, "relay2", conf.replace('node = "relay1";', 'node = "relay2";'),
                  pgpass)
    values["relay1_conf"] = relay1.conf_path

    msg = make_msg(key="order-42-confirmation", frm="shop@example.com",
                   to="customer@example.net")
    qid = submit_ok(relay1.port, "customer@example.net", msg, sender="shop@example.com")
    r = submit(relay2.port, "customer@example.net", msg, sender="shop@example.com")
    expect_reply(r.data, 250, "2.0.0", "the retry on relay2")
    eq(r.qid, qid, "QID of the retry on relay2")
    check("(duplicate)" in r.text, "relay2's reply to the retry: %r" % r.text)
    check_exactly_once([sink], [qid], timeout=30)
    wait_until(lambda: db2.sql("SELECT count(*) FROM claims WHERE qid = '%s'" % qid,
                               "idemrelay") == "1", 15, "the claim on db2")
    eq(db1.sql("SELECT sync_state FROM pg_stat_replication WHERE application_name = 'db2'"),
       "sync", "db2's state on db1 at the end")
    for readme, cmd in zip(blocks["ctl"].splitlines(),
                           substitute("ctl", blocks["ctl"], values).splitlines()):
        if readme.strip() and not readme.startswith("#"):
            sh(None, readme, cmd)
