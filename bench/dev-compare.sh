#!/usr/bin/env bash
# dev-compare.sh: the two development-machine figures, each the median
# of alternating rounds (A B A B ...) of exactly two commands on one
# tmpfs file, with both command lines printed as run:
#
#   randread   4 KiB random reads at queue depth 32: the engine
#              (`orbitefs bench file`) against fio io_uring with
#              fixedbufs and registerfiles; IOPS.
#   seqread4m  4 MiB sequential reads at queue depth 32: the engine
#              against the parallel pread loop (`orbitefs bench file
#              --impl pread`, 32 goroutines); bytes/s.
#
# Nothing else runs between the two (fio-compare.sh also runs fio psync
# and the pread loop in each round, which changes what the pair sees).
# The ratio is the median of the per-round A/B ratios (each pair back to
# back, so drift cancels); the ratio of the medians follows in brackets.
#
# usage: bench/dev-compare.sh [-n ROUNDS] [-t SECONDS] [-f FILE] [-s BYTES]
#                             [-o OUTDIR] [FIGURE...]
#   FIGURE  randread, seqread4m (default: both)
#   -n      rounds (default 5)
#   -t      seconds per run (default 5)
#   -f      the file (default /dev/shm/orbitefs-dev-1g.bin), created with
#           random data when missing or shorter than -s; buffered I/O
#           (tmpfs has no O_DIRECT)
#   -s      bytes of the file exercised (default 1073741824, 1 GiB)
#   -o      directory for every run's JSON and table.md (default: a new
#           temp dir)
# Environment: ORBITEFS (default ./bin/orbitefs, built with `make build`
# when missing), FIO (default fio). Needs fio, jq, awk.
set -euo pipefail

rounds=5 runtime=5 file=/dev/shm/orbitefs-dev-1g.bin size=1073741824 out=""
while getopts "n:t:f:s:o:h" opt; do
	case $opt in
	n) rounds=$OPTARG ;;
	t) runtime=$OPTARG ;;
	f) file=$OPTARG ;;
	s) size=$OPTARG ;;
	o) out=$OPTARG ;;
	*) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
figures=("$@")
[ ${#figures[@]} -gt 0 ] || figures=(randread seqread4m)

cd "$(dirname "$0")/.."
orbitefs=${ORBITEFS:-./bin/orbitefs}
fio=${FIO:-fio}
[ -x "$orbitefs" ] || make build >&2
for tool in "$fio" jq awk; do
	command -v "$tool" >/dev/null || { echo "dev-compare.sh: $tool not found" >&2; exit 1; }
done
[ -n "$out" ] || out=$(mktemp -d /tmp/orbitefs-dev-compare.XXXXXX)
mkdir -p "$out"
if [ "$(stat -c %s "$file" 2>/dev/null || echo 0)" -lt "$size" ]; then
	echo "creating $file ($size bytes of random data)" >&2
	dd if=/dev/urandom of="$file" bs=1M count=$(((size + 1048575) / 1048576)) status=none
fi

# commands FIGURE: sets A and B (arrays), their labels, the metric's jq
# path in each one's JSON, and its unit.
commands() {
	local common=(--file "$file" --op read --size "$size" --qd 32 --runtime "${runtime}s" --json)
	case $1 in
	randread)
		A=("$orbitefs" bench file --impl engine "${common[@]}" --pattern rand --bs 4KiB)
		B=("$fio" --name=orbitefs-dev --filename="$file" --ioengine=io_uring --rw=randread --bs=4k --iodepth=32
			--direct=0 --fixedbufs=1 --registerfiles=1 --size="$size" --norandommap --time_based --runtime="$runtime"
			--output-format=json)
		alabel=engine blabel="fio io_uring" ametric=.iops bmetric=.jobs[0].read.iops unit=IOPS
		;;
	seqread4m)
		A=("$orbitefs" bench file --impl engine "${common[@]}" --pattern seq --bs 4MiB)
		B=("$orbitefs" bench file --impl pread "${common[@]}" --pattern seq --bs 4MiB)
		alabel=engine blabel="pread loop" ametric=".bytes_per_sec / 1e9" bmetric=".bytes_per_sec / 1e9" unit=GB/s
		;;
	*)
		echo "dev-compare.sh: unknown figure $1 (want randread, seqread4m)" >&2
		exit 2
		;;
	esac
}

median() { sort -g | awk '{v[NR] = $1} END { if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "# $(date -u +%Y-%m-%dT%H:%MZ) orbitefs $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $("$fio" --version), $(uname -r), $(nproc) cores; $file ($(stat -f -c %T "$file"), $size bytes); ${runtime}s x $rounds rounds; raw JSON in $out" | tee "$out/table.md"
for f in "${figures[@]}"; do
	commands "$f"
	{
		echo
		echo "$f: A ($alabel), then B ($blabel), $rounds rounds:"
		printf '    A:'; printf ' %q' "${A[@]}"; echo
		printf '    B:'; printf ' %q' "${B[@]}"; echo
	} | tee -a "$out/table.md"
	: >"$out/$f.a.json"
	: >"$out/$f.b.json"
	for r in $(seq "$rounds"); do
		"${A[@]}" | jq -c . >>"$out/$f.a.json"
		"${B[@]}" | jq -c . >>"$out/$f.b.json"
		paste <(jq -r "$ametric" "$out/$f.a.json" | tail -1) <(jq -r "$bmetric" "$out/$f.b.json" | tail -1) |
			awk -v f="$f" -v r="$r" -v u="$unit" '{ printf "%s round %d: A %.4g, B %.4g %s, A/B %.3f\n", f, r, $1, $2, u, ($2 > 0 ? $1 / $2 : 0) }' >&2
	done
done
{
	echo
	echo "| figure | A | B | A median | B median | A/B (per-round median) | A/B (of medians) |"
	echo "| --- | --- | --- | ---: | ---: | ---: | ---: |"
	for f in "${figures[@]}"; do
		commands "$f"
		a=$(jq -r "$ametric" "$out/$f.a.json" | median) b=$(jq -r "$bmetric" "$out/$f.b.json" | median)
		p=$(paste <(jq -r "$ametric" "$out/$f.a.json") <(jq -r "$bmetric" "$out/$f.b.json") | awk '$2 > 0 { print $1 / $2 }' | median)
		awk -v f="$f" -v al="$alabel" -v bl="$blabel" -v a="$a" -v b="$b" -v p="$p" -v u="$unit" \
			'BEGIN { printf "| %s | %s | %s | %.4g %s | %.4g %s | %.2f | %.2f |\n", f, al, bl, a, u, b, u, p, (b > 0 ? a / b : 0) }'
	done
} | tee -a "$out/table.md"
