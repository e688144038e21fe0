# idemrelay - see README.md. `make` builds bin/, `make test` runs every test.

CC      ?= cc
PKGS     = libconfig openssl zlib libpq
CFLAGS  ?= -O2 -g
# Flags the code needs whatever CFLAGS a caller passes (make asan does).
override CFLAGS += -std=gnu11 -Wall -Wextra -D_GNU_SOURCE -MMD -MP \
           $(shell pkg-config --cflags $(PKGS))
LDLIBS  += $(shell pkg-config --libs $(PKGS)) -lesmtp -llmdb -lcrypt -lpthread
ifdef WERROR
override CFLAGS += -Werror
endif

B        = build
BIN      = bin

# One library per folder, linked in the order the folders depend on each
# other (top first); `make check-layers` enforces that order on #include
# and on the symbols each library leaves undefined (nm).
# Each program names the libraries it needs.
LAYERS   = deliver relay queue tls smtp store conf util
deliver_SRC = $(wildcard deliver/*.c deliver/esmtp/*.c)
relay_SRC   = $(wildcard relay/*.c)
queue_SRC   = $(wildcard queue/*.c)
tls_SRC     = $(wildcard tls/*.c)
smtp_SRC    = $(wildcard smtp/*.c)
store_SRC   = $(wildcard store/*.c store/lmdb/*.c store/pg/*.c)
conf_SRC    = $(wildcard conf/*.c)
util_SRC    = $(wildcard util/*.c)
lib         = $(B)/lib$(1).a
LIBS_ALL    = $(foreach l,$(LAYERS),$(call lib,$(l)))
LIBS_CTL    = $(foreach l,queue store conf util,$(call lib,$(l)))
LIB_OBJ     = $(foreach l,$(LAYERS),$($(l)_SRC:%.c=$(B)/%.o)) $(B)/conf_default.o
DAEMON_OBJ  = $(patsubst %.c,$(B)/%.o,$(wildcard daemon/*.c))
CTL_OBJ     = $(patsubst %.c,$(B)/%.o,$(wildcard ctl/*.c))
UNIT_SRC = $(wildcard tests/unit/test_*.c)
UNIT_BIN = $(UNIT_SRC:tests/unit/%.c=$(B)/tests/%)
PROGS    = $(BIN)/idemrelay $(BIN)/idemrelayctl
POWERFS  = $(B)/tests/powerfs

all: $(PROGS) $(POWERFS)

$(BIN)/idemrelay: $(DAEMON_OBJ) $(LIBS_ALL)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BIN)/idemrelayctl: $(CTL_OBJ) $(LIBS_CTL)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

define lib_rule
$(call lib,$(1)): $$($(1)_SRC:%.c=$(B)/%.o) $(if $(filter conf,$(1)),$(B)/conf_default.o)
	rm -f $$@
	ar rcs $$@ $$^
endef
$(foreach l,$(LAYERS),$(eval $(call lib_rule,$(l))))

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

# The default configuration is compiled in, so the daemon runs with no file.
$(B)/conf_default.c: conf/idemrelay.conf
	@mkdir -p $(B)
	{ echo 'const char conf_default_text[] = {'; \
	  od -An -tx1 -v $< | sed 's/\([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	  echo '0 };'; } > $@

$(B)/conf_default.o: $(B)/conf_default.c
	$(CC) $(CFLAGS) -c -o $@ $<

# A unit test links with flags of its own, NAME_LDFLAGS, if it has any:
# test_anvil sees the slots of anvil's client table (hash_slot),
# test_deliver_admit watches two of deliver.c's calls (ld's --wrap),
# test_deliver_reload reloads between deliver_record.c's reads of the
# retry settings, test_deliver_maildir the Maildir copy's writes (one
# made to fail) and its mark, test_store_pg_settle the locks of the store's mutexes
# and its key locks, test_store_pg_lease the integers it decodes from
# results, test_smtp_limits
# the recipient identities the engine computes, test_store_pg_runs the
# key comparisons (strcmp) of a batch's runs, test_store_pg_slots those
# of a batch of claims chosen to collide, test_tls_client the loads of
# the CA stores, the clock that ages them and the uid they are loaded
# under. A test may include a source file to reach its static
# functions (test_control): what it includes is a dependency (its .d
# file), never compiled again.
test_anvil_LDFLAGS = -Wl,--wrap=hash_slot
test_deliver_admit_LDFLAGS = -Wl,--wrap=deliver_rate_admit -Wl,--wrap=deliver_rate_check
test_deliver_reload_LDFLAGS = -Wl,--wrap=deliver_retry_settings
test_deliver_maildir_LDFLAGS = -Wl,--wrap=fwrite_unlocked -Wl,--wrap=deliver_mark
test_smtp_limits_LDFLAGS = -Wl,--wrap=smtp_rcpt_id
test_store_pg_lease_LDFLAGS = -Wl,--wrap=store_pg_int
test_store_pg_settle_LDFLAGS = -Wl,--wrap=pthread_mutex_lock -Wl,--wrap=store_pg_key_lock
test_store_pg_runs_LDFLAGS = -Wl,--wrap=strcmp
test_store_pg_slots_LDFLAGS = -Wl,--wrap=strcmp
test_tls_client_LDFLAGS = -Wl,--wrap=X509_STORE_load_file -Wl,--wrap=X509_STORE_load_path \
	-Wl,--wrap=X509_STORE_set_default_paths -Wl,--wrap=clock_mono_us -Wl,--wrap=geteuid
$(B)/tests/%: tests/unit/%.c $(LIBS_ALL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) $($*_LDFLAGS) -o $@ $< $(filter %.a,$^) $(LDLIBS) -lcmocka

# Fuzz harnesses: `make fuzz` runs each under libFuzzer (clang) for FUZZ_TIME
# seconds; `make test` replays the seed corpus (and any crash saved into it)
# through a plain driver, so it needs no clang.
FUZZERS   = session parse filter keys deliver dsn conf starttls control
FUZZ_TIME ?= 60
FUZZ_SRC  = $(wildcard util/*.c smtp/*.c) deliver/esmtp/deliver_filter.c \
	    deliver/esmtp/deliver_gate.c deliver/esmtp/deliver_bridge_starttls.c deliver/dsn.c \
	    queue/keys.c queue/qid.c $(conf_SRC) $(B)/conf_default.o
REPLAY_BIN = $(FUZZERS:%=$(B)/fuzz/replay_%)
# fuzz_deliver runs the delivery client and libesmtp against a scripted
# upstream: the store's side (deliver.c, deliver_record.c) is stubbed in
# the harness; deliver_admin.c, the operator's entry points, is no part of it
FUZZ_DELIVER = $(filter-out deliver/deliver.c deliver/deliver_record.c deliver/deliver_admin.c \
	       deliver/esmtp/deliver_filter.c deliver/esmtp/deliver_gate.c \
	       deliver/esmtp/deliver_bridge_starttls.c deliver/dsn.c,$(deliver_SRC)) \
	       $(foreach l,queue tls smtp store conf util,$(call lib,$(l))) $(LDLIBS)

$(B)/fuzz/replay_%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c $(LIBS_ALL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.a,$^) $(LDLIBS)

fuzz-replay: $(REPLAY_BIN)
	@for f in $(FUZZERS); do $(B)/fuzz/replay_$$f tests/fuzz/corpus/$$f || exit 1; done

fuzz: $(LIBS_ALL)
	@mkdir -p build-fuzz
	@for f in $(FUZZERS); do \
	  clang -g -O1 -std=gnu11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=undefined -o build-fuzz/fuzz_$$f tests/fuzz/fuzz_$$f.c \
	    $(FUZZ_SRC) $$(pkg-config --libs openssl libconfig) \
	    $$([ $$f = deliver ] && echo "$(FUZZ_DELIVER)") || exit 1; \
	  mkdir -p build-fuzz/corpus_$$f; \
	  echo "== fuzz_$$f for $(FUZZ_TIME)s"; \
	  build-fuzz/fuzz_$$f -max_total_time=$(FUZZ_TIME) -max_len=8192 \
	    -artifact_prefix=build-fuzz/ build-fuzz/corpus_$$f tests/fuzz/corpus/$$f || exit 1; \
	done

# The power-cut file system of the e2e tests (tests/powerfs/powerfs.c): a
# test tool, no part of the daemon; it needs libfuse3 (libfuse3-dev, fuse3).
$(POWERFS): tests/powerfs/powerfs.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(shell pkg-config --cflags fuse3) $(LDFLAGS) -o $@ $< \
	    $(shell pkg-config --libs fuse3)

unit: $(UNIT_BIN)
	@fail=0; for t in $(UNIT_BIN); do echo "== $$t"; $$t || fail=1; done; exit $$fail

e2e: $(PROGS) $(POWERFS)
	IDEMRELAY_BIN=$(abspath $(BIN))/idemrelay POWERFS_BIN=$(abspath $(POWERFS)) \
	    python3 tests/e2e/run.py

# #include and every linked symbol point down the folder order (tests/layers.py
# has the table); it first checks that it finds an upward call planted in libutil.a
check-layers: $(LIBS_ALL) $(DAEMON_OBJ) $(CTL_OBJ)
	@python3 tests/layers.py . --self-test $^

# README's Architecture table is tests/layers.py's, and every path the
# documents and the comments name is in the tree (tests/docs.py)
check-docs:
	@python3 tests/docs.py .

test: check-layers check-docs all unit fuzz-replay e2e test-pg

# The PostgreSQL backend (issue 14) against a real server: tests/pg/cluster.py
# starts private clusters (initdb in a temporary directory, run as the
# postgres user, on a loopback port) and removes them after. One cluster
# serves the store unit tests that run on it with IDEMRELAY_PG_URL (a schema
# per test). Then every e2e case on PostgreSQL (those marked LMDB-only are
# reported skipped): about 2.5 minutes on the 2-core test machine.
PG_CLUSTER   = python3 tests/pg/cluster.py
PG_UNIT      = $(filter $(UNIT_BIN),$(B)/tests/test_store $(B)/tests/test_story $(B)/tests/test_store_pg \
	       $(B)/tests/test_store_pg_schema $(B)/tests/test_store_pg_lease $(B)/tests/test_store_pg_commit \
	       $(B)/tests/test_store_pg_unreachable $(B)/tests/test_store_pg_settle \
	       $(B)/tests/test_store_pg_revive $(B)/tests/test_store_pg_notice \
	       $(B)/tests/test_store_rule $(B)/tests/test_queue_admin $(B)/tests/test_deliver_notice)
test-pg: all $(PG_UNIT)
	$(PG_CLUSTER) selftest
	$(PG_CLUSTER) run -- sh -c 'for t in $(PG_UNIT); do echo "== $$t (PostgreSQL)"; $$t || exit 1; done'
	E2E_STORE=postgresql IDEMRELAY_BIN=$(abspath $(BIN))/idemrelay \
	    python3 tests/e2e/run.py

# The randomized fault test (tests/pg/nemesis.py): three nodes on a primary
# with a synchronous standby, each behind TCP proxies that a schedule drawn
# from NEMESIS_SEED (a new one, printed, when empty) cuts for NEMESIS_S
# seconds, with kill -9, 451 periods, the standby stopped and a failover;
# then every 250 must be delivered exactly once. test-pg runs a short one
# (test_nemesis_short, cases_nemesis.py, a fixed seed).
NEMESIS_S    ?= 600
NEMESIS_SEED ?=
nemesis: all
	IDEMRELAY_BIN=$(abspath $(BIN))/idemrelay NEMESIS_S=$(NEMESIS_S) NEMESIS_SEED=$(NEMESIS_SEED) \
	    nice -n 10 python3 tests/pg/nemesis.py

# The randomized power-cut test (tests/powerfs/powercut.py): one daemon on
# LMDB on powerfs, under load, through POWERCUT_ROUNDS rounds drawn from
# POWERCUT_SEED (a new one, printed, when empty): power cuts (nothing, a part
# or a part at a sync written back), kill -9, starts cut, store.map_size
# changed, a full map, SIGHUP, and a share POWERCUT_STORM of short rounds (8-20
# MB of big messages and a cut); then every 250 must be kept and delivered once.
# No round starts after POWERCUT_S seconds. e2e runs a short one
# (test_powercut_random_short, cases_powercut_random.py, a fixed seed).
POWERCUT_ROUNDS ?= 12
POWERCUT_S      ?= 900
POWERCUT_SEED   ?=
POWERCUT_STORM  ?= 0.5
powercut: all $(POWERFS)
	IDEMRELAY_BIN=$(abspath $(BIN))/idemrelay POWERFS_BIN=$(abspath $(POWERFS)) \
	    POWERCUT_SEED=$(POWERCUT_SEED) POWERCUT_ROUNDS=$(POWERCUT_ROUNDS) POWERCUT_S=$(POWERCUT_S) \
	    POWERCUT_STORM=$(POWERCUT_STORM) \
	    nice -n 10 python3 tests/powerfs/powercut.py

# Sanitizer build in its own tree, then the whole suite against it, PostgreSQL's too.
asan:
	$(MAKE) B=build-asan BIN=build-asan/bin CC=clang CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer" \
	    LDFLAGS="-fsanitize=address,undefined" E2E_SANITIZER=1 all unit fuzz-replay e2e test-pg

run: all
	bin/idemrelay

clean:
	rm -rf build build-asan build-fuzz bin

.PHONY: all unit e2e test test-pg nemesis powercut asan run clean fuzz fuzz-replay check-layers check-docs
-include $(LIB_OBJ:.o=.d) $(DAEMON_OBJ:.o=.d) $(CTL_OBJ:.o=.d) $(UNIT_BIN:=.d) $(REPLAY_BIN:=.d) $(POWERFS).d

# Install: programs in sbin (as Postfix does), man pages, the example
# configuration in $(SYSCONFDIR)/idemrelay (never the live idemrelay.conf),
# README and unit in $(DOCDIR). `make install-systemd` adds the unit and
# its sysusers.d file. DESTDIR stages the whole tree for a package.
PREFIX      ?= /usr/local
SBINDIR     ?= $(PREFIX)/sbin
MANDIR      ?= $(PREFIX)/share/man
DOCDIR      ?= $(PREFIX)/share/doc/idemrelay
SYSCONFDIR  ?= /etc
UNITDIR     ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
INSTALL     ?= install
MAN5        = doc/idemrelay.conf.5
MAN8        = doc/idemrelay.8 doc/idemrelayctl.8

install: $(PROGS)
	$(INSTALL) -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8 \
	    $(DESTDIR)$(DOCDIR) $(DESTDIR)$(SYSCONFDIR)/idemrelay
	$(INSTALL) -m 0755 $(PROGS) $(DESTDIR)$(SBINDIR)/
	$(INSTALL) -m 0644 $(MAN5) $(DESTDIR)$(MANDIR)/man5/
	$(INSTALL) -m 0644 $(MAN8) $(DESTDIR)$(MANDIR)/man8/
	$(INSTALL) -m 0644 doc/idemrelay.conf.example $(DESTDIR)$(SYSCONFDIR)/idemrelay/
	$(INSTALL) -m 0644 README.md contrib/idemrelay.service $(DESTDIR)$(DOCDIR)/

# The unit names the installed programs and configuration.
install-systemd:
	$(INSTALL) -d $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR)
	sed -e 's|/usr/sbin/|$(SBINDIR)/|g' -e 's|/etc/idemrelay/|$(SYSCONFDIR)/idemrelay/|g' \
	    contrib/idemrelay.service > $(DESTDIR)$(UNITDIR)/idemrelay.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/idemrelay.service
	$(INSTALL) -m 0644 contrib/idemrelay.sysusers $(DESTDIR)$(SYSUSERSDIR)/idemrelay.conf

# Leaves $(SYSCONFDIR)/idemrelay/idemrelay.conf and the store alone.
uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/idemrelay $(DESTDIR)$(SBINDIR)/idemrelayctl \
	    $(DESTDIR)$(MANDIR)/man5/idemrelay.conf.5 $(DESTDIR)$(MANDIR)/man8/idemrelay.8 \
	    $(DESTDIR)$(MANDIR)/man8/idemrelayctl.8 \
	    $(DESTDIR)$(SYSCONFDIR)/idemrelay/idemrelay.conf.example \
	    $(DESTDIR)$(UNITDIR)/idemrelay.service $(DESTDIR)$(SYSUSERSDIR)/idemrelay.conf
	rm -rf $(DESTDIR)$(DOCDIR)

# Man pages: mandoc's warnings and groff's are errors. `make test` runs it;
# where mandoc or groff is missing it says so and skips, except in CI
# (CI=true) and when asked for by name, where a missing tool is an error.
lint-man:
	@if ! command -v mandoc >/dev/null || ! command -v groff >/dev/null; then \
	  echo "lint-man: mandoc or groff is not installed (apt-get install mandoc groff-base):" \
	       "man pages not checked"; \
	  [ -z "$$CI" ] && [ -z "$(filter lint-man,$(MAKECMDGOALS))" ]; exit; fi; \
	mandoc -Tlint -W warning $(MAN5) $(MAN8) || exit 1; \
	for m in $(MAN5) $(MAN8); do \
	  out=$$(groff -ww -mandoc -Tutf8 -z $$m 2>&1) || { echo "$$out"; exit 1; }; \
	  if [ -n "$$out" ]; then echo "$$m: $$out"; exit 1; fi; \
	done; \
	echo "lint-man: $(MAN5) $(MAN8) clean"

test: lint-man

# The Debian package (debian/): built from a copy of the tree in a
# temporary directory, checked with lintian, installed, run and purged on
# this machine. Needs root; see tests/deb/deb-test.sh.
deb-test:
	tests/deb/deb-test.sh

.PHONY: install install-systemd uninstall lint-man deb-test

# Benchmarks against Postfix (issue 4), not part of `make test`: see
# BENCHMARKS.md. The load generator is libc and OpenSSL only, always at -O2; fill
# writes claims straight into a store through store.h.
BENCH_PROGS = $(B)/bench/load $(B)/bench/fill

$(B)/bench/load: tests/bench/load.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -std=gnu11 -Wall -Wextra -D_GNU_SOURCE $(LDFLAGS) -o $@ $< -lssl -lcrypto

$(B)/bench/fill: tests/bench/fill.c $(foreach l,store util,$(call lib,$(l)))
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

bench: all $(BENCH_PROGS)
	IDEMRELAY_BIN=$(BIN)/idemrelay LOAD_BIN=$(B)/bench/load FILL_BIN=$(B)/bench/fill \
	    python3 tests/bench/bench.py

# The soak (issue 11), not part of `make test` either: SOAK_MINUTES (10) at
# SOAK_RATE (200) submissions/s with retries, races and deferred mail; fails
# on a loss, a duplicate, or growth that does not level off (tests/bench/soak.py).
soak: all
	IDEMRELAY_BIN=$(BIN)/idemrelay python3 tests/bench/soak.py

# One hostile address (127.0.0.2) against idemrelay and Postfix while a
# client on 127.0.0.3 submits (issue 30), not part of `make test`: about 6 min.
bench-attack: all
	IDEMRELAY_BIN=$(BIN)/idemrelay python3 tests/bench/attack.py

.PHONY: bench soak bench-attack
