# ebbfs build, run, test.
#
#   make run       mount a fresh filesystem on a local-directory store under ./run/
#   make test      install what the tests need (as root) and run every test
#                  (the model's quick instances; make model checks its full bounds)
#   make lint      gofmt, go vet (both builds), go mod tidy, staticcheck
#   make bench     benchmarks (make bench-db: databases and ext4 on NBD alone)
#   make install   /usr/local/bin/ebbfs, /sbin/mount.fuse.ebbfs, the systemd unit, shell completions

GO          ?= go
PREFIX      ?= /usr/local
SBINDIR     ?= /sbin
SYSTEMDDIR  ?= /etc/systemd/system
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -X main.version=$(VERSION)
BIN         := bin/ebbfs
# NBD over TLS-PSK uses GnuTLS through cgo: built in when its headers
# (libgnutls28-dev) and a C compiler are installed, left out otherwise
# (nbd.tls_psk_file then fails at start and says why).
BUILD_TAGS  ?= $(if $(and $(wildcard /usr/include/gnutls/gnutls.h),$(shell command -v cc)),ebbfs_gnutls)
# Each go test run of scripts/test.sh gets this long; the longest (the
# end-to-end suite's parallel part) takes about 10 minutes on a loaded
# 2-core machine, and the timeout leaves room for a slower one.
TEST_TIMEOUT ?= 40m
# At most this many t.Parallel tests of one package run at once: the
# end-to-end tests that run in parallel each start daemons, mounts and an
# S3 server, and wait on conditions, so more than the core count helps.
TEST_PARALLEL ?= 4
# Tests run on the test build: failpoints and the test time scale exist
# only with ebbfs_testclock (production builds leave both out); make
# test installs GnuTLS's headers, so its build always has TLS-PSK.
TEST_TAGS   ?= ebbfs_testclock,ebbfs_gnutls
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

RUN_DIR     := $(CURDIR)/run
RUN_CONFIG  := $(RUN_DIR)/ebbfs.toml
RUN_NBD     ?= 127.0.0.1:10809
RUN_ADMIN   ?= 127.0.0.1:10810

.PHONY: all build run test lint bench bench-db bench-scale install uninstall clean deps model model-quick soak soak-mirror soak-ha idle-ha

all: build

build:
	$(GO) build -tags '$(BUILD_TAGS)' -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/ebbfs

# make run: a local-directory store in ./run/store, cache in ./run/cache,
# the mount at ./run/mnt, a generated password in ./run/password (0600).
run: build
	@mkdir -p $(RUN_DIR)/store $(RUN_DIR)/cache $(RUN_DIR)/mnt
	@if [ ! -s $(RUN_DIR)/password ]; then \
		umask 077; head -c 24 /dev/urandom | base64 > $(RUN_DIR)/password; \
		echo "generated $(RUN_DIR)/password"; fi
	@chmod 600 $(RUN_DIR)/password
	@if [ ! -f $(RUN_CONFIG) ]; then \
		printf '%s\n' \
		'# Written by make run; edit freely (see README.md, Configuration reference).' \
		'[storage]' \
		'url = "file://$(RUN_DIR)/store"' \
		'' \
		'[encryption]' \
		'password_file = "$(RUN_DIR)/password"' \
		'' \
		'[cache]' \
		'dir = "$(RUN_DIR)/cache"' \
		'' \
		'[mount]' \
		'path = "$(RUN_DIR)/mnt"' \
		'' \
		'[nbd]' \
		'listen = ["$(RUN_NBD)"]' \
		'' \
		'[admin]' \
		'listen = "$(RUN_ADMIN)"' > $(RUN_CONFIG); \
		echo "wrote $(RUN_CONFIG)"; fi
	@if [ ! -f $(RUN_DIR)/store/ebbfs.fs ]; then $(BIN) init -c $(RUN_CONFIG); fi
	@echo "mountpoint: $(RUN_DIR)/mnt"
	@echo "NBD:        nbd://$(RUN_NBD)/<name>  (exports are the files in $(RUN_DIR)/mnt/.nbd/, e.g. truncate -s 10G $(RUN_DIR)/mnt/.nbd/disk0)"
	@echo "admin:      http://$(RUN_ADMIN)/  (metrics at /metrics; $(BIN) flush -c $(RUN_CONFIG))"
	@echo "other commands: export EBBFS_CONFIG=$(RUN_CONFIG)   # then $(BIN) status, flush, space, monitor ... need no -c"
	@echo "stop with Ctrl-C or umount $(RUN_DIR)/mnt"
	exec $(BIN) run -c $(RUN_CONFIG)

deps:
	bash scripts/install-deps.sh

# The end-to-end tests (tests/) need root, /dev/fuse, fuse3, the NBD tools
# and the S3 server; install-deps.sh brings them.
# The model's quick instances (make model-quick) run inside go test, as
# docs/model's TestModelCheck, beside the other packages' tests;
# EBBFS_MODEL_CHECKED=1 skips them (.ci/run sets it: it checks the full
# bounds beside the tests). The end-to-end tests that must not run beside
# each other (tests/alone.txt) run in groups of their own, beside the rest.
test: deps
	GO=$(GO) TEST_TAGS=$(TEST_TAGS) TEST_PARALLEL=$(TEST_PARALLEL) TEST_TIMEOUT=$(TEST_TIMEOUT) bash scripts/test.sh

# make model: the Promela model of the reclamation protocol (docs/model),
# checked exhaustively with spin at its full bounds; every mutant and
# finding must give a counterexample. make model-quick: the same runs at
# smaller bounds (a few minutes), which make test checks inside go test.
model:
	MODEL_SIZE=full bash docs/model/check.sh

model-quick:
	MODEL_SIZE=quick bash docs/model/check.sh

lint:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags $(TEST_TAGS) ./...
	@cp go.mod /tmp/ebbfs-go.mod.$$$$ && cp go.sum /tmp/ebbfs-go.sum.$$$$ && $(GO) mod tidy && \
		if ! cmp -s go.mod /tmp/ebbfs-go.mod.$$$$ || ! cmp -s go.sum /tmp/ebbfs-go.sum.$$$$; then \
		echo "go.mod/go.sum were not tidy (go mod tidy has now fixed them: commit the change)"; rm -f /tmp/ebbfs-go.*.$$$$; exit 1; fi; \
		rm -f /tmp/ebbfs-go.*.$$$$
	@if $(GO) run $(STATICCHECK) -version >/dev/null 2>&1; then \
		$(GO) run $(STATICCHECK) ./...; \
	else echo "staticcheck unavailable (no module proxy?); skipped"; fi

bench:
	$(GO) test -run='^$$' -bench=. ./segment ./lsm ./reclaim
	$(GO) test -tags '$(BUILD_TAGS)' -run='^$$' -bench=. -benchtime=1x ./nbd
	$(GO) test -run='^$$' -bench='GroupCommit|RandomOverwrite|ColdReadAfterOverwrite|PatchesAB' -benchtime=1x ./fs
	$(GO) test -tags '$(TEST_TAGS)' -run='^$$' -bench=MountGroupCommit -benchtime=1x ./tests
	$(GO) run ./bench/mountbench $(MOUNTBENCH_FLAGS)
	$(MAKE) bench-db

# make bench-db: real databases and a VM's disk on every target of
# mountbench (the plain disk, a go-fuse passthrough, ebbfs on a local
# store, ebbfs on the S3 test server): pgbench with PostgreSQL's data
# directory on the mount, SQLite commit loops in WAL and rollback-journal
# modes, fio inside ext4 on an NBD export (nbdfuse and a loop device).
# About 15 minutes; DBBENCH_FLAGS adds mountbench flags (-pg-time 20s ...).
# deps installs PostgreSQL, sqlite3 and fio; one missing fails the run.
bench-db: deps
	$(GO) run ./bench/mountbench -groups db $(DBBENCH_FLAGS)

# make fuzz: every fuzz target of the module (NBD, segment, journal,
# lease, manifest, checkpoint record, schema, config, keys), one at a
# time, FUZZ_TIME each (default 1m) and NBD_FUZZ_TIME (default 10m) for
# the NBD ones; FUZZ_MATCH=regexp picks targets by "package/FuzzName".
# A failing input is kept in <package>/testdata/fuzz/ as a regression case.
.PHONY: fuzz
fuzz:
	GO=$(GO) bash scripts/fuzz.sh

# make bench-scale: the scale test at full size (tests/scale_test.go,
# EBBFS_SCALE=1): a million files created, stat'ed, listed, renamed and
# deleted, a 100 GiB sparse file with random writes, the writer's peak RSS,
# fsck, and recovery into a new cache directory; figures in
# bench/README.md. make test runs the 20,000-file version.
bench-scale: deps
	EBBFS_SCALE=1 $(GO) test -tags $(TEST_TAGS) -count=1 -timeout 4h -v -run 'TestScale$$' ./tests

install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/ebbfs
	install -d $(DESTDIR)$(SBINDIR)
	ln -sf $(PREFIX)/bin/ebbfs $(DESTDIR)$(SBINDIR)/mount.fuse.ebbfs
	install -D -m 0644 docs/ebbfs.service $(DESTDIR)$(SYSTEMDDIR)/ebbfs.service
	install -d $(DESTDIR)$(PREFIX)/share/bash-completion/completions $(DESTDIR)$(PREFIX)/share/zsh/site-functions $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	$(BIN) completion bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/ebbfs
	$(BIN) completion zsh > $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_ebbfs
	$(BIN) completion fish > $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/ebbfs.fish
	@echo "installed $(PREFIX)/bin/ebbfs, $(SBINDIR)/mount.fuse.ebbfs, $(SYSTEMDDIR)/ebbfs.service and shell completions"

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/ebbfs $(DESTDIR)$(SBINDIR)/mount.fuse.ebbfs $(DESTDIR)$(SYSTEMDDIR)/ebbfs.service
	rm -f $(DESTDIR)$(PREFIX)/share/bash-completion/completions/ebbfs $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_ebbfs $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/ebbfs.fish

# make soak-replica: the long replica tests: 10 minutes of writer churn
# with reclamation under a reading replica, and a 5-minute idle request
# count (make test runs 2 minutes of the one and 30 s of the other).
soak-replica: deps
	EBBFS_SOAK_REPLICA=1 $(GO) test -tags $(TEST_TAGS) -count=1 -timeout 40m -v -run 'TestReplicaChurn|TestReplicaOnAnotherHostIdleRequests' ./tests

# make soak-mirror: the mirror's long tests: 20 kills of the writer and
# of a separate mirror process mid-mirroring, and the S3-to-S3 drill with
# 2 minutes of load and a 60 s idle request count (make test runs 4 kills,
# 40 s and 20 s).
soak-mirror: deps
	EBBFS_MIRROR_KILLS=20 EBBFS_MIRROR_LOAD=120 EBBFS_MIRROR_IDLE=60 $(GO) test -tags $(TEST_TAGS) -count=1 -timeout 40m -v -run 'TestMirrorKillResume|TestMirrorS3ToS3' ./tests

# make soak-ha: standby writers (TestStandbySoak) for SOAK_HA_DURATION
# (default 30m): a writer and two standbys, each in its own network
# namespace, under a write+fsync load, the writer killed, stopped or cut
# off from the S3 server every 1-3 minutes; every acknowledged write
# verified, fsck clean.
SOAK_HA_DURATION ?= 30m
soak-ha: deps
	EBBFS_SOAK_HA=1 EBBFS_SOAK_HA_DURATION=$(SOAK_HA_DURATION) $(GO) test -tags $(TEST_TAGS) -count=1 -timeout 90m -v -run 'TestStandbySoak$$' ./tests

# make idle-ha: an idle writer's store requests over 5 minutes, with no
# standby (0) and with one (the heartbeat, one conditional PUT every
# takeover_after/4, and nothing more): TestStandbyIdleRequests, whose
# window make test keeps at 30 s.
idle-ha: deps
	EBBFS_SOAK_HA=1 $(GO) test -tags $(TEST_TAGS) -count=1 -timeout 30m -v -run 'TestStandbyIdleRequests$$' ./tests

# make soak: the chaos soak (TestSoak) for SOAK_DURATION (default 1h):
# files and an NBD export changed at random with fsync/FLUSH, reclamation
# running, the S3 server stalled and failing requests, the writer killed
# every 2 minutes and restarted; make test runs 3 minutes of it. The seed
# is logged; EBBFS_E2E_SEED=N repeats its random choices (not its timing).
SOAK_DURATION ?= 1h
SOAK_TIMEOUT  ?= 3h
soak: deps
	EBBFS_SOAK_DURATION=$(SOAK_DURATION) $(GO) test -tags $(TEST_TAGS) -count=1 -timeout $(SOAK_TIMEOUT) -v -run 'TestSoak$$' ./tests

# make screenshots: regenerate docs/monitor.png and docs/webpage.png from
# the monitor and status page tests (needs what make test needs).
screenshots: deps
	EBBFS_SCREENSHOTS=$(CURDIR)/docs $(GO) test -count=1 -run 'TestMonitorShowsReclamation|TestWebPageChartsReclamation' ./tests

clean:
	rm -rf bin
