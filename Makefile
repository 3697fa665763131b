# orbitefs build and test entry points. giouring reaches syscall.mmap by
# linkname, so every go build/test needs -ldflags=-checklinkname=0.
GO      ?= go
LDFLAGS := -ldflags=-checklinkname=0
MOUNT   ?= /tmp/orbitefs
PKGS    := ./...

.PHONY: all build test vet fmt-check race flakes unit e2e noiouring fuzz bench-smoke demo-check run demo clean

all: build

# The binary carries its commit and a dirty flag (orbitefs version).
build:
	$(GO) build -ldflags="-checklinkname=0 $$(bash scripts/buildflags.sh)" -o bin/orbitefs ./cmd/orbitefs

# test runs every check CI runs.
test: fmt-check vet noiouring race flakes fuzz bench-smoke demo-check

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(LDFLAGS) $(PKGS)

race: build
	$(GO) test $(LDFLAGS) -race -count=1 -timeout 20m $(PKGS)

# flakes runs the mount tests three more times without -race (a
# different schedule than under -race) to catch order-dependent tests.
flakes: build
	$(GO) test $(LDFLAGS) -count=3 -timeout 20m ./fusefs/ ./tests/

# A build without io_uring must not link giouring, and its engine must
# still open and inspect segments.
noiouring:
	@if $(GO) list -tags noiouring -deps ./cmd/orbitefs | grep -q giouring; then \
		echo "noiouring build still depends on giouring"; exit 1; fi
	$(GO) test -tags noiouring $(LDFLAGS) -count=1 ./engine/ ./config/

# An execution count, not a duration: Go 1.26's fuzz coordinator can
# report "context deadline exceeded" when a duration expires while a
# worker is mid-call (go.dev/issue/75804, fixed in Go 1.27); a count has
# no deadline to race. 150000 inputs take about 10 s here.
fuzz:
	$(GO) test $(LDFLAGS) -run '^$$' -fuzz FuzzParseSubmission -fuzztime 150000x ./control/
	$(GO) test $(LDFLAGS) -run '^$$' -fuzz FuzzJSONScanner -fuzztime 30000x ./control/

# bench-smoke runs each bench command briefly (200 ms; load: 3 MiB) (scripts/bench-smoke.sh:
# JSON checked with jq in a temporary directory, one line per command).
bench-smoke: build
	bash scripts/bench-smoke.sh

# demo-check runs the README walkthrough (scripts/demo.sh) as part of
# make test, so that `make demo` cannot rot. Like the end-to-end tests it
# skips where this user cannot mount FUSE, and fails instead when
# ORBITEFS_REQUIRE names fuse (.ci/run sets it).
demo-check: build
	@if [ -e /dev/fuse ] && { [ "$$(id -u)" = 0 ] || command -v fusermount3 >/dev/null; }; then \
		bash scripts/demo.sh; \
	elif echo ",$$ORBITEFS_REQUIRE," | grep -q ',fuse,'; then \
		echo "demo: cannot mount FUSE here (no /dev/fuse, or not root and no fusermount3), and ORBITEFS_REQUIRE=$$ORBITEFS_REQUIRE requires fuse"; exit 1; \
	else \
		echo "demo skipped: cannot mount FUSE here (no /dev/fuse, or not root and no fusermount3)"; \
	fi

run: build
	@mkdir -p $(MOUNT)
	@echo "mounting orbitefs at $(MOUNT) (Ctrl-C to unmount); try: cat $(MOUNT)/README"
	./bin/orbitefs mount $(MOUNT)

demo: build
	bash scripts/demo.sh

clean:
	rm -rf bin
