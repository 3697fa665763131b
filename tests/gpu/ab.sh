#!/usr/bin/env bash
# ab.sh: two orbitefs binaries side by side on the GPU machine, alternating
# A and B (B first every other round), on the workloads an engine change
# usually moves: 4 KiB random reads from a tmpfs file by one batch at queue
# depth 32 and by 32 jobs at queue depth 1 (each with the pread loop of
# the same shape: 32 goroutines on one file, 32 jobs of one), and KV
# swap (`bench kvswap`, the perf.sh shape) from ext4 (O_DIRECT) and tmpfs
# into DRAM and cuda:0. Every run's JSON goes to OUT/ab.jsonl tagged with
# its side, workload and round; `python3 perfsummary.py --ab OUT` is not
# needed: each line carries what a table needs.
#
#   bash tests/gpu/ab.sh A_BIN B_BIN OUT [ROUNDS]
#
# AB_STEPS picks among "file ext4 tmpfs" (default all three); AB_CLIENTS
# the KV-swap client counts (default "1 4 16"); AB_RUNTIME seconds per
# run (default 2); AB_PROFILE=1 adds one mutex and one CPU profile of
# B's one-batch run.
set -uo pipefail
A=$1 B=$2 OUT=$3 ROUNDS=${4:-3}
STEPS=" ${AB_STEPS:-file ext4 tmpfs} "
CLIENTS=${AB_CLIENTS:-1 4 16}
RT=${AB_RUNTIME:-2}
gpu=""
nvidia-smi -L >/dev/null 2>&1 && gpu=cuda:0
mkdir -p "$OUT"
J=$OUT/ab.jsonl
: >"$J"
run() { # side workload round cmd...
	local side=$1 w=$2 r=$3
	shift 3
	local l
	l=$(timeout $((RT + 60)) "$@" --json 2>"$OUT/err.txt" | grep '^{' | tail -1)
	if [ -n "$l" ]; then
		echo "{\"side\":\"$side\",\"w\":\"$w\",\"round\":$r,\"result\":$l}" | tee -a "$J" | cut -c1-200
	else
		echo "$side $w round $r: no result: $(tail -3 "$OUT/err.txt")"
	fi
}
order() { if (($1 % 2)); then echo "A B"; else echo "B A"; fi; }
bin() { if [ "$1" = A ]; then echo "$A"; else echo "$B"; fi; }

if [[ $STEPS == *" file "* ]]; then
	f=/dev/shm/orbitefs-ab.bin
	[ -f "$f" ] || "$A" bench file --file "$f" --size 4GiB --create --runtime 10ms --json >/dev/null
	for r in $(seq "$ROUNDS"); do
		for s in $(order "$r"); do
			run "$s" qd32 "$r" "$(bin "$s")" bench file --file "$f" --op read --pattern rand --bs 4KiB --qd 32 --jobs 1 --runtime "${RT}s" --seed "$r"
			run "$s" j32 "$r" "$(bin "$s")" bench file --file "$f" --op read --pattern rand --bs 4KiB --qd 1 --jobs 32 --runtime "${RT}s" --seed "$r"
		done
		run pread qd32 "$r" "$A" bench file --impl pread --file "$f" --op read --pattern rand --bs 4KiB --qd 32 --jobs 1 --runtime "${RT}s" --seed "$r"
		run pread j32 "$r" "$A" bench file --impl pread --file "$f" --op read --pattern rand --bs 4KiB --qd 1 --jobs 32 --runtime "${RT}s" --seed "$r"
	done
	if [ "${AB_PROFILE:-}" = 1 ]; then
		"$B" bench file --file "$f" --op read --pattern rand --bs 4KiB --qd 32 --jobs 1 --runtime "${RT}s" \
			--mutexprofile "$OUT/qd32.mutex.prof" --cpuprofile "$OUT/qd32.cpu.prof" --json >"$OUT/qd32.profile.json" 2>&1
	fi
	rm -f "$f"
fi
for fsd in ext4:/tmp tmpfs:/dev/shm; do
	fs=${fsd%%:*}
	[[ $STEPS == *" $fs "* ]] || continue
	d=$(mktemp -d "${fsd#*:}/orbitefs-ab.XXXXXX")
	kv=(--layers 4 --groups 256 --group-bytes 128KiB --batch 16)
	"$A" bench kvswap --dir "$d" --create "${kv[@]}" --runtime 10ms >/dev/null || echo "kvswap --create $d: exit $?"
	for r in $(seq "$ROUNDS"); do
		for mem in cpu $gpu; do
			for c in $CLIENTS; do
				for s in $(order "$r"); do
					run "$s" "kv-$fs-$mem-$c" "$r" "$(bin "$s")" bench kvswap --dir "$d" "${kv[@]}" --clients "$c" --mem "$mem" --runtime "${RT}s" --seed "$r"
				done
			done
		done
	done
	rm -rf "$d"
done
