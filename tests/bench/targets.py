"""
NAME
    targets.py - issue 27's five targets, each met or not, from one make bench run

SYNOPSIS
    from targets import targets
    for line in targets(res, info, fmt): print(line)

DESCRIPTION
    Reads the figures bench.py gathered (its Results: res.v[figure][server]
    is a list of per-round values, res.med() their median, res.ratio() the
    median of per-round ratios) and the machine's probe (info: the disk's
    4 KB write + fdatasync p50 in fsync_p50_us), and says for each target the
    figure measured, the threshold, and MET, NOT MET, REPORTED (a target
    that asks for a figure, not a bound) or "not measured" when this run did
    not produce the figure: never a value from elsewhere.

    The figures each target reads (a figure that another part of the bench
    starts producing under these names is picked up without a change here):

      1  tls          msgs/s, "Postfix" and "idemrelay" (fig_tls)
         tls_cpu_ms   CPU a message, both (fig_tls)
      2  p50          one session's p50 in ms, "idemrelay" (LMDB, fig_latency),
                      against the disk's own flush: fsync_p50_us, "disk",
                      probed in each latency round (else info["fsync_p50_us"],
                      probed at the start)
         p50_new, p50_grown
                      "idemrelay": one session's p50 on a new store and on the
                      same store grown by res.extra["grown_msgs"] messages
      3  p50          "pg1" against "Postfix", a new database
         p50_grown    "pg1" (and "Postfix" if measured alike) after
                      res.extra["grown_msgs_pg"] messages
         res.extra["pg_counters"]["pg1"]["fresh"]["cpu_ms_per_msg_pg"]
                      PostgreSQL's own CPU a fresh message (fig_where)
      4  res.extra["pg_counters"]["pg1"]["fresh"]: the capacity model's
                      inputs (PostgreSQL CPU, WAL bytes, round trips, rows a
                      fresh message); res.extra["capacity"], if set, a dict
                      with "msgs_per_s" (the model's answer) and "note"
      5  dup, dup_cpu_ms  duplicates answered/s and CPU a duplicate
                      ("idemrelay", "pg1"), Postfix's CPU a message of the
                      same load accepted and delivered (fig_dup); for pg1
                      also res.extra["pg_counters"]["pg1"]["dup"]: PostgreSQL's
                      own CPU a duplicate in fig_where's run
"""


def _verdict(ok):
    return {True: "MET", False: "NOT MET", None: "not measured"}[ok]


def targets(res, info, fmt):
    """targets - the block's lines: a heading with the disk's floor, then one
    or more lines per target"""
    out = []
    fs50 = info.get("fsync_p50_us")
    floor = res.med("floor", "idemrelay")
    fs_rounds = res.med("fsync_p50_us", "disk")
    out.append("targets (issue 27), medians of this run's rounds; the disk's floor: 4 KB"
               " write + fdatasync p50 %s us, p99 %s us at the start%s%s"
               % (fs50 if fs50 is not None else "?", info.get("fsync_p99_us", "?"),
                  ", p50 %d us in the latency rounds" % fs_rounds if fs_rounds is not None
                  else "",
                  "; LMDB's durable commit (1 page, 2 ordered flushes) p50 %s" % fmt(floor, " ms")
                  if floor is not None else ""))

    load = info.get("loadavg_start")
    if load is not None and load > 1:
        out.append("  (load average %.1f at the start: other work shares the cores, so the"
                   " rates and their ratios are noisy; the CPU a message is steadier)" % load)

    def line(num, what, measured, threshold, ok):
        out.append("  %s %-62s %-36s %-10s %s" % (num, what, measured, threshold,
                                                  ok if isinstance(ok, str) else _verdict(ok)))

    # 1: STARTTLS + AUTH, a connection a message
    r = res.ratio("tls", "idemrelay", "tls", "Postfix")
    line("1", "STARTTLS + AUTH, a connection a message, vs Postfix",
         "%s (%s vs %s msgs/s)" % (fmt(r, "x"), fmt(res.med("tls", "idemrelay")),
                                  fmt(res.med("tls", "Postfix"))) if r else "-",
         ">= 3x", None if r is None else r >= 3)
    c_ir, c_pf = res.med("tls_cpu_ms", "idemrelay"), res.med("tls_cpu_ms", "Postfix")
    if c_ir is not None or c_pf is not None:
        line(" ", "  its CPU a message, idemrelay vs Postfix", "%s vs %s"
             % (fmt(c_ir, " ms"), fmt(c_pf, " ms")), "-", "REPORTED")

    # 2: LMDB one-session p50 against the disk's flush (probed in the latency
    # rounds, else at the start), and flat as the store grows
    p50 = res.med("p50", "idemrelay")
    fs = fs_rounds if fs_rounds is not None else fs50
    if p50 is not None and fs:
        x = p50 * 1000.0 / fs
        line("2", "LMDB one-session p50 / the disk's fdatasync p50",
             "%s (%s / %d us%s)" % (fmt(x, "x"), fmt(p50, " ms"), fs,
                                    "" if fs_rounds is not None else ", at the start"),
             "<= 2x", x <= 2)
    else:
        line("2", "LMDB one-session p50 / the disk's fdatasync p50", "-", "<= 2x", None)
    new, grown = res.med("p50_new", "idemrelay"), res.med("p50_grown", "idemrelay")
    n_grown = res.extra.get("grown_msgs")
    if new and grown is not None:
        x = grown / new
        line(" ", "  flat as it grows: after %s messages / new store"
             % ("{:,}".format(n_grown) if n_grown else "?"),
             "%s (%s / %s)" % (fmt(x, "x"), fmt(grown, " ms"), fmt(new, " ms")), "<= 1.2x",
             x <= 1.2 if n_grown and n_grown >= 1_000_000 else
             "NOT MET (fewer than 1,000,000 messages)" if x <= 1.2 else False)
    else:
        line(" ", "  flat as it grows: after 1,000,000 messages / new store", "-", "<= 1.2x",
             None)

    # 3: PostgreSQL one-session p50 against Postfix, new and grown; its CPU a message
    r = res.ratio("p50", "pg1", "p50", "Postfix")
    line("3", "PostgreSQL one-session p50 / Postfix's, new database",
         "%s (%s vs %s)" % (fmt(r, "x"), fmt(res.med("p50", "pg1"), " ms"),
                            fmt(res.med("p50", "Postfix"), " ms")) if r else "-",
         "<= 0.6x", None if r is None else r <= 0.6)
    g_pg = res.med("p50_grown", "pg1")
    g_pf = res.med("p50_grown", "Postfix") or res.med("p50", "Postfix")
    n_pg = res.extra.get("grown_msgs_pg")
    if g_pg is not None and g_pf:
        x = g_pg / g_pf
        line(" ", "  the same after %s messages" % ("{:,}".format(n_pg) if n_pg else "?"),
             "%s (%s vs %s)" % (fmt(x, "x"), fmt(g_pg, " ms"), fmt(g_pf, " ms")), "<= 0.6x",
             x <= 0.6 if n_pg and n_pg >= 100_000 else
             "NOT MET (fewer than 100,000 messages)" if x <= 0.6 else False)
    else:
        line(" ", "  the same after 100,000 messages", "-", "<= 0.6x", None)
    fresh_pg = ((res.extra.get("pg_counters") or {}).get("pg1") or {}).get("fresh") or {}
    cpu_pg = fresh_pg.get("cpu_ms_per_msg_pg")
    line(" ", "  PostgreSQL's own CPU a fresh message (all its processes)",
         fmt(cpu_pg, " ms") if cpu_pg is not None else "-", "<= 0.2 ms",
         None if cpu_pg is None else cpu_pg <= 0.2)

    # 4: the capacity model: its inputs measured here, the model in BENCHMARKS.md
    inputs = [(k, fresh_pg.get(k)) for k in ("cpu_ms_per_msg_pg", "wal_bytes_per_msg",
                                              "round_trips_per_msg", "rows_per_msg")]
    cap = res.extra.get("capacity")
    if all(v is not None for _, v in inputs):
        line("4", "capacity model inputs, a fresh message on PostgreSQL",
             "CPU %s, WAL %.0f B, %.1f round trips, %.1f rows"
             % (fmt(inputs[0][1], " ms"), inputs[1][1], inputs[2][1], inputs[3][1]),
             "measured", "REPORTED")
    else:
        line("4", "capacity model inputs, a fresh message on PostgreSQL", "-", "measured", None)
    if cap and cap.get("msgs_per_s") is not None:
        line(" ", "  the model: one primary with a synchronous standby",
             "%s msgs/s%s" % (fmt(cap["msgs_per_s"]), " (%s)" % cap["note"] if cap.get("note")
                              else ""), "on paper", "REPORTED")
    else:
        line(" ", "  the model itself", "see BENCHMARKS.md", "on paper", "not in this run")

    # 5: duplicates: CPU a duplicate answered beside the rate
    for who, label in (("idemrelay", "LMDB"), ("pg1", "PostgreSQL")):
        rate, cpu = res.med("dup", who), res.med("dup_cpu_ms", who)
        if rate is None and who == "pg1":
            continue
        line("5" if who == "idemrelay" else " ",
             "duplicates, %s: CPU a duplicate answered, beside the rate" % label,
             "%s at %s answers/s" % (fmt(cpu, " ms"), fmt(rate)) if cpu is not None else "-",
             "reported", "REPORTED" if cpu is not None else None)
        where = ((res.extra.get("pg_counters") or {}).get(who) or {}).get("dup") or {}
        if where.get("cpu_ms_per_msg_pg") is not None:
            line(" ", "  and PostgreSQL's own CPU a duplicate (one more run, alone)",
                 "%s (the node %s)" % (fmt(where["cpu_ms_per_msg_pg"], " ms"),
                                       fmt(where.get("cpu_ms_per_msg_nodes"), " ms")),
                 "reported", "REPORTED")
    cpu_pf = res.med("dup_cpu_ms", "Postfix")
    if cpu_pf is not None:
        line(" ", "  Postfix, the same load: CPU a message accepted and delivered",
             "%s at %s msgs/s" % (fmt(cpu_pf, " ms"), fmt(res.med("dup", "Postfix"))),
             "reported", "REPORTED")
    return out
