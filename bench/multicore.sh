#!/usr/bin/env bash
# multicore.sh: the engine against the naive parallel pread loop
# (`orbitefs bench file --impl pread`) on one buffered file, alternating
# engine and pread runs, on every core of the machine. It needs no fio,
# so it runs on the GPU machine as well as here; fio-compare.sh adds fio
# where fio exists. Prints one markdown row per workload: medians of the
# rounds, and the median of the per-round engine/pread ratios.
#
#   bash bench/multicore.sh [-f FILE] [-s BYTES] [-n ROUNDS] [-t SECONDS] [-q QD] [-j JOBS] [WORKLOAD...]
#
# WORKLOAD: seqread4m (4 MiB sequential reads), randread (4 KiB random
# reads), seqwrite4m, randwrite; default seqread4m randread. -j runs
# JOBS copies of each side at once (`--jobs`: engine jobs with their own
# batches and -q requests each; pread -q goroutines per job).
# -f defaults to /dev/shm/orbitefs-multicore.bin, created (random data)
# at -s bytes (default 4 GiB) when missing. ORBITEFS is the binary
# (default ./bin/orbitefs); ORBITEFS_FLAGS adds flags to every engine
# run (e.g. "--batch-rings 1"). Raw JSON lines go to -o DIR (default a
# temporary directory). Without jq (the GPU machine) the runs are only
# recorded; `multicore.sh -S DIR WORKLOAD...` prints the table of a
# recorded directory later, elsewhere.
set -euo pipefail

file=/dev/shm/orbitefs-multicore.bin size=4294967296 rounds=3 runtime=5 qd=32 jobs=1 out="" summarize=""
while getopts "f:s:n:t:q:j:o:S:" o; do
	case $o in
	f) file=$OPTARG ;;
	s) size=$OPTARG ;;
	n) rounds=$OPTARG ;;
	t) runtime=$OPTARG ;;
	q) qd=$OPTARG ;;
	j) jobs=$OPTARG ;;
	o) out=$OPTARG ;;
	S) summarize=$OPTARG ;;
	*) sed -n '2,25p' "$0" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || set -- seqread4m randread
median() { sort -g | awk '{v[NR] = $1} END { if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# table DIR WORKLOAD...: the summary of recorded runs.
table() {
	local out=$1
	shift
	printf '| workload | engine GB/s | engine IOPS | pread GB/s | pread IOPS | engine/pread | engine p50/p99 us | pread p50/p99 us | engine CPU us/op |\n'
	printf '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n'
	for w in "$@"; do
		m() { jq -r "$2" "$out/$w.$1.json" | median; }
		ratio=$(paste <(jq -r .bytes_per_sec "$out/$w.engine.json") <(jq -r .bytes_per_sec "$out/$w.pread.json") |
			awk '$2 > 0 {print $1 / $2}' | median)
		printf '| %s | %.2f | %.0f | %.2f | %.0f | %.2f | %.0f / %.0f | %.0f / %.0f | %.1f |\n' "$w" \
			"$(m engine '.bytes_per_sec / 1e9')" "$(m engine .iops)" "$(m pread '.bytes_per_sec / 1e9')" "$(m pread .iops)" "$ratio" \
			"$(m engine .p50_us)" "$(m engine .p99_us)" "$(m pread .p50_us)" "$(m pread .p99_us)" \
			"$(m engine '.user_cpu_us_per_op + .sys_cpu_us_per_op')"
	done
}

if [ -n "$summarize" ]; then
	table "$summarize" "$@"
	exit
fi
orbitefs=${ORBITEFS:-./bin/orbitefs}
read -r -a extra <<<"${ORBITEFS_FLAGS:-}"
[ -n "$out" ] || out=$(mktemp -d /tmp/orbitefs-multicore.XXXXXX)
mkdir -p "$out"
if [ ! -f "$file" ] || [ "$(stat -c %s "$file")" -lt "$size" ]; then
	"$orbitefs" bench file --file "$file" --size "$size" --create --runtime 1ms --json >/dev/null
fi

echo "# $(date -u +%FT%TZ) $(nproc) cores, $(uname -r); $file ($(stat -f -c %T "$file")), $size bytes; qd $qd x $jobs jobs; ${runtime}s x $rounds rounds; raw in $out" >&2

for w in "$@"; do
	case $w in
	seqread4m) op=read pattern=seq bs=4MiB ;;
	seqwrite4m) op=write pattern=seq bs=4MiB ;;
	randread) op=read pattern=rand bs=4KiB ;;
	randwrite) op=write pattern=rand bs=4KiB ;;
	*) echo "unknown workload $w" >&2; exit 2 ;;
	esac
	: >"$out/$w.engine.json"
	: >"$out/$w.pread.json"
	for _ in $(seq "$rounds"); do
		for impl in engine pread; do
			flags=()
			[ "$impl" = engine ] && flags=("${extra[@]}")
			"$orbitefs" bench file --impl "$impl" --file "$file" --op "$op" --pattern "$pattern" --bs "$bs" \
				--qd "$qd" --jobs "$jobs" --size "$size" --runtime "${runtime}s" --json "${flags[@]}" >>"$out/$w.$impl.json"
		done
	done
done
if command -v jq >/dev/null; then
	table "$out" "$@"
else
	echo "no jq here: print the table elsewhere with $0 -S <copy of $out> $*" >&2
fi
