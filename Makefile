# idemrelay - see README.md. `make` builds bin/, `make test` runs every test.

CC      ?= cc
PKGS     = libconfig openssl
CFLAGS  ?= -O2 -g
CFLAGS  += -std=gnu11 -Wall -Wextra -D_GNU_SOURCE -MMD -MP \
           $(shell pkg-config --cflags $(PKGS))
LDLIBS  += $(shell pkg-config --libs $(PKGS)) -lesmtp -llmdb -lcrypt -lpthread
ifdef WERROR
CFLAGS  += -Werror
endif

B        = build
LIB_SRC  = $(wildcard util/*.c smtp/*.c store/*.c conf/*.c) \
           $(filter-out relay/main.c relay/ctl.c, $(wildcard relay/*.c))
LIB_OBJ  = $(LIB_SRC:%.c=$(B)/%.o) $(B)/conf_default.o
UNIT_SRC = $(wildcard tests/unit/test_*.c)
UNIT_BIN = $(UNIT_SRC:tests/unit/%.c=$(B)/tests/%)
PROGS    = bin/idemrelay $(if $(wildcard relay/ctl.c),bin/idemrelayctl)

all: $(PROGS)

bin/idemrelay: $(B)/relay/main.o $(B)/libidemrelay.a
	@mkdir -p bin
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

bin/idemrelayctl: $(B)/relay/ctl.o $(B)/libidemrelay.a
	@mkdir -p bin
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

unit: $(UNIT_BIN)
	@fail=0; for t in $(UNIT_BIN); do echo "== $$t"; $$t || fail=1; done; exit $$fail

e2e: $(PROGS)
	python3 tests/e2e/run.py

test: all unit e2e

# Sanitizer build in its own tree, then the whole suite against it.
asan:
	$(MAKE) B=build-asan CC=clang CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer" \
	    LDFLAGS="-fsanitize=address,undefined" all unit e2e

run: all
	bin/idemrelay

clean:
	rm -rf build build-asan bin

.PHONY: all unit e2e test asan run clean
-include $(LIB_OBJ:.o=.d) $(B)/relay/main.d $(B)/relay/ctl.d
