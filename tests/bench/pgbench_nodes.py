"""
NAME
    pgbench_nodes.py - the PostgreSQL part of make bench (issue 14): a private
    cluster, a database per setup, and where the time goes by its own counters

SYNOPSIS
    import pgbench_nodes
    pg = pgbench_nodes.PgBench(tmp).start()
    url, db = pg.database("pg1")
    c = pgbench_nodes.Counters(pg, db, [metrics_port])
    s0 = c.snap(); ...run...; c.add("fresh", s0, c.snap(), msgs)
    for line in c.report("pg1"): print(line)
    for line in pgbench_nodes.capacity(res): print(line)   # issue 27's model
    pg.stop()

DESCRIPTION
    PgBench starts a private PostgreSQL cluster with tests/pg/cluster.py
    (initdb as user postgres, loopback only, fsync and synchronous_commit
    on) in the bench's temporary directory, on the disk the LMDB store
    uses. Two settings differ from cluster.py's test clusters, set with
    ALTER SYSTEM and a restart: shared_buffers goes back to PostgreSQL's
    default (128MB; the test clusters keep 16MB), and pg_stat_statements
    is loaded through shared_preload_libraries when the server has it.
    Every other setting is PostgreSQL's default, as Postfix's are.
    track_planning() turns on pg_stat_statements.track_planning, for the
    runs that say where the time goes (it costs a little).

    database() makes a fresh database owned by the role idemrelay for one
    setup (pg1: one node; pg2: two nodes sharing it).

    Counters reads PostgreSQL's cumulative statistics, from the postgres
    database so that its own reads do not count in the one measured:
      pg_stat_wal           wal_records, wal_bytes, wal_write, wal_sync
                            (cluster-wide: the only other work on this
                            cluster is the other setup's idle nodes)
      pg_stat_database      xact_commit, xact_rollback, tup_inserted,
                            tup_updated, tup_deleted of the database
      pg_stat_all_tables    the same rows by table, TOAST tables named
                            after theirs (read in the database itself: one
                            more transaction there per snapshot)
      pg_stat_statements    calls, rows and execution time per statement
                            (top level; absent if it could not be loaded);
                            report() lists those run 0.005 times a message
                            or more, and the rarer ones whose rows come to
                            that much (the duplicates' counts flushed once
                            a second: a row per message named, each time)
    each node's /metrics: idemrelay_commit_batch_size count and sum, the
    group commits that decided submissions; and the TCP data segments on
    each node's connections to PostgreSQL (ss -ti: data_segs_out, the
    node's sends, and data_segs_in): libpq sets TCP_NODELAY and a
    pipeline goes out in one write, so a send is a round trip (a
    connection closed within the window is missed). add() sums the
    differences; report() divides them by the messages and by the
    batches. Each snapshot also reads the tables' sizes (heap, TOAST and
    indexes: pg_total_relation_size), so that a run's growth a message is
    its row bytes. Over each run alone (not the settling), measure() also
    takes the CPU of the nodes, of PostgreSQL's processes (/proc), of the
    load programs it waited for and of the sink, the run's seconds, and the
    machine's idle share, and Waits samples what the database's busy
    backends wait for (pg_stat_activity, one psql every 4 ms: a little
    CPU of its own in those runs, not in the figures).

    A backend sends its statistics when idle, but at most once a second,
    and else 10 s later (PGSTAT_IDLE_INTERVAL): snap() waits STATS_SETTLE
    seconds first, so that what a run did is all in the next snapshot
    (pg_stat_statements counts at once). Each snapshot scrapes the
    nodes' /metrics, which costs each node two reads of the database
    (claims and queue counts): a few transactions in thousands.
"""

import json
import os
import resource
import re
import glob
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "pg"))
import cluster as pgcluster  # noqa: E402

STATS_SETTLE = 11.0     # seconds: an idle backend reports within 10 s (PGSTAT_IDLE_INTERVAL)


class PgBench:
    """a private PostgreSQL cluster for the bench, with pg_stat_statements if it loads"""

    def __init__(self, tmp):
        self.base = os.path.join(tmp, "pg")
        os.makedirs(self.base, exist_ok=True)
        self.pg = pgcluster.Cluster("bench", self.base)
        self.statements = False
        self.version = "?"

    def start(self):
        self.pg.start()
        self.version = self.pg.sql("SHOW server_version")
        lib = os.path.join(self.pg.sql("SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR'"),
                           "pg_stat_statements.so")
        self.pg.sql("ALTER SYSTEM SET shared_buffers = '128MB'")
        if os.path.exists(lib):
            self.pg.sql("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
        self.pg.restart()
        if os.path.exists(lib):
            self.pg.sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            self.statements = True
        return self

    def track_planning(self):
        """track_planning - pg_stat_statements counts planning time from now on (the
        daemon's statements are unnamed, so planned at every call); it costs a little,
        so only the runs that say where the time goes have it"""
        if self.statements:
            self.pg.sql("ALTER SYSTEM SET pg_stat_statements.track_planning = on")
            self.pg.sql("SELECT pg_reload_conf()")

    def database(self, name):
        """database - a fresh database for one setup; (its URL, its name)"""
        url = self.pg.new_database(name)
        return url, url.rsplit("/", 1)[1]

    def settings(self):
        """settings - what the figures depend on, as PostgreSQL reports it"""
        rows = self.pg.sql("SELECT name || '=' || setting || coalesce(unit, '') FROM pg_settings"
                           " WHERE name IN ('fsync', 'synchronous_commit', 'wal_sync_method',"
                           " 'shared_buffers', 'commit_delay', 'wal_level', 'full_page_writes',"
                           " 'shared_preload_libraries', 'pg_stat_statements.track_planning')"
                           " ORDER BY name")
        return rows.replace("\n", ", ")

    def floors(self, n=1000):
        """floors - p50 in ms, one client (PostgreSQL's pgbench), of a round trip
        (SELECT 1) and of the least durable commit (one autocommit INSERT of a row:
        a round trip and a WAL flush), on this cluster and disk"""
        url, db = self.database("bench_floor")
        self.pg.sql("CREATE TABLE f (v int)", db, pgcluster.ROLE)
        out = {}
        for what, sql in (("round_trip", "SELECT 1;\n"), ("commit", "INSERT INTO f VALUES (1);\n")):
            script = os.path.join(self.base, "%s.sql" % what)
            with open(script, "w") as f:
                f.write(sql)
            prefix = os.path.join(self.base, "floor-" + what)
            subprocess.run([pgcluster.prog("pgbench"), "-n", "-c", "1", "-t", str(n), "-f", script,
                            "-l", "--log-prefix", prefix, url], check=True, capture_output=True,
                           timeout=300)
            lat = []
            for log in glob.glob(prefix + ".*"):
                with open(log) as f:
                    lat += [int(line.split()[2]) / 1000.0 for line in f if line.strip()]
                os.unlink(log)
            out[what] = statistics.median(lat)
        return out

    def stop(self):
        self.pg.destroy()


class Waits:
    """what the database's busy backends wait for, sampled every few milliseconds
    from pg_stat_activity by one psql while a run goes on (a script of SAMPLES
    queries and sleeps, stopped with the run); stop() gives {event: samples},
    "CPU" for a backend active and waiting for nothing, "ClientRead" in a
    transaction for one waiting on its node between statements"""

    SAMPLES = 20000
    QUERY = ("SELECT CASE WHEN wait_event IS NULL THEN 'CPU' ELSE wait_event_type || ':' ||"
             " wait_event END FROM pg_stat_activity WHERE datname = '%s' AND state <> 'idle'"
             " AND pid <> pg_backend_pid();\nSELECT pg_sleep(0.004);\n")

    def __init__(self, pg, db):
        self.path = os.path.join(os.path.dirname(pg.data), "waits-%s.sql" % db)
        with open(self.path, "w") as f:
            f.write(self.QUERY % db * self.SAMPLES)
        self.out = self.path + ".out"
        with open(self.out, "w") as out:
            self.proc = subprocess.Popen([pgcluster.prog("psql"), "-X", "-q", "-A", "-t",
                                          "-d", pg.url("postgres", pgcluster.SUPERUSER),
                                          "-f", self.path], stdout=out,
                                         stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        seen = {}
        with open(self.out) as f:
            for line in f:
                if line.strip():
                    seen[line.strip()] = seen.get(line.strip(), 0) + 1
        os.unlink(self.path)
        os.unlink(self.out)
        return seen


def scrape(port):
    """scrape - a node's /metrics: (accepting batches, submissions decided in them)"""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        text = r.read().decode()
    count = re.search(r"^idemrelay_commit_batch_size_count (\d+)", text, re.M)
    total = re.search(r"^idemrelay_commit_batch_size_sum ([0-9.e+]+)", text, re.M)
    return (int(count.group(1)) if count else 0, float(total.group(1)) if total else 0.0)


class Counters:
    """PostgreSQL's counters for one database (and its nodes' batches), per figure"""

    FIELDS = ("wal_records", "wal_bytes", "wal_write", "wal_sync", "xact_commit",
              "xact_rollback", "tup_inserted", "tup_updated", "tup_deleted", "batches",
              "batched")

    def __init__(self, bench, db, metrics_ports, pids, sink_pids=()):
        self.bench = bench
        self.sink_pids = set(sink_pids)
        self.db = db
        self.ports = list(metrics_ports)
        self.pids = set(pids)
        # figure -> {"msgs": n, field: sum, "stmts": {text: [calls, rows, exec ms, plan ms]},
        #            "tables": {name: [ins, upd, del]}}
        self.figs = {}
        self.last = None        # the latest snapshot, if nothing ran since

    def measure(self, fig, msgs, fn):
        """measure - fn(), one run of msgs messages, between settled snapshots, its
        counts added to fig's; fn's result. fn must leave nothing in flight (wait
        for the deliveries): the snapshot after it is the next one's before. The
        CPU and the wait events are taken over fn() alone, not the settling."""
        before = self.last or self.snap()
        waits = Waits(self.bench.pg, self.db)
        c0 = self.cpu()
        t0 = time.monotonic()
        try:
            out = fn()
        finally:
            c1 = self.cpu()
            c1["secs"] = time.monotonic() - t0
            c0["secs"] = 0.0
            seen = waits.stop()
        self.last = self.snap()
        self.add(fig, before, self.last, msgs)
        f = self.figs[fig]
        for k in c0:
            f[k] = f.get(k, 0.0) + c1[k] - c0[k]
        w = f.setdefault("waits", {})
        for k, v in seen.items():
            w[k] = w.get(k, 0) + v
        return out

    def cpu(self):
        """cpu - CPU seconds so far of the nodes ("cpu_nodes") and of PostgreSQL's
        processes ("cpu_pg": this database's backends and the cluster's own, the
        WAL writer's and checkpointer's; not the backends of other databases, the
        other setups' idle nodes and Waits' psql), and the machine's idle and
        total jiffies from /proc/stat"""
        tick = float(os.sysconf("SC_CLK_TCK"))
        pm = pgcluster.postmaster_pid(self.bench.pg.data)
        pg = set([pm] + pgcluster.children_of(pm)) if pm else set()
        out = {"cpu_nodes": 0.0, "cpu_pg": 0.0, "cpu_clients": 0.0}
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)  # the load programs, once reaped
        out["cpu_clients"] = ru.ru_utime + ru.ru_stime
        for pid in self.sink_pids:
            try:
                with open("/proc/%d/stat" % pid) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                out["cpu_clients"] += (int(fields[11]) + int(fields[12])) / tick
            except OSError:
                pass
        for pid in self.pids | pg:
            try:
                with open("/proc/%d/cmdline" % pid) as f:
                    title = " %s " % f.read().replace("\0", " ")
                with open("/proc/%d/stat" % pid) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue        # gone: what it used is lost (the pools' backends stay)
            if pid in pg and "(" in title and " %s " % self.db not in title:
                continue        # a client's backend, of another database
            out["cpu_pg" if pid in pg else "cpu_nodes"] += (int(fields[11]) + int(fields[12])) / tick
        with open("/proc/stat") as f:
            j = [float(x) for x in f.readline().split()[1:]]
        out["jiffies_idle"], out["jiffies"] = j[3] + j[4], sum(j[:8])
        return out

    def snap(self):
        time.sleep(STATS_SETTLE)
        stmts = "'[]'"
        if self.bench.statements:
            stmts = ("(SELECT coalesce(json_agg(json_build_object("
                     "'q', left(regexp_replace(query, '\\s+', ' ', 'g'), 90), 'calls', calls,"
                     " 'rows', rows, 'ms', total_exec_time, 'plan', total_plan_time)), '[]')"
                     " FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
                     " WHERE d.datname = '%s' AND toplevel)" % self.db)
        out = self.bench.pg.sql(
            "SELECT json_build_object("
            "'wal', (SELECT row_to_json(w) FROM pg_stat_wal w),"
            "'db', (SELECT row_to_json(d) FROM pg_stat_database d WHERE datname = '%s'),"
            "'stmts', %s)" % (self.db, stmts))
        j = json.loads(out)
        s = {k: float(j["wal"][k]) for k in ("wal_records", "wal_bytes", "wal_write", "wal_sync")}
        for k in ("xact_commit", "xact_rollback", "tup_inserted", "tup_updated", "tup_deleted"):
            s[k] = float(j["db"][k])
        s["batches"] = s["batched"] = 0.0
        for p in self.ports:
            b, t = scrape(p)
            s["batches"] += b
            s["batched"] += t
        s["socks"] = self.segments()
        s["tables"] = json.loads(self.bench.pg.sql(
            "SELECT coalesce(json_object_agg(coalesce(o.relname || ' (TOAST)', t.relname),"
            " json_build_array(t.n_tup_ins, t.n_tup_upd, t.n_tup_del)), '{}')"
            " FROM pg_stat_all_tables t LEFT JOIN pg_class o ON o.reltoastrelid = t.relid"
            " WHERE t.schemaname NOT IN ('pg_catalog', 'information_schema')"
            " AND coalesce(o.relnamespace <> 'pg_catalog'::regnamespace, true)"
            " AND t.n_tup_ins + t.n_tup_upd + t.n_tup_del > 0", self.db))
        s["rel_bytes"] = json.loads(self.bench.pg.sql(
            "SELECT coalesce(json_object_agg(c.relname, pg_total_relation_size(c.oid)), '{}')"
            " FROM pg_class c WHERE c.relkind = 'r'"
            " AND c.relnamespace = current_schema()::regnamespace",
            self.db, pgcluster.ROLE))
        s["stmts"] = {}
        for x in j["stmts"]:        # one row per (user, statement): add them up by text
            a = s["stmts"].setdefault(x["q"], [0.0, 0.0, 0.0, 0.0])
            a[0] += x["calls"]
            a[1] += x["rows"]
            a[2] += x["ms"]
            a[3] += x["plan"]
        return s

    def segments(self):
        """segments - {local port: (data segments sent, received)} of the nodes'
        TCP connections to PostgreSQL"""
        r = subprocess.run(["ss", "-tinpH", "state", "established",
                            "( dport = :%d )" % self.bench.pg.port],
                           capture_output=True, text=True, timeout=30)
        out = {}
        for sock, info in re.findall(r"^\S*\s*\d+\s+\d+\s+\S+:(\d+)\s+(.*\n\s+.*)$",
                                     r.stdout, re.M):
            pid = re.search(r"pid=(\d+)", info)
            sent = re.search(r"data_segs_out:(\d+)", info)
            got = re.search(r"data_segs_in:(\d+)", info)
            if pid and int(pid.group(1)) in self.pids:
                out[sock] = (int(sent.group(1)) if sent else 0, int(got.group(1)) if got else 0)
        return out

    def add(self, fig, before, after, msgs):
        f = self.figs.setdefault(fig, {"msgs": 0, "stmts": {}})
        f["msgs"] += msgs
        for k in self.FIELDS:
            f[k] = f.get(k, 0.0) + after[k] - before[k]
        grew = f.setdefault("rel_bytes", {})
        for name, a in after.get("rel_bytes", {}).items():
            grew[name] = grew.get(name, 0) + a - before.get("rel_bytes", {}).get(name, 0)
        tables = f.setdefault("tables", {})
        for name, a in after["tables"].items():
            b = before["tables"].get(name, [0, 0, 0])
            t = tables.setdefault(name, [0, 0, 0])
            for i in range(3):
                t[i] += a[i] - b[i]
        for i, k in enumerate(("sends", "recvs")):
            f[k] = f.get(k, 0.0) + sum(v[i] - before["socks"].get(sock, (0, 0))[i]
                                       for sock, v in after["socks"].items())
        for q, a in after["stmts"].items():
            b = before["stmts"].get(q, [0.0, 0.0, 0.0, 0.0])
            d = [a[i] - b[i] for i in range(4)]
            if d[0] > 0:
                t = f["stmts"].setdefault(q, [0.0, 0.0, 0.0, 0.0])
                for i in range(4):
                    t[i] += d[i]

    def summary(self, fig):
        """summary - a figure's per-message and per-batch ratios, as a dict (for the JSON)"""
        f = self.figs.get(fig)
        if not f or not f["msgs"]:
            return None
        m, b = float(f["msgs"]), f["batches"]
        calls = sum(a[0] for a in f["stmts"].values())
        rows = f["tup_inserted"] + f["tup_updated"] + f["tup_deleted"]
        out = {"msgs": f["msgs"], "batches": b,
               "msgs_per_batch": f["batched"] / b if b else None,
               "xacts_per_msg": f["xact_commit"] / m,
               "rollbacks": f["xact_rollback"],
               "statements_per_msg": calls / m if self.bench.statements else None,
               "exec_ms_per_msg": sum(a[2] for a in f["stmts"].values()) / m,
               "plan_ms_per_msg": sum(a[3] for a in f["stmts"].values()) / m,
               "wal_records_per_msg": f["wal_records"] / m,
               "wal_bytes_per_msg": f["wal_bytes"] / m,
               "wal_syncs_per_msg": f["wal_sync"] / m,
               "wal_writes_per_msg": f["wal_write"] / m,
               "rows_per_msg": rows / m,
               "round_trips_per_msg": f["sends"] / m, "replies_per_msg": f["recvs"] / m,
               "ins_upd_del_per_msg": [f["tup_inserted"] / m, f["tup_updated"] / m,
                                       f["tup_deleted"] / m]}
        if b:
            out.update({"wal_syncs_per_batch": f["wal_sync"] / b,
                        "xacts_per_batch": f["xact_commit"] / b, "rows_per_batch": rows / b,
                        "round_trips_per_batch": f["sends"] / b,
                        "statements_per_batch": calls / b if self.bench.statements else None})
        out["row_bytes_per_msg"] = sum(f.get("rel_bytes", {}).values()) / m
        out["row_bytes_by_table"] = {k: v / m for k, v in f.get("rel_bytes", {}).items() if v}
        if f.get("jiffies"):
            out.update({"cpu_ms_per_msg_nodes": f["cpu_nodes"] * 1000 / m,
                        "cpu_ms_per_msg_pg": f["cpu_pg"] * 1000 / m,
                        "cpu_ms_per_msg_clients": f["cpu_clients"] * 1000 / m,
                        "idle_share": f["jiffies_idle"] / f["jiffies"],
                        "msgs_per_s": m / f["secs"] if f.get("secs") else None})
        n_w = float(sum(f.get("waits", {}).values()))
        out["waits"] = sorted(((k, v / n_w) for k, v in f.get("waits", {}).items()),
                              key=lambda kv: -kv[1]) if n_w else []
        out["tables_per_msg"] = {name: [x / m for x in t] for name, t in f.get("tables", {}).items()
                                 if any(t)}
        top = sorted(f["stmts"].items(), key=lambda kv: -kv[1][0])
        out["top_statements"] = [{"per_msg": a[0] / m, "rows_per_call": a[1] / a[0] if a[0] else 0,
                                  "mean_ms": a[2] / a[0] if a[0] else 0,
                                  "plan_ms": a[3] / a[0] if a[0] else 0, "query": q}
                                 for q, a in top]
        return out

    def summaries(self):
        return {fig: self.summary(fig) for fig in self.figs}

    def report(self, who):
        """report - lines saying where the time goes in each figure of this setup"""
        lines = []
        for fig in self.figs:
            s = self.summary(fig)
            if s is None:
                continue
            lines.append("where the time goes, %s %s: %d msgs, %d accepting batches%s"
                         % (who, fig, s["msgs"], s["batches"],
                            " (%.1f submissions each)" % s["msgs_per_batch"]
                            if s["msgs_per_batch"] else ""))
            lines.append("  per message: %.2f round trips (%.2f reply segments), %.2f commits,"
                         " %s statements, %.1f WAL records,"
                         " %.0f WAL bytes, %.2f WAL flushes (fdatasync), %.2f WAL writes,"
                         " %.1f rows written (%.1f ins, %.1f upd, %.1f del)"
                         % (s["round_trips_per_msg"], s["replies_per_msg"], s["xacts_per_msg"],
                            "%.2f" % s["statements_per_msg"] if s["statements_per_msg"] is not None
                            else "n/a", s["wal_records_per_msg"], s["wal_bytes_per_msg"],
                            s["wal_syncs_per_msg"], s["wal_writes_per_msg"], s["rows_per_msg"],
                            *s["ins_upd_del_per_msg"]))
            lines.append("  rows per message by table (ins/upd/del): " + ", ".join(
                "%s %.1f/%.1f/%.1f" % (name, *t) for name, t in sorted(s["tables_per_msg"].items())))
            if "idle_share" in s:
                lines.append("  CPU per message: %.3f ms in PostgreSQL's processes, %.3f ms in"
                             " the node%s, %.3f ms in the load and sink; the machine %.0f%% idle"
                             % (s["cpu_ms_per_msg_pg"], s["cpu_ms_per_msg_nodes"],
                                "s" if len(self.pids) > 1 else "", s["cpu_ms_per_msg_clients"],
                                100 * s["idle_share"]))
            if s["row_bytes_by_table"]:
                lines.append("  bytes the tables grew per message (heap, TOAST, indexes): %.0f (%s)"
                             % (s["row_bytes_per_msg"], ", ".join(
                                 "%s %.0f" % kv for kv in sorted(s["row_bytes_by_table"].items()))))
            if s["waits"]:
                lines.append("  busy backends were (samples of pg_stat_activity): " + ", ".join(
                    "%s %.0f%%" % (k, 100 * v) for k, v in s["waits"][:6]))
            if self.bench.statements:
                lines.append("  server time per message: %.3f ms executing, %.3f ms planning"
                             " (pg_stat_statements)" % (s["exec_ms_per_msg"], s["plan_ms_per_msg"]))
            if s["batches"]:
                lines.append("  per accepting batch: %.2f round trips, %.2f commits, %s statements,"
                             " %.2f WAL flushes, %.1f rows written (every commit, delivery's"
                             " included)" % (s["round_trips_per_batch"], s["xacts_per_batch"],
                                "%.1f" % s["statements_per_batch"]
                                if s["statements_per_batch"] is not None else "n/a",
                                s["wal_syncs_per_batch"], s["rows_per_batch"]))
            if s["rollbacks"]:
                lines.append("  rollbacks: %d" % s["rollbacks"])
            for t in s["top_statements"]:
                rows = t["per_msg"] * t["rows_per_call"]
                if t["per_msg"] >= 0.005:
                    lines.append("  %6.3f/msg %6.2f rows %7.3f ms exec %7.3f ms plan  %s"
                                 % (t["per_msg"], t["rows_per_call"], t["mean_ms"],
                                    t["plan_ms"], t["query"]))
                elif rows >= 0.005:     # rare but many rows a call: the counts' flush, a second
                    lines.append("  %6d calls %6.0f rows each (%.2f/msg) %7.3f ms exec  %s"
                                 % (round(t["per_msg"] * s["msgs"]), t["rows_per_call"], rows,
                                    t["mean_ms"], t["query"]))
        return lines


class Silent:
    """an upstream that takes connections and never answers (they wait in its
    backlog): deliveries stall at the greeting, so no delivery writes run beside
    the submissions; stopped, it resets them"""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1000)
        self.port = self.sock.getsockname()[1]

    def count(self):
        return 0

    def stop(self):
        self.sock.close()


def setups(tmp, stopping, say, make_sink, make_node, make_pair):
    """setups - a private PostgreSQL cluster; on it pg1, one node (bench-a), pg2,
    two nodes (bench-a, bench-b) sharing another database, and pg1-stalled, one
    node whose upstream never answers (Silent), each on a database of its own with
    a sink of its own (make_sink(name)) and PostgreSQL's counters. make_node(sink,
    label, node, url) starts a node with /metrics (its metrics_port), make_pair(label,
    nodes, sink) makes two nodes one server. Every part goes on stopping, the nodes
    before their sinks (a Silent upstream before its node) and the cluster.
    (pg1, pg2, pg1-stalled)"""
    pg = PgBench(tmp)
    stopping.append(pg)
    pg.start()
    say("pg: PostgreSQL %s on 127.0.0.1:%d (%s): %s%s"
        % (pg.version, pg.pg.port, pg.base, pg.settings(),
           "" if pg.statements else "; no pg_stat_statements: commit counts only"))
    out = []
    for label, nodes in (("pg1", ("bench-a",)), ("pg2", ("bench-a", "bench-b")),
                         ("pg1-stalled", ("bench-a",))):
        url, db = pg.database("bench_" + label)
        sink = Silent() if label.endswith("stalled") else make_sink("sink-" + label)
        stopping.insert(0, sink)
        daemons = []
        for node in nodes:
            d = make_node(sink, label, node, url)
            stopping.insert(1 if isinstance(sink, Silent) else 0, d)
            daemons.append(d)
        srv = daemons[0] if len(daemons) == 1 else make_pair(label, daemons, sink)
        srv.counters = Counters(pg, db, [d.metrics_port for d in daemons],
                                [d.proc.pid for d in daemons],
                                [sink.proc.pid] if hasattr(sink, "proc") else [])
        out.append(srv)
    return out


def table(res, fmt):
    """table - issue 14's figures, PostgreSQL (pg1, pg2) beside Postfix and LMDB
    (res: bench.py's Results, fmt its number format); rows of (figure, Postfix,
    LMDB, PostgreSQL, ratio, target, verdict)"""
    rows = []

    def row(label, fig, who, unit, vs, target=None, want=None):
        """vs: whom the ratio is against ("Postfix", or "idemrelay": LMDB's node)"""
        r = res.ratio(fig, who, fig, vs)
        ok = None if r is None or want is None else want(r)
        rows.append((label, fmt(res.med(fig, "Postfix"), unit), fmt(res.med(fig, "idemrelay"), unit),
                     fmt(res.med(fig, who), unit),
                     fmt(r, "x") if r else "n/a (no %s run)" % ("LMDB" if vs == "idemrelay" else vs),
                     target or "-", {True: "met", False: "NOT met", None: "-"}[ok]))

    def ran(fig, who):
        return who in res.v.get(fig, {})

    if ran("fresh", "pg1"):
        row("pg1 fresh accepted/s vs Postfix", "fresh", "pg1", "", "Postfix", ">= 2x",
            lambda r: r >= 2)
        row("pg1 fresh accepted/s vs LMDB", "fresh", "pg1", "", "idemrelay", ">= 0.5x",
            lambda r: r >= 0.5)
        row("pg1 end to end, accepted and delivered, msgs/s", "e2e", "pg1", "", "Postfix")
    if ran("p50", "pg1"):
        row("pg1 one session: p50 of the reply to the dot", "p50", "pg1", " ms", "Postfix",
            "<= 1x", lambda r: r <= 1)
        row("pg1 one session: p99", "p99", "pg1", " ms", "Postfix")
    stalled, pp = res.med("p50_where", "pg1-stalled"), res.med("p50", "Postfix")
    if stalled is not None:
        rows.append(("pg1 one session: p50 with deliveries stalled (accepting alone; one run)",
                     fmt(pp, " ms"), "-", fmt(stalled, " ms"), fmt(stalled / pp, "x") if pp else
                     "n/a (no Postfix run)", "-", "-"))
    for fig, what in (("pg_floor_rt", "a round trip (SELECT 1)"),
                      ("pg_floor_commit", "a one-row autocommit INSERT (1 round trip, 1 WAL flush)")):
        v = res.med(fig, "pg1")
        if v is not None:
            rows.append(("PostgreSQL floor, one pgbench client: %s" % what, fmt(pp, " ms"), "-",
                         fmt(v, " ms"), fmt(v / pp, "x") if pp else "n/a", "-", "-"))
    if ran("dup", "pg1"):
        row("pg1 duplicates answered/s vs Postfix accept/s (same load)", "dup", "pg1", "",
            "Postfix", ">= 5x", lambda r: r >= 5)
    if ran("fresh", "pg2"):
        row("pg2 (2 nodes, 1 database) fresh accepted/s", "fresh", "pg2", "", "Postfix")
        row("pg2 end to end, accepted and delivered, msgs/s", "e2e", "pg2", "", "Postfix")
        r = res.ratio("fresh", "pg2", "fresh", "pg1")
        rows.append(("pg2 fresh accepted/s vs pg1", "-", "-", fmt(res.med("fresh", "pg2")),
                     fmt(r, "x") if r else "n/a", "-", "-"))
    return rows


CAP_CORES = (4, 8, 16)          # the primaries the model is worked for
CAP_LINK = 125e6                # bytes/s to the synchronous standby: 1 Gb/s
CAP_FLUSH_MS = 0.1              # a WAL flush on a server's SSD with a power-loss-safe cache


def capacity(res):
    """capacity - issue 27's capacity model, from pg1's fresh run (one node, 20
    sessions, deliveries beside): PostgreSQL's CPU, WAL bytes, WAL flushes, round
    trips and table bytes a fresh message, accepted and delivered. On paper, for
    one primary of N cores and a synchronous standby serving every node, the
    rate is the least of:

      CPU       N * 1000 / cpu_ms (all of PostgreSQL's processes; a message
                costs the same whichever node accepted it)
      WAL       link / wal_bytes: the WAL goes to the standby (CAP_LINK) and
                to the WAL disk, sequentially
      flushes   1000 / (flushes_per_msg * flush_ms): PostgreSQL makes one WAL
                flush at a time (the WALWrite lock); a flush covers every
                commit ready, and a node batches what arrives while its commit
                is out, so flushes_per_msg falls as the load and the nodes grow
                (0.58 at batches of 11 here); the synchronous standby adds its
                round trip and flush to each commit's latency, not to this
      locks     none that binds: key locks serialise submissions of one key
                only, no row is written by two nodes, and each table's end
                grows under its extension lock (bytes a message / 8 KB pages)

    and checked against this machine's runs at 1 and 2 nodes (pg1, pg2), with
    its own CPU (2 cores / the CPU a message of PostgreSQL, nodes, load and
    sink, pg1's) and its own flush (pgbench's one-row commit, the same run).
    Sets res.extra["capacity"] ({"msgs_per_s", "note", ...}, read by
    targets.py) and returns its lines; [] without pg1's fresh counters."""
    figs = res.extra.get("pg_counters") or {}
    s1 = (figs.get("pg1") or {}).get("fresh")
    if not s1 or s1.get("cpu_ms_per_msg_pg") is None:
        return []
    cpu, wal, flushes = s1["cpu_ms_per_msg_pg"], s1["wal_bytes_per_msg"], s1["wal_syncs_per_msg"]
    by_cores = {n: n * 1000.0 / cpu for n in CAP_CORES}
    link = CAP_LINK / wal
    flush_bound = 1000.0 / (flushes * CAP_FLUSH_MS) if flushes else None
    n_main = 8
    bounds = {"CPU": by_cores[n_main], "link": link}
    if flush_bound:
        bounds["flush"] = flush_bound
    limit = min(bounds, key=bounds.get)
    out = ["capacity model (issue 27 target 4), from pg1's fresh run: a fresh message costs"
           " PostgreSQL %.3f ms of CPU, %.0f WAL bytes, %.2f WAL flushes (batches of %.1f),"
           " %.2f round trips, %.0f bytes of tables (heap, TOAST, indexes)"
           % (cpu, wal, flushes, s1.get("msgs_per_batch") or 0, s1["round_trips_per_msg"],
              s1.get("row_bytes_per_msg") or 0)]
    out.append("  one primary, a synchronous standby, every node: CPU %s msgs/s; the standby's"
               " 1 Gb/s link %.0f; WAL flushes of %.2f ms %s"
               % (", ".join("%d cores %.0f" % (n, by_cores[n]) for n in CAP_CORES), link,
                  CAP_FLUSH_MS, "%.0f" % flush_bound if flush_bound else "-"))
    floor = res.med("pg_floor_commit", "pg1")
    check = {}
    tot = s1["cpu_ms_per_msg_pg"] + s1["cpu_ms_per_msg_nodes"] + s1["cpu_ms_per_msg_clients"]
    cores = os.cpu_count() or 1
    for who in ("pg1", "pg2"):
        s = (figs.get(who) or {}).get("fresh")
        if not s or not s.get("msgs_per_s"):
            continue
        here = {"CPU": cores * 1000.0 / tot}
        if floor and s["wal_syncs_per_msg"]:
            here["flush"] = 1000.0 / (s["wal_syncs_per_msg"] * floor)
        bound = min(here, key=here.get)
        check[who] = {"measured": s["msgs_per_s"], "predicted": here[bound], "bound": bound,
                      "cpu_ms_per_msg_pg": s["cpu_ms_per_msg_pg"],
                      "wal_bytes_per_msg": s["wal_bytes_per_msg"],
                      "wal_syncs_per_msg": s["wal_syncs_per_msg"]}
        out.append("  check, %s here: %.0f msgs/s accepted and delivered; the model %.0f, %s-bound"
                   " (CPU: %d cores / %.3f ms a message of PostgreSQL, nodes, load and sink, %.0f;"
                   " flushes: %.2f a message of %s, %s); PostgreSQL's CPU %.3f ms and WAL %.0f B"
                   " a message" % (who, s["msgs_per_s"], here[bound], bound, cores, tot,
                                   here["CPU"], s["wal_syncs_per_msg"],
                                   "%.2f ms" % floor if floor else "?",
                                   "%.0f" % here["flush"] if "flush" in here else "-",
                                   s["cpu_ms_per_msg_pg"], s["wal_bytes_per_msg"]))
    res.extra["capacity"] = {
        "msgs_per_s": bounds[limit], "cores": n_main, "by_cores": by_cores,
        "link_msgs_per_s": link, "flush_msgs_per_s": flush_bound, "flush_ms": CAP_FLUSH_MS,
        "note": "%d cores, %s-bound; BENCHMARKS.md" % (n_main, limit), "check": check}
    return out
