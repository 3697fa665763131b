#!/usr/bin/env bash
# peer-soak.sh: move a given number of bytes between two daemons' worth
# of peer protocol under packet loss, checking every byte.
#
# Two network namespaces joined by a veth pair (198.18.254.1 and .2, mtu
# 9000, GSO down: one lost packet is one packet, as on a NIC): an orbitefs
# daemon in the second exports a 1 GiB cpu region; `orbitefs bench peer
# --verify` in the first WRITEs -s requests on -L lanes, -c in flight,
# each carrying a pattern of its offset and round, and reads each one
# back and compares it, until -G GB moved (both directions counted) or
# -t seconds passed, while nftables drops -l percent of the TCP packets
# each way. Prints bytes moved, mismatched bytes and requests, GB/s and
# time; exits 1 on any mismatch or failed request.
#
# usage: bench/peer-soak.sh [-G GB (10^9 bytes, whole)] [-l LOSS_PCT] [-L LANES] [-c CONCURRENCY] [-s SIZE] [-t SECONDS] [-o OUTDIR]
# Needs root, iproute2, nftables, jq and nsenter. Environment: ORBITEFS
# (default ./bin/orbitefs). The machine may be shared: run it under nice.
set -euo pipefail

gb=20 loss=1 lanes=4 conc=16 size=1MiB t=480 out=""
while getopts "G:l:L:c:s:t:o:h" opt; do
	case $opt in
	G) gb=$OPTARG ;;
	l) loss=$OPTARG ;;
	L) lanes=$OPTARG ;;
	c) conc=$OPTARG ;;
	s) size=$OPTARG ;;
	t) t=$OPTARG ;;
	o) out=$OPTARG ;;
	*) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
	esac
done
cd "$(dirname "$0")/.."
orbitefs=$(realpath "${ORBITEFS:-./bin/orbitefs}")
[ -x "$orbitefs" ] || make build >&2
[ "$(id -u)" = 0 ] || { echo "peer-soak.sh: needs root (network namespaces)" >&2; exit 1; }
for tool in ip nft jq nsenter; do
	command -v "$tool" >/dev/null || { echo "peer-soak.sh: $tool not found" >&2; exit 1; }
done
[ -n "$out" ] || out=$(mktemp -d /tmp/orbitefs-peer-soak.XXXXXX)
mkdir -p "$out"

A=orbps-a B=orbps-b ipa=198.18.254.1 ipb=198.18.254.2 port=7071
. bench/netpair.sh
daemon=""
cleanup() {
	[ -z "$daemon" ] || kill "$daemon" 2>/dev/null || true
	[ -z "$daemon" ] || wait "$daemon" 2>/dev/null || true
	fusermount3 -uz "$out/m" 2>/dev/null || true
	ip netns del $A 2>/dev/null || true
	ip netns del $B 2>/dev/null || true
}
trap cleanup EXIT
cleanup
netpair
inA ip link set dev "${A}0" mtu 9000 gso_max_segs 1 gso_max_size 9000
inB ip link set dev "${B}0" mtu 9000 gso_max_segs 1 gso_max_size 9000

head -c 32 /dev/urandom | base64 >"$out/key"
chmod 600 "$out/key"
printf '[peer]\nlisten = "%s:%d"\nkey_file = "%s"\nname = "soak-server"\n' $ipb $port "$out/key" >"$out/server.toml"
printf '[peer]\nkey_file = "%s"\nname = "soak-client"\n' "$out/key" >"$out/client.toml"
mkdir -p "$out/m"
nsenter --net=/var/run/netns/$B "$orbitefs" mount --config "$out/server.toml" "$out/m" 2>"$out/daemon.log" &
daemon=$!
for _ in $(seq 100); do [ -e "$out/m/memory/register" ] && break; sleep 0.1; done
echo '{"name":"kv","location":"cpu","bytes":"1GiB","export":"read_write"}' >"$out/m/memory/register"

if [ "$loss" != 0 ]; then
	inB nft -f - <<-EOF2
		table inet orbpsloss {
			chain in { type filter hook input priority 0; meta l4proto tcp counter; meta l4proto tcp numgen random mod 100 < $loss counter drop; }
			chain out { type filter hook output priority 0; meta l4proto tcp counter; meta l4proto tcp numgen random mod 100 < $loss counter drop; }
		}
	EOF2
fi

echo "peer-soak: ${gb} GB, ${loss} % loss, $lanes lanes, $conc x $size WRITE + read-back, at most ${t}s" >&2
rc=0
j=$(inA "$orbitefs" bench peer --config "$out/client.toml" --addr $ipb:$port --server-pid "$daemon" \
	--op write --verify --total "$((gb * 1000000000))" --runtime "${t}s" --lanes "$lanes" --size "$size" --concurrency "$conc" \
	--json 2>"$out/bench.err") || rc=$?
[ -z "$j" ] || echo "$j" >"$out/run.json"
if [ "$loss" != 0 ]; then # the TCP packets seen and dropped at B, each way
	inB nft list table inet orbpsloss >"$out/nft.txt" 2>&1 || true
	grep -o 'counter packets [0-9]*' "$out/nft.txt" | awk '{print $3}' | paste -sd' ' |
		awk '{printf "nftables: in %d TCP packets, %d dropped (%.2f %%); out %d, %d dropped (%.2f %%)\n", $1, $2, 100*$2/($1>0?$1:1), $3, $4, 100*$4/($3>0?$3:1)}'
fi
cat "$out/bench.err" >&2
[ -n "$j" ] || { echo "peer-soak.sh: bench peer printed nothing (exit $rc)" >&2; exit 1; }
jq -r '.verify as $v |
	"moved \($v.moved_bytes) bytes (\($v.moved_bytes / 1e9 * 1000 | round / 1000) GB), checked \($v.checked_bytes)",
	"mismatched bytes \($v.mismatched_bytes) in \($v.mismatched_requests) requests; failed requests \($v.failed_requests)",
	"\($v.gb_per_sec * 1000 | round / 1000) GB/s over \($v.seconds * 10 | round / 10) s; CPU \(.cpu_seconds_per_gb * 100 | round / 100) s per GB of WRITE payload, read-backs not counted (client \(.client_cpu_seconds | round) s, daemon \(.server_cpu_seconds | round) s)"' <<<"$j"
echo "run: $out/run.json" >&2
exit $rc
