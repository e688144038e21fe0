# idemrelay - see README.md. `make` builds bin/, `make test` runs every test.

CC      ?= cc
PKGS     = libconfig openssl
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
LIB_SRC  = $(wildcard util/*.c smtp/*.c store/*.c conf/*.c) \
           $(filter-out relay/main.c relay/ctl.c, $(wildcard relay/*.c))
LIB_OBJ  = $(LIB_SRC:%.c=$(B)/%.o) $(B)/conf_default.o
UNIT_SRC = $(wildcard tests/unit/test_*.c)
UNIT_BIN = $(UNIT_SRC:tests/unit/%.c=$(B)/tests/%)
PROGS    = $(BIN)/idemrelay $(if $(wildcard relay/ctl.c),$(BIN)/idemrelayctl)

all: $(PROGS)

$(BIN)/idemrelay: $(B)/relay/main.o $(B)/libidemrelay.a
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BIN)/idemrelayctl: $(B)/relay/ctl.o $(B)/libidemrelay.a
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/libidemrelay.a: $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $^

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

$(B)/tests/%: tests/unit/%.c $(B)/libidemrelay.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lcmocka

# Fuzz harnesses: `make fuzz` runs each under libFuzzer (clang) for FUZZ_TIME
# seconds; `make test` replays the seed corpus (and any crash saved into it)
# through a plain driver, so it needs no clang.
FUZZERS   = session parse
FUZZ_TIME ?= 60
FUZZ_SRC  = $(wildcard util/*.c smtp/*.c)
REPLAY_BIN = $(FUZZERS:%=$(B)/fuzz/replay_%)

$(B)/fuzz/replay_%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c $(B)/libidemrelay.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

fuzz-replay: $(REPLAY_BIN)
	@for f in $(FUZZERS); do $(B)/fuzz/replay_$$f tests/fuzz/corpus/$$f || exit 1; done

fuzz:
	@mkdir -p build-fuzz
	@for f in $(FUZZERS); do \
	  clang -g -O1 -std=gnu11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=undefined -o build-fuzz/fuzz_$$f tests/fuzz/fuzz_$$f.c \
	    $(FUZZ_SRC) $$(pkg-config --libs openssl) || exit 1; \
	  mkdir -p build-fuzz/corpus_$$f; \
	  echo "== fuzz_$$f for $(FUZZ_TIME)s"; \
	  build-fuzz/fuzz_$$f -max_total_time=$(FUZZ_TIME) -max_len=8192 \
	    -artifact_prefix=build-fuzz/ build-fuzz/corpus_$$f tests/fuzz/corpus/$$f || exit 1; \
	done

unit: $(UNIT_BIN)
	@fail=0; for t in $(UNIT_BIN); do echo "== $$t"; $$t || fail=1; done; exit $$fail

e2e: $(PROGS)
	IDEMRELAY_BIN=$(abspath $(BIN))/idemrelay python3 tests/e2e/run.py

test: all unit fuzz-replay e2e

# Sanitizer build in its own tree, then the whole suite against it.
asan:
	$(MAKE) B=build-asan BIN=build-asan/bin CC=clang CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer" \
	    LDFLAGS="-fsanitize=address,undefined" all unit fuzz-replay e2e

run: all
	bin/idemrelay

clean:
	rm -rf build build-asan build-fuzz bin

.PHONY: all unit e2e test asan run clean fuzz fuzz-replay
-include $(LIB_OBJ:.o=.d) $(B)/relay/main.d $(B)/relay/ctl.d
