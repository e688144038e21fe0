#!/usr/bin/env bash
# NAME
#	profile.sh - where idemrelay's time goes under load (perf, strace -c, callgrind)
# SYNOPSIS
#	tests/bench/profile.sh [OUTDIR]
# DESCRIPTION
#	Starts smtp-sink and bin/idemrelay (the benchmark's configuration:
#	default durable settings, store in a temporary directory on disk) and
#	runs tests/bench/load against it three times:
#
#	  perf      perf record -g of the daemon during fresh submissions
#	            (load -c 20 -n PROFILE_N, one message per session) and
#	            during duplicates; perf report by symbol
#	  strace    strace -c -f of the daemon, fresh then duplicates: the
#	            system calls per message
#	  callgrind the daemon under valgrind --tool=callgrind for a smaller
#	            run (PROFILE_N / 10 fresh, then as many duplicates)
#
#	Reports go to OUTDIR (default build/bench/profile): perf-fresh.txt,
#	perf-dup.txt, strace-fresh.txt, strace-dup.txt, callgrind.txt. Needs
#	root, perf (linux-perf), strace, valgrind and smtp-sink (postfix).
# ENVIRONMENT
#	PROFILE_N (default 20000), IDEMRELAY_BIN, LOAD_BIN
set -eu

cd "$(dirname "$0")/../.."
OUT=${1:-build/bench/profile}
N=${PROFILE_N:-20000}
IDEMRELAY=${IDEMRELAY_BIN:-bin/idemrelay}
LOAD=${LOAD_BIN:-build/bench/load}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
TMP=$(mktemp -d /tmp/idemrelay-profile-XXXXXX)
chmod 755 "$TMP"
PIDS=()

cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_port() {
	for _ in $(seq 1 300); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.1
	done
	echo "profile: nothing listens on $1" >&2
	return 1
}

SINK_PORT=$(free_port)
/usr/sbin/smtp-sink -u postfix "127.0.0.1:$SINK_PORT" 1000 >/dev/null 2>&1 &
PIDS+=($!)
wait_port "$SINK_PORT"

# start_daemon [WRAPPER...] - the daemon with a fresh store; sets DPID, PORT
start_daemon() {
	PORT=$(free_port)
	rm -rf "$TMP/store"
	cat >"$TMP/idemrelay.conf" <<EOF
hostname = "idemrelay.bench";
listen = ( { address = "127.0.0.1"; port = $PORT; } );
access = { networks = [ "127.0.0.0/8" ]; };
store = { path = "$TMP/store"; map_size = "4G"; };
upstream = { host = "127.0.0.1"; port = $SINK_PORT; tls = "none"; };
log = { level = "info"; target = "stderr"; };
EOF
	"$@" "$IDEMRELAY" -c "$TMP/idemrelay.conf" >"$TMP/idemrelay.log" 2>&1 &
	DPID=$!
	PIDS+=($DPID)
	wait_port "$PORT"
}

stop_daemon() {
	kill -TERM "$DPID" 2>/dev/null || true
	wait "$DPID" 2>/dev/null || true
}

# --- perf
start_daemon
echo "perf: fresh, load -c 20 -n $N"
perf record -F 1999 -g -p "$DPID" -o "$TMP/perf-fresh.data" 2>/dev/null &
PERF=$!
sleep 0.5
"$LOAD" -c 20 -n "$N" -s 2000 -K pf-fresh "127.0.0.1:$PORT" | tee "$OUT/load-fresh.txt"
kill -INT "$PERF"; wait "$PERF" || true
perf report -i "$TMP/perf-fresh.data" --stdio --no-children --sort symbol -g none 2>/dev/null \
	| grep -v '^$' | head -80 >"$OUT/perf-fresh.txt"
perf report -i "$TMP/perf-fresh.data" --stdio --no-children --sort dso -g none 2>/dev/null \
	| grep -v '^$' | head -40 >"$OUT/perf-fresh-dso.txt"
# inclusive (kernel stacks have frame pointers): which system calls the time is under
perf report -i "$TMP/perf-fresh.data" --stdio --children --sort symbol -g none 2>/dev/null \
	| grep -v '^$' | head -80 >"$OUT/perf-fresh-inclusive.txt"

echo "perf: duplicates, load -c 20 -n $N -k replay (keys of the fresh run)"
perf record -F 1999 -g -p "$DPID" -o "$TMP/perf-dup.data" 2>/dev/null &
PERF=$!
sleep 0.5
"$LOAD" -c 20 -n "$N" -s 2000 -K pf-fresh -k replay -u "$N" "127.0.0.1:$PORT" | tee "$OUT/load-dup.txt"
kill -INT "$PERF"; wait "$PERF" || true
perf report -i "$TMP/perf-dup.data" --stdio --no-children --sort symbol -g none 2>/dev/null \
	| grep -v '^$' | head -80 >"$OUT/perf-dup.txt"
stop_daemon

# --- strace -c: the daemon's system calls, all threads
start_daemon
M=$((N / 4))
echo "strace: fresh, load -c 20 -n $M"
strace -c -f -p "$DPID" -o "$OUT/strace-fresh.txt" &
ST=$!
sleep 0.5
"$LOAD" -c 20 -n "$M" -s 2000 -K st-fresh "127.0.0.1:$PORT" | tee "$OUT/load-strace-fresh.txt"
# wait for the deliveries of these messages, so that they are counted too
for _ in $(seq 1 600); do
	[ "$(grep -c 'status=sent' "$TMP/idemrelay.log")" -ge "$M" ] && break
	sleep 0.2
done
kill -INT "$ST"; wait "$ST" || true
echo "strace: duplicates, load -c 20 -n $M -k replay"
strace -c -f -p "$DPID" -o "$OUT/strace-dup.txt" &
ST=$!
sleep 0.5
"$LOAD" -c 20 -n "$M" -s 2000 -K st-fresh -k replay -u "$M" "127.0.0.1:$PORT" | tee "$OUT/load-strace-dup.txt"
kill -INT "$ST"; wait "$ST" || true
stop_daemon

# --- callgrind: instruction counts, inclusive, by function
start_daemon valgrind --tool=callgrind --callgrind-out-file="$TMP/callgrind.out" --trace-children=no
C=$((N / 10))
echo "callgrind: fresh then duplicates, $C each"
"$LOAD" -c 20 -n "$C" -s 2000 -K cg-fresh -t 600 "127.0.0.1:$PORT" | tee "$OUT/load-callgrind-fresh.txt"
for _ in $(seq 1 900); do
	[ "$(grep -c 'status=sent' "$TMP/idemrelay.log")" -ge "$C" ] && break
	sleep 0.2
done
"$LOAD" -c 20 -n "$C" -s 2000 -K cg-fresh -k replay -u "$C" -t 600 "127.0.0.1:$PORT" \
	| tee "$OUT/load-callgrind-dup.txt"
stop_daemon
callgrind_annotate --inclusive=yes "$TMP/callgrind.out" 2>/dev/null | head -80 >"$OUT/callgrind-inclusive.txt"
callgrind_annotate "$TMP/callgrind.out" 2>/dev/null | head -60 >"$OUT/callgrind-self.txt"
echo "profile: reports in $OUT"
