#!/usr/bin/env bash
# perf.sh: docs/performance.md's figures on the many-core GPU machine (no fio there).
#
#   bash tests/gpu/perf.sh build   here: builds the daemon into .gpu/perf
#                                  (CGO_ENABLED=0, git-ignored)
#   bash tests/gpu/perf.sh run     there, with .gpu carried: engine vs
#                                  the parallel pread loop on tmpfs
#                                  (bench/multicore.sh, by one job and by
#                                  32), batch round trips through the
#                                  mount (bench ctl), the KV swap
#                                  workload on tmpfs and on ext4 by 1, 4,
#                                  16 and 64 clients (into cuda:0 when a
#                                  GPU is there), results under $OUT/perf
set -uo pipefail
cd "$(dirname "$0")/../.."
B=.gpu/perf

case ${1:-} in
build)
	set -e
	mkdir -p "$B"
	CGO_ENABLED=0 go build -ldflags=-checklinkname=0 -o "$B/orbitefs" ./cmd/orbitefs
	cp bench/multicore.sh "$B/"
	ls -l "$B"
	;;
run)
	R=${OUT:-/tmp/orbitefs-perf-out}/perf
	mkdir -p "$R"
	{ date -u +%FT%TZ; nproc; uname -r; free -g | sed -n 2p; nvidia-smi -L 2>/dev/null; } | tee "$R/machine.txt"
	export ORBITEFS=$B/orbitefs
	f=/dev/shm/orbitefs-perf.bin
	echo "## engine vs pread, tmpfs, qd 32"
	timeout 150 bash "$B/multicore.sh" -f $f -s 4294967296 -n 3 -t 3 -o "$R/multicore" seqread4m randread seqwrite4m
	echo "## the same, 4 KiB random reads by 32 jobs of qd 1 (pread: 32 goroutines)"
	timeout 60 bash "$B/multicore.sh" -f $f -s 4294967296 -n 3 -t 3 -q 1 -j 32 -o "$R/multicore-j32" randread
	rm -f $f
	echo "## control plane through FUSE (bench ctl), 1 and 16 clients, data on tmpfs and on ext4"
	for dd in /dev/shm /tmp; do
		timeout 100 "$ORBITEFS" bench ctl --clients 16 --runtime 2s --data-dir "$dd" --json | tee -a "$R/ctl.json" || echo "bench ctl $dd: exit $?"
	done
	mems=cpu
	nvidia-smi -L >/dev/null 2>&1 && mems="cpu cuda:0"
	for d in /dev/shm/orbitefs-kv /tmp/orbitefs-kv; do
		for mem in $mems; do
			for c in 1 4 16 64; do
				echo "## kvswap $d clients $c mem $mem"
				timeout 40 "$ORBITEFS" bench kvswap --dir "$d" --create --layers 4 --groups 256 --group-bytes 128KiB --batch 16 \
					--clients "$c" --mem "$mem" --runtime 3s --json | tee -a "$R/kvswap.json" || echo "kvswap $d $mem $c: exit $?"
			done
		done
		rm -rf "$d"
	done
	;;
*)
	sed -n '2,13p' "$0" >&2
	exit 2
	;;
esac
