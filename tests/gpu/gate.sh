#!/usr/bin/env bash
# gate.sh: the GPU qualification gate (docs/qualification.md). Two halves:
#
#   bash tests/gpu/gate.sh build   on the development machine: builds the
#                                  daemon and every GPU test binary into
#                                  .gpu/gate (CGO_ENABLED=0, git-ignored)
#   bash tests/gpu/gate.sh run     on the GPU machine, from the repository
#                                  root, with .gpu carried: runs every
#                                  check and the throughput table, writes
#                                  logs and results under $OUT/gate (or
#                                  /tmp/orbitefs-gate-out)
#
# The run half needs root (drop_caches, mount, the udev entry cuFile
# reads), an NVIDIA GPU, /dev/fuse, and the torch venv for the peers.
# peer-gpu (peergpu.sh) runs two daemons on the GPU machine: a cuda:0 region exported
# by one is written from and read back into the other's memory over TCP
# on loopback; `bash tests/gpu/peergpu.sh bin/orbitefs /tmp cpu` is its
# dry run on host memory where there is no GPU.
# Every check prints PASS or FAIL; the exit status is the number of
# failed checks. ORBITEFS_GATE_TABLE=0 skips the throughput table (about
# 4 minutes) and runs the correctness checks only; ORBITEFS_GATE_CHECKS
# (names, space-separated) runs only those checks, saying which it skips. docs/qualification.md records each run.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=.gpu/gate

build() {
	set -e
	rm -rf "$B"
	mkdir -p "$B"
	export CGO_ENABLED=0
	go build -ldflags="-checklinkname=0 $(bash scripts/buildflags.sh)" -o "$B/orbitefs" ./cmd/orbitefs
	for p in backends/cuda backends/gds tests/gpu; do
		go test -c -ldflags=-checklinkname=0 -o "$B/$(basename "$p").test" "./$p"
	done
	cp tests/gpu/*.sh tests/gpu/peers.py tests/gpu/ipc_torch.py "$B/"
	ls -l "$B"
}

R=${OUT:-/tmp/orbitefs-gate-out}/gate
G="" S="" # scratch: ext4 (the root disk of the GPU machine) and tmpfs, made by run
failed=0

check() { # check NAME CMD...: run, log, PASS/FAIL
	local name=$1
	shift
	if [ -n "${ORBITEFS_GATE_CHECKS:-}" ] && [[ " $ORBITEFS_GATE_CHECKS " != *" $name "* ]]; then
		echo "SKIP $name (not in ORBITEFS_GATE_CHECKS)"
		return
	fi
	local t0=$SECONDS
	if "$@" >"$R/$name.log" 2>&1; then
		echo "PASS $name ($((SECONDS - t0)) s)"
	else
		echo "FAIL $name ($((SECONDS - t0)) s): tail of $name.log:"
		tail -25 "$R/$name.log" | sed 's/^/    /'
		failed=$((failed + 1))
	fi
}

run() {
	mkdir -p "$R"
	G=$(mktemp -d /tmp/orbitefs-gate.XXXXXX)
	S=$(mktemp -d /dev/shm/orbitefs-gate.XXXXXX)
	{
		date -u +%FT%TZ
		uname -r
		nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
		nproc
		findmnt -no SOURCE,FSTYPE -T "$G"
		findmnt -no SOURCE,FSTYPE -T "$S"
	} >"$R/machine.txt" 2>&1
	cat "$R/machine.txt"
	# cuFile reads block-device properties from udev's database, which
	# this machine lacks; the engine never writes system files.
	bash "$B/udev.sh" "$G" >"$R/udev.log" 2>&1 || echo "udev.sh failed (GDS checks will show it)"
	export ORBITEFS_REQUIRE=gpu ORBITEFS_GPU_EXT4=$G

	check cuda-backend "$B/cuda.test" -test.v -test.count=1 -test.timeout=5m
	check gds-backend "$B/gds.test" -test.v -test.count=1 -test.timeout=5m
	check engine-gpu "$B/gpu.test" -test.v -test.count=1 -test.timeout=8m
	check mount-cuda bash "$B/mount.sh" "$B/orbitefs" "$G"
	check cuda-ipc env RESULTS="$R/ipc.jsonl" bash "$B/ipc.sh" "$B/orbitefs" "$G"
	check peer-gpu bash "$B/peergpu.sh" "$B/orbitefs" "$G"
	if [ "${ORBITEFS_GATE_TABLE:-1}" = 1 ]; then
		check table bash "$B/table.sh" "$B/orbitefs" "$G" "$S" "$R/table.jsonl"
	else
		echo "SKIP table (ORBITEFS_GATE_TABLE=0: correctness checks only)"
	fi
	rm -rf "$G" "$S"
	echo "gate: $failed failed check(s); logs in $R"
	return "$failed"
}

case "${1:-}" in
build) build ;;
run) run ;;
*)
	echo "usage: $0 build|run" >&2
	exit 2
	;;
esac
