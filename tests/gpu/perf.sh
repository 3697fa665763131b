#!/usr/bin/env bash
# perf.sh: the KV-swap and many-core figures on the GPU machine, all in
# one call of at most about 9 minutes (no fio, no jq, no Go there).
#
#   bash tests/gpu/perf.sh build    here: the daemon, multicore.sh,
#                                   peers.py and perfsummary.py into
#                                   .gpu/perf (CGO_ENABLED=0, git-ignored)
#   bash tests/gpu/perf.sh run      there, with .gpu carried; results and
#                                   summary.md under $OUT/perf
#   bash tests/gpu/perf.sh summary DIR   the summary of a recorded run
#
# run, each step under `timeout` and skipped (saying so, in skipped.txt)
# when too little of PERF_BUDGET seconds is left:
#   1. `bench load` tmpfs -> cpu, 256 MiB against 4 MiB requests,
#      alternating, PERF_ROUNDS x 3 passes each.
#   2. bench/multicore.sh: engine against the parallel pread loop on
#      tmpfs, 4 MiB sequential and 4 KiB random at qd 32, and 4 KiB random
#      by 32 jobs at qd 1.
#   3. KV swap (`bench kvswap`, 4 layers x 256 groups of 128 KiB, 16 per
#      batch) on tmpfs and on ext4 with O_DIRECT, --write-pct 0 and 50,
#      at PERF_CLIENTS clients, into cpu and cuda:0, beside the Python
#      KV peer (peers.py kvswap: pinned buffers, a thread pool, async
#      copies) into cuda:0 on the same files, alternating engine cpu,
#      engine cuda:0, peer rounds (PERF_ROUNDS of them).
# Without a GPU (a dry run on the development machine) the cuda rows
# are left out and the peer runs into cpu memory without torch.
#
# Knobs (defaults for the GPU machine): PERF_RUNTIME seconds per point
# (2), PERF_ROUNDS (2), PERF_CLIENTS ("1 4 16 64"), PERF_SIZE bytes of
# the tmpfs file of steps 1-2 (4294967296), PERF_BUDGET seconds for the
# whole run (510), PERF_STEPS (which of "load multicore kvswap" to run:
# all), PERF_BIN (the folder build fills and run uses: .gpu/perf), PY
# (the torch venv's python, else python3), PERF_ENGINE (an engine
# configuration JSON file for the engine's kvswap runs, `bench kvswap
# --engine-json`; default: the built-in defaults).
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${PERF_BIN:-.gpu/perf}
RUNTIME=${PERF_RUNTIME:-2}
ROUNDS=${PERF_ROUNDS:-2}
CLIENTS=${PERF_CLIENTS:-1 4 16 64}
SIZE=${PERF_SIZE:-4294967296}
BUDGET=${PERF_BUDGET:-510}
STEPS=" ${PERF_STEPS:-load multicore kvswap} "
export PERF_CLIENTS=$CLIENTS

# left NEED STEP: true when NEED seconds remain in the budget; says so
# and returns false otherwise.
left() {
	if [ $((BUDGET - SECONDS)) -lt "$1" ]; then
		echo "SKIP $2: ${SECONDS}s of ${BUDGET}s used, it needs about $1 s" | tee -a "$R/skipped.txt"
		return 1
	fi
}

# tag JSON...: wrap each JSON line of stdin as {JSON..., "result": line}
# into the file $1.
tag() {
	local file=$1 fields=$2 l
	while read -r l; do
		case $l in
		'{'*) echo "{$fields,\"result\":$l}" | tee -a "$file" ;;
		*) echo "$l" ;;
		esac
	done
}

kvswap_step() {
	local py=${PY:-}
	[ -n "$py" ] || { [ -x /opt/torch/.venv/bin/python3 ] && py=/opt/torch/.venv/bin/python3; } || py=python3
	local gpu="" peerdev=cpu
	if nvidia-smi -L >/dev/null 2>&1; then
		gpu=cuda:0 peerdev=cuda:0
	fi
	local kv=(--layers 4 --groups 256 --group-bytes 128KiB --batch 16)
	local pkv=(--layers 4 --groups 256 --group-bytes 131072 --batch 16)
	local n per_point eng=()
	[ -n "${PERF_ENGINE:-}" ] && eng=(--engine-json "$PERF_ENGINE")
	n=$(echo $CLIENTS | wc -w)
	per_point=$(awk -v r="$RUNTIME" 'BEGIN { printf "%d", r + 1 }')
	for fsd in tmpfs:/dev/shm ext4:/tmp; do
		# The engine opens O_DIRECT where the filesystem has it (ext4),
		# so the peer does the same there.
		local fs=${fsd%%:*} d direct=()
		d=$(mktemp -d "${fsd#*:}/orbitefs-kv.XXXXXX")
		[ "$fs" = ext4 ] && direct=(--direct)
		"$ORBITEFS" bench kvswap --dir "$d" --create "${kv[@]}" --runtime 10ms >/dev/null || echo "kvswap --create $d: exit $?"
		for wp in 0 50; do
			for r in $(seq "$ROUNDS"); do
				for mem in cpu $gpu; do
					for c in $CLIENTS; do
						left $((per_point + 5)) "kvswap $fs write $wp round $r $mem $c" || continue
						timeout $((per_point + 40)) "$ORBITEFS" bench kvswap --dir "$d" "${kv[@]}" "${eng[@]}" --clients "$c" \
							--write-pct "$wp" --mem "$mem" --runtime "${RUNTIME}s" --seed "$r" --json |
							tag "$R/kvswap.jsonl" "\"impl\":\"engine\",\"fs\":\"$fs\",\"round\":$r" ||
							echo "kvswap $fs $mem $c write $wp: exit $?"
					done
				done
				left $((n * per_point + 15)) "peer $fs write $wp round $r" || continue
				timeout $((n * per_point + 90)) "$py" "$B/peers.py" kvswap --dir "$d" "${pkv[@]}" "${direct[@]}" \
					--clients "$(echo $CLIENTS | tr ' ' ,)" --write-pct "$wp" --device "$peerdev" --runtime "$RUNTIME" --seed "$r" |
					tag "$R/kvswap.jsonl" "\"impl\":\"peer\",\"fs\":\"$fs\",\"round\":$r" ||
					echo "peer $fs write $wp: exit $?"
			done
		done
		rm -rf "$d"
	done
}

# The tmpfs file of steps 1 and 2 (multicore.sh creates it the same way).
F=/dev/shm/orbitefs-perf.bin

load_step() {
	for r in $(seq "$ROUNDS"); do
		for req in 256MiB 4MiB; do
			left 40 "bench load $req round $r" || continue
			timeout 120 "$ORBITEFS" bench load --file "$F" --mem cpu --request "$req" --runs 3 --json |
				tag "$R/load.jsonl" "\"request\":\"$req\",\"round\":$r" || echo "bench load $req: exit $?"
		done
	done
}

multicore_step() {
	local t
	t=$(awk -v r="$RUNTIME" 'BEGIN { printf "%d", r < 1 ? 1 : r }')
	left $((3 * ROUNDS * 2 * (t + 1) + 10)) "multicore qd 32" &&
		timeout 200 bash "$B/multicore.sh" -f $F -s "$SIZE" -n "$ROUNDS" -t "$t" -o "$R/multicore" seqread4m randread seqwrite4m
	left $((ROUNDS * 2 * (t + 1) + 10)) "multicore 32 jobs" &&
		timeout 100 bash "$B/multicore.sh" -f $F -s "$SIZE" -n "$ROUNDS" -t "$t" -q 1 -j 32 -o "$R/multicore-j32" randread
}

summary() {
	local py=python3
	command -v python3 >/dev/null || py=/opt/torch/.venv/bin/python3
	"$py" tests/gpu/perfsummary.py "$1"
}

case ${1:-} in
build)
	set -e
	mkdir -p "$B"
	CGO_ENABLED=0 go build -ldflags="-checklinkname=0 $(bash scripts/buildflags.sh)" -o "$B/orbitefs" ./cmd/orbitefs
	cp bench/multicore.sh tests/gpu/peers.py tests/gpu/perfsummary.py "$B/"
	ls -l "$B"
	;;
run)
	R=${OUT:-/tmp/orbitefs-perf-out}/perf
	mkdir -p "$R"
	: >"$R/kvswap.jsonl"
	: >"$R/load.jsonl"
	{
		date -u +%FT%TZ
		echo "$(nproc) cores, $(uname -r), $(free -g | awk '/Mem:/ {print $2}') GiB"
		nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
		echo "runtime ${RUNTIME}s per point, $ROUNDS rounds, clients $CLIENTS, file $SIZE bytes"
		[ -n "${PERF_ENGINE:-}" ] && echo "engine configuration $PERF_ENGINE: $(tr -d '\n' <"$PERF_ENGINE")"
	} | tee "$R/machine.txt"
	export ORBITEFS=$B/orbitefs
	# The short, fixed steps first: what overruns the budget is the
	# last kvswap rows, which say so in skipped.txt.
	if [[ $STEPS == *" load "* || $STEPS == *" multicore "* ]]; then
		echo "## bench load and multicore on $F"
		"$ORBITEFS" bench file --file "$F" --size "$SIZE" --create --runtime 1ms --json >/dev/null
		[[ $STEPS == *" load "* ]] && load_step
		[[ $STEPS == *" multicore "* ]] && multicore_step
		rm -f "$F"
	fi
	if [[ $STEPS == *" kvswap "* ]]; then
		echo "## kvswap and the peer"
		kvswap_step
	fi
	python3 "$B/perfsummary.py" "$R" >"$R/summary.md" 2>&1 ||
		/opt/torch/.venv/bin/python3 "$B/perfsummary.py" "$R" >"$R/summary.md"
	cat "$R/summary.md"
	echo "perf.sh: ${SECONDS}s"
	;;
summary)
	summary "${2:?usage: perf.sh summary DIR}"
	;;
*)
	sed -n '2,/^set -u/p' "$0" | sed '$d' >&2
	exit 2
	;;
esac
