#!/usr/bin/env bash
# peer-ab.sh: two orbitefs binaries, A and B, measured against each other
# across the same veth pair in alternating runs, so that the load of a
# shared machine falls on both alike.
#
# Two network namespaces joined by a veth pair (198.18.253.1 and .2):
# in the second, one daemon per binary (A on port 7070, B on 7071) exports
# a 1 GiB cpu region; from the first, every round runs with A's client
# against A's daemon, then B's against B's (B's first in every other
# round, so that neither always runs second): a 4 KiB WRITE round trip
# alone, the same beside a 64 MiB WRITE stream (--stream), 1 MiB WRITE on
# hp_tcp (4 lanes, 16 in flight) and tcp (1 lane, 4 in flight), and 1 MiB
# READ on hp_tcp; -m picks others of these measurements (comma-separated,
# also "tcp 1MiB read", "4KiB read alone", a 4 KiB READ round trip, and
# "4KiB x16", 16 4 KiB WRITEs in flight).
# -f PA,PB sets [peer] frame_protection of A's daemon and client to PA
# and B's to PB (none or aead): A and B may then be the same binary.
# The load average is recorded before every run.
#
# usage: bench/peer-ab.sh -a BINARY_A -b BINARY_B [-n ROUNDS] [-t SECONDS] [-m MEASUREMENTS] [-f PA,PB] [-o OUTDIR]
# Needs root, iproute2, jq and nsenter. Prints one JSON line per run to
# OUTDIR/runs.jsonl and a Markdown table of medians (and each round) on
# stdout.
set -euo pipefail

rounds=5 t=3 out="" bina="" binb="" prot=""
measurements="4KiB beside 64MiB,4KiB alone,hp_tcp 1MiB,tcp 1MiB,hp_tcp 1MiB read"
while getopts "a:b:n:t:m:f:o:h" opt; do
	case $opt in
	a) bina=$(realpath "$OPTARG") ;;
	b) binb=$(realpath "$OPTARG") ;;
	n) rounds=$OPTARG ;;
	t) t=$OPTARG ;;
	m) measurements=$OPTARG ;;
	f) prot=$OPTARG ;;
	o) out=$OPTARG ;;
	*) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
	esac
done
[ -x "$bina" ] && [ -x "$binb" ] || { echo "peer-ab.sh: -a and -b name the two binaries" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "peer-ab.sh: needs root (network namespaces)" >&2; exit 1; }
for tool in ip jq nsenter; do
	command -v "$tool" >/dev/null || { echo "peer-ab.sh: $tool not found" >&2; exit 1; }
done
cd "$(dirname "$0")/.."
[ -n "$out" ] || out=$(mktemp -d /tmp/orbitefs-peer-ab.XXXXXX)
mkdir -p "$out"
: >"$out/runs.jsonl"

A=orbab-a B=orbab-b ipa=198.18.253.1 ipb=198.18.253.2
. bench/netpair.sh
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	for v in a b; do fusermount3 -uz "$out/m$v" 2>/dev/null || true; done
	ip netns del $A 2>/dev/null || true
	ip netns del $B 2>/dev/null || true
}
trap cleanup EXIT
cleanup
netpair

head -c 32 /dev/urandom | base64 >"$out/key"
chmod 600 "$out/key"
printf '[peer]\nkey_file = "%s"\nname = "ab-client"\n' "$out/key" >"$out/client.toml"
declare -A bin=([a]=$bina [b]=$binb) port=([a]=7070 [b]=7071) pid=() fp=()
if [ -n "$prot" ]; then
	fp[a]=${prot%%,*} fp[b]=${prot#*,}
fi
for v in a b; do
	printf '[peer]\nlisten = "%s:%d"\nkey_file = "%s"\nname = "ab-server-%s"\n' $ipb "${port[$v]}" "$out/key" $v >"$out/server-$v.toml"
	[ -z "${fp[$v]:-}" ] || printf 'frame_protection = "%s"\n' "${fp[$v]}" >>"$out/server-$v.toml"
	mkdir -p "$out/m$v"
	nsenter --net=/var/run/netns/$B "${bin[$v]}" mount --config "$out/server-$v.toml" "$out/m$v" 2>"$out/daemon-$v.log" &
	pid[$v]=$!
	pids+=("$!")
done
for v in a b; do
	for _ in $(seq 100); do [ -e "$out/m$v/memory/register" ] && break; sleep 0.1; done
	echo '{"name":"kv","location":"cpu","bytes":"1GiB","export":"read_write"}' >"$out/m$v/memory/register"
done

run() { # variant label flags...
	local v=$1 l=$2 j load fpf=()
	shift 2
	[ -z "${fp[$v]:-}" ] || fpf=(--frame-protection "${fp[$v]}")
	load=$(cut -d' ' -f1 /proc/loadavg)
	j=$(inA "${bin[$v]}" bench peer --config "$out/client.toml" --addr $ipb:"${port[$v]}" --server-pid "${pid[$v]}" \
		--runtime "${t}s" --json "${fpf[@]}" "$@") || { echo "peer-ab.sh: $v bench peer $* failed" >&2; return 1; }
	jq -c --arg v "$v" --arg l "$l" --argjson r "$r" --argjson load "$load" \
		'{variant: $v, label: $l, round: $r, load: $load} + .' <<<"$j" >>"$out/runs.jsonl"
}
for r in $(seq "$rounds"); do
	echo "round $r/$rounds $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
	IFS=, read -ra ms <<<"$measurements"
	for l in "${ms[@]}"; do
		order="a b"
		[ $((r % 2)) = 1 ] || order="b a" # every other round B first: no side always runs second
		for v in $order; do
			case $l in
			"4KiB beside 64MiB") run $v "$l" --lanes 4 --op write --size 4KiB --concurrency 1 --stream 64MiB ;;
			"4KiB alone") run $v "$l" --lanes 4 --op write --size 4KiB --concurrency 1 ;;
			"4KiB read alone") run $v "$l" --lanes 4 --op read --size 4KiB --concurrency 1 ;;
			"4KiB x16") run $v "$l" --lanes 4 --op write --size 4KiB --concurrency 16 ;;
			"hp_tcp 1MiB") run $v "$l" --lanes 4 --op write --size 1MiB --concurrency 16 ;;
			"tcp 1MiB") run $v "$l" --lanes 1 --op write --size 1MiB --concurrency 4 ;;
			"hp_tcp 1MiB read") run $v "$l" --lanes 4 --op read --size 1MiB --concurrency 16 ;;
			"tcp 1MiB read") run $v "$l" --lanes 1 --op read --size 1MiB --concurrency 4 ;;
			*) echo "peer-ab.sh: unknown measurement $l" >&2; exit 2 ;;
			esac
		done
	done
done

jq -s -r '
	def med: map(select(. != null)) | sort | if length == 0 then null else .[(length - 1) / 2 | floor] end;
	def r2: if . == null then "-" else (. * 100 | round / 100 | tostring) end;
	. as $all |
	"| measurement | variant | p50 us | p99 us (per round) | GB/s (per round) | stream GB/s | load (min-max) |",
	"| --- | --- | --- | --- | --- | --- | --- |",
	([.[].label] | unique[] as $l | ["a", "b"][] as $v |
		[$all[] | select(.label == $l and .variant == $v)] |
		"| \($l) | \($v) | \(map(.p50_us) | med | r2) | \(map(.p99_us) | med | r2) (\(map(.p99_us | r2) | join(", "))) | \(map(.gb_per_sec) | med | r2) (\(map(.gb_per_sec | r2) | join(", "))) | \(map(.stream.gb_per_sec) | med | r2) | \(map(.load) | min)-\(map(.load) | max) |")
' "$out/runs.jsonl"
echo "runs: $out/runs.jsonl" >&2
