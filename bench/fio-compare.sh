#!/usr/bin/env bash
# fio-compare.sh: run `orbitefs bench file` (the engine), fio (io_uring),
# fio psync with N jobs (what a user without io_uring runs: N threads
# each looping over pread/pwrite) and the naive pread baseline
# (`orbitefs bench file --impl pread`) on the same file, bs, queue depth
# and runtime, in alternating rounds (engine fio psync pread, engine ...),
# and print the medians and the engine/fio ratios as a Markdown table.
# docs/performance.md records its output. The two tmpfs target figures
# (4 KiB random vs fio io_uring, 4 MiB sequential vs the pread loop) come
# from dev-compare.sh, which runs only the pair being compared.
#
# usage: bench/fio-compare.sh [-n ROUNDS] [-t SECONDS] [-f FILE] [-s BYTES]
#                             [-q QD] [-j JOBS] [-B] [-o OUTDIR] [WORKLOAD...]
#   WORKLOAD  seqread (1 MiB sequential read), seqwrite (1 MiB sequential
#             write), randread (4 KiB random read), seqread4m (4 MiB
#             sequential read); default: the first three.
#             All run O_DIRECT (unless -B) at queue depth QD.
#   -n        rounds per workload (default 5; each round runs all three)
#   -t        seconds per run (default 10)
#   -f        file (default /tmp/orbitefs-bench-1g.bin); created with random
#             data when missing or shorter than -s. The write workload
#             overwrites it.
#   -s        bytes of the file exercised (default 1073741824, 1 GiB)
#   -q        queue depth (default 32)
#   -j        jobs of the fio psync run (default: nproc, one per core);
#             0 skips it
#   -B        buffered I/O (page cache) instead of O_DIRECT, for tmpfs
#             (/dev/shm), which has no O_DIRECT; the file is created
#             without oflag=direct then
#   -o        directory for every run's JSON (default: a new temp dir)
# Environment: ORBITEFS, the binary (default ./bin/orbitefs, built with
# `make build` when missing); FIO (default fio).
#
# Needs bash, jq, awk, dd and fio (Debian: apt-get install fio jq).
set -euo pipefail

rounds=5 runtime=10 file=/tmp/orbitefs-bench-1g.bin size=1073741824 qd=32 out=""
jobs=$(nproc) direct=1
while getopts "n:t:f:s:q:j:Bo:h" opt; do
	case $opt in
	n) rounds=$OPTARG ;;
	t) runtime=$OPTARG ;;
	f) file=$OPTARG ;;
	s) size=$OPTARG ;;
	q) qd=$OPTARG ;;
	j) jobs=$OPTARG ;;
	B) direct=0 ;;
	o) out=$OPTARG ;;
	*) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(seqread seqwrite randread)

cd "$(dirname "$0")/.."
orbitefs=${ORBITEFS:-./bin/orbitefs}
fio=${FIO:-fio}
if [ ! -x "$orbitefs" ]; then
	make build >&2
fi
for tool in "$fio" jq awk dd; do
	command -v "$tool" >/dev/null || { echo "fio-compare.sh: $tool not found" >&2; exit 1; }
done
[ -n "$out" ] || out=$(mktemp -d /tmp/orbitefs-fio-compare.XXXXXX)
mkdir -p "$out"

# The file: real data (not holes), so reads reach the device.
have=$(stat -c %s "$file" 2>/dev/null || echo 0)
if [ "$have" -lt "$size" ]; then
	echo "creating $file ($size bytes of random data)" >&2
	ddflags=(oflag=direct)
	[ "$direct" = 1 ] || ddflags=()
	dd if=/dev/urandom of="$file" bs=1M count=$(((size + 1048575) / 1048576)) "${ddflags[@]}" status=none
fi

# workload -> "op pattern bs fio-rw fio-bs"
spec() {
	case $1 in
	seqread) echo "read seq 1MiB read 1M" ;;
	seqwrite) echo "write seq 1MiB write 1M" ;;
	randread) echo "read rand 4KiB randread 4k" ;;
	seqread4m) echo "read seq 4MiB read 4M" ;;
	*) echo "fio-compare.sh: unknown workload $1 (want seqread, seqwrite, randread, seqread4m)" >&2; exit 2 ;;
	esac
}

# Each run leaves one JSON line: {"bytes_per_sec","iops","p50_us","p99_us"}.
directflag=(--direct)
[ "$direct" = 1 ] || directflag=()
run_orbitefs() { # impl op pattern bs
	"$orbitefs" bench file --impl "$1" --file "$file" --op "$2" --pattern "$3" --bs "$4" \
		--qd "$qd" --size "$size" --runtime "${runtime}s" "${directflag[@]}" --json |
		jq -c '{bytes_per_sec, iops, p50_us, p99_us}'
}
run_fio() { # rw bs dir(read|write)
	"$fio" --name=orbitefs-compare --filename="$file" --ioengine=io_uring --rw="$1" --bs="$2" \
		--iodepth="$qd" --direct="$direct" --fixedbufs=1 --registerfiles=1 --size="$size" --norandommap \
		--time_based --runtime="$runtime" --lat_percentiles=1 --output-format=json |
		jq -c ".jobs[0].$3 | {bytes_per_sec: .bw_bytes, iops, p50_us: (.lat_ns.percentile[\"50.000000\"] / 1000), p99_us: (.lat_ns.percentile[\"99.000000\"] / 1000)}"
}
# fio psync, -j jobs summed (group_reporting): one synchronous request per
# job at a time, so its queue depth is the job count, not -q.
run_psync() { # rw bs dir(read|write)
	"$fio" --name=orbitefs-compare --filename="$file" --ioengine=psync --rw="$1" --bs="$2" \
		--numjobs="$jobs" --group_reporting --direct="$direct" --size="$size" --norandommap \
		--time_based --runtime="$runtime" --lat_percentiles=1 --output-format=json |
		jq -c ".jobs[0].$3 | {bytes_per_sec: .bw_bytes, iops, p50_us: (.lat_ns.percentile[\"50.000000\"] / 1000), p99_us: (.lat_ns.percentile[\"99.000000\"] / 1000)}"
}
none='{"bytes_per_sec":0,"iops":0,"p50_us":0,"p99_us":0}'

median() { sort -g | awk '{v[NR] = $1} END { if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
col() { jq -r ".$2" "$1"; } # file key -> one value per line

echo "# $(date -u +%Y-%m-%dT%H:%MZ) orbitefs $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(uname -r) $(nproc) cores; file $file ($size bytes, $(findmnt -no FSTYPE -T "$file" 2>/dev/null || stat -f -c %T "$file")); qd $qd; direct $direct; psync jobs $jobs; ${runtime}s x $rounds rounds; raw JSON in $out" >&2
for w in "${workloads[@]}"; do
	read -r op pattern bs frw fbs <<<"$(spec "$w")"
	: >"$out/$w.engine.json"
	: >"$out/$w.fio.json"
	: >"$out/$w.pread.json"
	: >"$out/$w.psync.json"
	for r in $(seq 1 "$rounds"); do
		echo "$w round $r/$rounds" >&2
		run_orbitefs engine "$op" "$pattern" "$bs" >>"$out/$w.engine.json"
		run_fio "$frw" "$fbs" "$op" >>"$out/$w.fio.json"
		if [ "$jobs" -gt 0 ]; then
			run_psync "$frw" "$fbs" "$op" >>"$out/$w.psync.json"
		else
			echo "$none" >>"$out/$w.psync.json"
		fi
		run_orbitefs pread "$op" "$pattern" "$bs" >>"$out/$w.pread.json"
	done
done

# Table: one row per workload, medians over the rounds. The ratio is the
# median of the per-round orbitefs/fio throughput ratios (each round's
# runs are back to back, so machine drift cancels); the ratio of the
# medians is in brackets.
med() { col "$1" "$2" | median; }
tput() { # file -> "MB/s (IOPS)"
	awk -v b="$(med "$1" bytes_per_sec)" -v i="$(med "$1" iops)" 'BEGIN { printf "%.0f MB/s (%.0f IOPS)", b / 1e6, i }'
}
ratio() { # engine-file other-file -> "paired (of medians)"; "-" when other is 0
	local paired
	paired=$(paste <(col "$1" bytes_per_sec) <(col "$2" bytes_per_sec) | awk '$2 > 0 {print $1 / $2}' | median)
	awk -v x="$paired" -v a="$(med "$1" bytes_per_sec)" -v b="$(med "$2" bytes_per_sec)" 'BEGIN { if (b == 0) print "-"; else printf "%.2f (%.2f)", x, a / b }'
}
lat() { awk -v a="$(med "$1" p50_us)" -v b="$(med "$1" p99_us)" 'BEGIN { printf "%.0f / %.0f", a, b }'; }
{
printf '| workload | orbitefs | fio | fio psync x%s | naive pread | orbitefs/fio | orbitefs/psync | p50/p99 us orbitefs | fio | psync | naive |\n' "$jobs"
printf '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n'
for w in "${workloads[@]}"; do
	e=$out/$w.engine.json f=$out/$w.fio.json p=$out/$w.pread.json s=$out/$w.psync.json
	printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$w" "$(tput "$e")" "$(tput "$f")" "$(tput "$s")" "$(tput "$p")" \
		"$(ratio "$e" "$f")" "$(ratio "$e" "$s")" "$(lat "$e")" "$(lat "$f")" "$(lat "$s")" "$(lat "$p")"
done
} | tee "$out/table.md"
