#!/usr/bin/env bash
# kvswap-compare.sh: run `orbitefs bench kvswap` and fio on the same layer
# files and pattern, in alternating rounds, for each client count, and
# print the medians as a Markdown table (docs/performance.md records it).
# With "-c '1 4 16 64'" it is the concurrency-scaling measurement.
#
# fio's pattern: random reads of one group (bs = --group-bytes) spread over
# the layer files (file_service_type=random), --batch requests submitted
# together and all reaped before the next batch
# (iodepth = iodepth_batch_submit = iodepth_batch_complete_min = batch),
# one job per client: the engine's batch barrier, per job. fio picks the
# file per request, the engine per batch; both read whole groups at random
# group offsets.
#
# usage: bench/kvswap-compare.sh [-n ROUNDS] [-t SECONDS] [-d DIR] [-c CLIENTS]
#                                [-g GROUP_BYTES] [-b BATCH] [-B] [-o OUTDIR]
#   -d   directory of the layer files (default /tmp/orbitefs-kv; use a
#        /dev/shm directory for tmpfs); created with --create
#   -c   client counts, space separated (default "1")
#   -g   bytes per group (default 262144), -b groups per batch (default 32)
#   -B   buffered (page cache) for both, instead of O_DIRECT
# Environment: ORBITEFS (default ./bin/orbitefs), FIO (default fio).
set -euo pipefail

rounds=3 runtime=5 dir=/tmp/orbitefs-kv clients="1" gbytes=262144 batch=32 direct=1 out="" layers=4 groups=256
while getopts "n:t:d:c:g:b:Bo:h" opt; do
	case $opt in
	n) rounds=$OPTARG ;;
	t) runtime=$OPTARG ;;
	d) dir=$OPTARG ;;
	c) clients=$OPTARG ;;
	g) gbytes=$OPTARG ;;
	b) batch=$OPTARG ;;
	B) direct=0 ;;
	o) out=$OPTARG ;;
	*) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
	esac
done
cd "$(dirname "$0")/.."
orbitefs=${ORBITEFS:-./bin/orbitefs}
fio=${FIO:-fio}
[ -x "$orbitefs" ] || make build >&2
for tool in "$fio" jq awk; do
	command -v "$tool" >/dev/null || { echo "kvswap-compare.sh: $tool not found" >&2; exit 1; }
done
[ -n "$out" ] || out=$(mktemp -d /tmp/orbitefs-kvswap-compare.XXXXXX)
mkdir -p "$out"
buffered=()
[ "$direct" = 1 ] || buffered=(--buffered)
files=$(for l in $(seq 0 $((layers - 1))); do printf '%s/layer-%03d.kv:' "$dir" "$l"; done)
files=${files%:}

run_engine() { # clients
	"$orbitefs" bench kvswap --dir "$dir" --create --layers "$layers" --groups "$groups" --group-bytes "$gbytes" \
		--batch "$batch" --clients "$1" --runtime "${runtime}s" "${buffered[@]}" --json |
		jq -c '{gbps: .gb_per_sec, p99_us: .batch_p99_us}'
}
run_fio() { # clients
	"$fio" --name=kvswap --filename="$files" --file_service_type=random --ioengine=io_uring --rw=randread \
		--bs="$gbytes" --iodepth="$batch" --iodepth_batch_submit="$batch" --iodepth_batch_complete_min="$batch" \
		--direct="$direct" --fixedbufs=1 --registerfiles=1 --numjobs="$1" --group_reporting --norandommap \
		--time_based --runtime="$runtime" --lat_percentiles=1 --output-format=json |
		jq -c '.jobs[0].read | {gbps: (.bw_bytes / 1e9), p99_us: (.lat_ns.percentile["99.000000"] / 1000)}'
}
median() { sort -g | awk '{v[NR] = $1} END { if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "# $(date -u +%Y-%m-%dT%H:%MZ) orbitefs $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores; $dir ($(stat -f -c %T "$dir" 2>/dev/null || echo "?")); direct $direct; $layers layers x $groups groups x $gbytes B; batch $batch; ${runtime}s x $rounds rounds; raw JSON in $out" >&2
"$orbitefs" bench kvswap --dir "$dir" --create --layers "$layers" --groups "$groups" --group-bytes "$gbytes" --batch "$batch" --runtime 100ms "${buffered[@]}" >/dev/null
{
printf '| clients | orbitefs GB/s | fio GB/s | orbitefs/fio | orbitefs batch p99 us | fio per-request p99 us |\n'
printf '| ---: | ---: | ---: | ---: | ---: | ---: |\n'
for c in $clients; do
	: >"$out/c$c.engine.json"
	: >"$out/c$c.fio.json"
	for r in $(seq 1 "$rounds"); do
		echo "clients $c round $r/$rounds" >&2
		run_engine "$c" >>"$out/c$c.engine.json"
		run_fio "$c" >>"$out/c$c.fio.json"
	done
	e=$(jq -r .gbps "$out/c$c.engine.json" | median) f=$(jq -r .gbps "$out/c$c.fio.json" | median)
	paired=$(paste <(jq -r .gbps "$out/c$c.engine.json") <(jq -r .gbps "$out/c$c.fio.json") | awk '{print $1 / $2}' | median)
	printf '| %s | %.2f | %.2f | %.2f | %.0f | %.0f |\n' "$c" "$e" "$f" "$paired" \
		"$(jq -r .p99_us "$out/c$c.engine.json" | median)" "$(jq -r .p99_us "$out/c$c.fio.json" | median)"
done
} | tee "$out/table.md"
