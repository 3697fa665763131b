#!/usr/bin/env bash
# peer-compare.sh: `orbitefs bench peer` beside iperf3 on the same link in
# the same run, and the ratios against the peer targets.
#
# Two network namespaces joined by a veth pair (198.18.255.1 and .2): an
# orbitefs daemon in the second namespace listens for peers and exports
# two cpu regions (kv, 1 GiB; st, 256 MiB); iperf3 -s runs there too.
# From the first namespace, each round alternates iperf3 (-P 1, -P 4)
# with `bench peer`: 1 MiB WRITE and READ on tcp (1 lane) and hp_tcp (4
# lanes), a 4 KiB WRITE round trip alone and beside a 64 MiB write stream
# (to the same region, and to the other one). With -l, the link is then
# set to mtu 9000 with GSO down (one lost packet is one packet, as on a
# NIC) and 1 MiB WRITEs on 1 and 4 lanes run without loss, then with
# that percent of the TCP packets dropped each way (nftables numgen),
# then -N notifications under the same loss. With -L, every round also
# runs the lossless set on loopback (both ends in the daemon's
# namespace).
#
# usage: bench/peer-compare.sh [-n ROUNDS] [-t SECONDS] [-l LOSS_PCT] [-N COUNT] [-L] [-o OUTDIR]
# Needs root, iproute2, nftables, iperf3 and jq. Environment: ORBITEFS
# (default ./bin/orbitefs). Prints one JSON line per measurement to
# OUTDIR/runs.jsonl and a Markdown table of medians on stdout.
set -euo pipefail

rounds=3 t=3 loss=0 count=100000 loop=0 out=""
while getopts "n:t:l:N:Lo:h" opt; do
	case $opt in
	n) rounds=$OPTARG ;;
	t) t=$OPTARG ;;
	l) loss=$OPTARG ;;
	N) count=$OPTARG ;;
	L) loop=1 ;;
	o) out=$OPTARG ;;
	*) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
	esac
done
cd "$(dirname "$0")/.."
orbitefs=$(realpath "${ORBITEFS:-./bin/orbitefs}")
[ -x "$orbitefs" ] || make build >&2
[ "$(id -u)" = 0 ] || { echo "peer-compare.sh: needs root (network namespaces)" >&2; exit 1; }
for tool in ip nft iperf3 jq nsenter; do
	command -v "$tool" >/dev/null || { echo "peer-compare.sh: $tool not found" >&2; exit 1; }
done
[ -n "$out" ] || out=$(mktemp -d /tmp/orbitefs-peer-compare.XXXXXX)
mkdir -p "$out"
: >"$out/runs.jsonl"

A=orbpc-a B=orbpc-b ipa=198.18.255.1 ipb=198.18.255.2 port=7070
. bench/netpair.sh
daemon=""
cleanup() {
	[ -z "$daemon" ] || kill "$daemon" 2>/dev/null || true
	[ -z "$daemon" ] || wait "$daemon" 2>/dev/null || true
	fusermount3 -uz "$out/m" 2>/dev/null || true
	[ -z "${iperf:-}" ] || kill "$iperf" 2>/dev/null || true
	ip netns del $A 2>/dev/null || true
	ip netns del $B 2>/dev/null || true
}
trap cleanup EXIT
cleanup
netpair
lossy_link() { # mtu 9000, no GSO: the link the loss figures are measured on
	inA ip link set dev "${A}0" mtu 9000 gso_max_segs 1 gso_max_size 9000
	inB ip link set dev "${B}0" mtu 9000 gso_max_segs 1 gso_max_size 9000
}
plain_link() {
	inA ip link set dev "${A}0" mtu 1500 gso_max_segs 65535 gso_max_size 65536
	inB ip link set dev "${B}0" mtu 1500 gso_max_segs 65535 gso_max_size 65536
}

head -c 32 /dev/urandom | base64 >"$out/key"
chmod 600 "$out/key"
printf '[peer]\nlisten = "%s:%d"\nkey_file = "%s"\nname = "bench-server"\n' $ipb $port "$out/key" >"$out/server.toml"
printf '[peer]\nkey_file = "%s"\nname = "bench-client"\n' "$out/key" >"$out/client.toml"
mkdir -p "$out/m"
nsenter --net=/var/run/netns/$B "$orbitefs" mount --config "$out/server.toml" "$out/m" 2>"$out/daemon.log" &
daemon=$!
for _ in $(seq 100); do [ -e "$out/m/memory/register" ] && break; sleep 0.1; done
echo '{"name":"kv","location":"cpu","bytes":"1GiB","export":"read_write"}' >"$out/m/memory/register"
echo '{"name":"st","location":"cpu","bytes":"256MiB","export":"read_write"}' >"$out/m/memory/register"
nsenter --net=/var/run/netns/$B iperf3 -s -B $ipb -p 5201 >/dev/null 2>&1 &
iperf=$!
sleep 0.5

record() { # label json
	jq -c --arg l "$1" --argjson r "$r" '{label: $l, round: $r} + .' <<<"$2" >>"$out/runs.jsonl"
}
iperf_run() { # label ns streams
	local j
	j=$(in$2 iperf3 -c $ipb -p 5201 -P "$3" -t "$t" -J)
	record "$1" "$(jq -c '{gb_per_sec: (.end.sum_received.bits_per_second / 8e9)}' <<<"$j")"
}
peer_run() { # label ns flags...
	local l=$1 ns=$2 j
	shift 2
	j=$(in$ns "$orbitefs" bench peer --config "$out/client.toml" --addr $ipb:$port --server-pid "$daemon" \
		--runtime "${t}s" --json "$@") || { echo "peer-compare.sh: bench peer $* failed" >&2; return 1; }
	record "$l" "$j"
}
measure() { # prefix ns
	local p=$1 ns=$2
	iperf_run "$p iperf3 -P 1" "$ns" 1
	peer_run "$p tcp write 1MiB" "$ns" --lanes 1 --op write --size 1MiB --concurrency 4
	peer_run "$p tcp read 1MiB" "$ns" --lanes 1 --op read --size 1MiB --concurrency 4
	iperf_run "$p iperf3 -P 4" "$ns" 4
	peer_run "$p hp_tcp write 1MiB" "$ns" --lanes 4 --op write --size 1MiB --concurrency 16
	peer_run "$p hp_tcp read 1MiB" "$ns" --lanes 4 --op read --size 1MiB --concurrency 16
	peer_run "$p write 4KiB" "$ns" --lanes 4 --op write --size 4KiB --concurrency 1
	peer_run "$p write 4KiB beside 64MiB" "$ns" --lanes 4 --op write --size 4KiB --concurrency 1 --stream 64MiB
	peer_run "$p write 4KiB beside 64MiB to another region" "$ns" --lanes 4 --op write --size 4KiB --concurrency 1 \
		--stream 64MiB --stream-region st
}
lossy() { # percent: drop that share of TCP packets in and out of B
	inB nft -f - <<-EOF
		table inet orbpcloss {
			chain in { type filter hook input priority 0; meta l4proto tcp numgen random mod 100 < $1 drop; }
			chain out { type filter hook output priority 0; meta l4proto tcp numgen random mod 100 < $1 drop; }
		}
	EOF
}

for r in $(seq "$rounds"); do
	echo "round $r/$rounds" >&2
	measure veth A
	[ "$loop" = 0 ] || measure loopback B
	if [ "$loss" != 0 ]; then
		lossy_link
		peer_run "veth tcp write 1MiB lossless" A --lanes 1 --op write --size 1MiB --concurrency 4
		peer_run "veth hp_tcp write 1MiB lossless" A --lanes 4 --op write --size 1MiB --concurrency 16
		lossy "$loss"
		peer_run "veth tcp write 1MiB loss" A --lanes 1 --op write --size 1MiB --concurrency 4
		peer_run "veth hp_tcp write 1MiB loss" A --lanes 4 --op write --size 1MiB --concurrency 16
		j=$(inA "$orbitefs" bench peer --config "$out/client.toml" --op notify --count "$count" --concurrency 64 \
			--listen $ipb:0 --listen-netns /var/run/netns/$B --json) || echo "peer-compare.sh: notify failed" >&2
		[ -z "$j" ] || record "veth notify loss" "$j"
		inB nft delete table inet orbpcloss
		plain_link
	fi
done

# Medians per label, then the ratios the targets name: each the median of
# its per-round ratios (both sides of a ratio ran in the same round, next
# to each other).
jq -s -r --argjson loss "$loss" '
	def med: map(select(. != null)) | sort | if length == 0 then null else .[(length - 1) / 2 | floor] end;
	def m($l; f): [.[] | select(.label == $l) | f] | med;
	def r2: if . == null then "-" else (. * 100 | round / 100 | tostring) end;
	def ratio($a; $b; f): . as $all | [$all[] | select(.label == $a)] | map(. as $x |
		($all[] | select(.label == $b and .round == $x.round) | ($x | f) / f)) | med;
	def rounds($a; $b; f): . as $all | [$all[] | select(.label == $a)] | map(. as $x |
		($all[] | select(.label == $b and .round == $x.round) | ($x | f) / f | r2)) | join(", ");
	. as $all |
	([.[].label] | unique | map(. as $l | {label: $l,
		gbps: ($all | m($l; .gb_per_sec)), p50: ($all | m($l; .p50_us)), p99: ($all | m($l; .p99_us)),
		cpu: ($all | m($l; .cpu_seconds_per_gb)), rate: ($all | m($l; .ops_per_sec)),
		stream: ($all | m($l; .stream.gb_per_sec))})) as $rows |
	"| measurement (medians) | GB/s | p50 us | p99 us | CPU s/GB | ops/s | stream GB/s |",
	"| --- | --- | --- | --- | --- | --- | --- |",
	($rows[] | "| \(.label) | \(.gbps | r2) | \(.p50 | r2) | \(.p99 | r2) | \(.cpu | r2) | \(.rate | if . == null then "-" else round end) | \(.stream | r2) |"),
	"",
	"| ratio | median of rounds | per round | target |",
	"| --- | --- | --- | --- |",
	(["veth", "loopback"][] as $p | select(any($rows[]; .label | startswith($p))) |
		(["tcp write", "iperf3 -P 1", "0.9"], ["tcp read", "iperf3 -P 1", "0.9"],
		 ["hp_tcp write", "iperf3 -P 4", "1.2"], ["hp_tcp read", "iperf3 -P 4", "1.2"]) as [$a, $b, $t] |
		"| \($p) \($a) 1MiB / \($b) | \($all | ratio("\($p) \($a) 1MiB"; "\($p) \($b)"; .gb_per_sec) | r2) | \($all | rounds("\($p) \($a) 1MiB"; "\($p) \($b)"; .gb_per_sec)) | >= \($t) |"),
	(if $loss != 0 then
		(["veth hp_tcp write 1MiB lossless", "4 lanes lossless", "0.75"], ["veth tcp write 1MiB loss", "1 lane lossy", "2.5"]) as [$b, $n, $t] |
		"| \($loss) % loss: 4 lanes lossy / \($n) | \($all | ratio("veth hp_tcp write 1MiB loss"; $b; .gb_per_sec) | r2) | \($all | rounds("veth hp_tcp write 1MiB loss"; $b; .gb_per_sec)) | >= \($t) |"
	else empty end)
' "$out/runs.jsonl"
echo "runs: $out/runs.jsonl" >&2
