#!/usr/bin/env bash
# ipc.sh ORBITEFS DIR: CUDA IPC between two daemons on one GPU (gate.sh
# runs it on the GPU machine; it also runs alone). Daemon A exports a
# cuda:0 region; daemon B opens it as a peer segment over loopback (the
# descriptor carries the CUDA IPC handle: same host), WRITEs its own
# cuda:0 region into A's and READs it back, bytes checked with cmp through
# both mounts; then times REPS submissions of SIZE bytes each way against
# a torch device-to-device copy of the same size in the same run
# (ipc_torch.py), and prints one JSON line per direction with the ratio.
#
# Environment: SIZE (bytes, default 4 GiB, a multiple of 4 MiB), REPS
# (default 8), PY (the torch venv's python), RESULTS (a file the JSON
# lines are appended to); LOC=cpu WANT=tcp rehearse the script's own
# steps on a machine without a GPU (host memory goes over TCP). Any
# failed step exits non-zero.
set -euo pipefail
BIN=$(realpath "$1")
D=$2
HERE=$(dirname "$(realpath "$0")")
SIZE=${SIZE:-4294967296}
REPS=${REPS:-8}
PY=${PY:-/opt/torch/.venv/bin/python3}
LOC=${LOC:-cuda:0}
WANT=${WANT:-cuda_ipc}
GIB=1073741824
MA=$(mktemp -d /tmp/orbitefs-ipc-a.XXXXXX)
MB=$(mktemp -d /tmp/orbitefs-ipc-b.XXXXXX)
KEY=$D/ipc-peer.key
head -c 32 /dev/urandom | base64 >"$KEY"
chmod 600 "$KEY"
PORT=$((20000 + RANDOM % 20000))
# Every submission of a batch is charged against max_inflight_bytes
# from its submit to its end: room for all REPS of them (else the later
# ones are refused with EAGAIN and move nothing).
ENGINE="[engine]
max_inflight_bytes = $(((REPS + 1) * SIZE > 4294967296 ? (REPS + 1) * SIZE : 4294967296))"
cat >"$D/a.toml" <<EOT
$ENGINE
[peer]
listen = "127.0.0.1:$PORT"
name = "ipc-a"
key_file = "$KEY"
EOT
cat >"$D/b.toml" <<EOT
$ENGINE
[peer]
name = "ipc-b"
key_file = "$KEY"
EOT
"$BIN" mount --config "$D/a.toml" "$MA" 2>"$D/daemon-a.log" &
PA=$!
"$BIN" mount --config "$D/b.toml" "$MB" 2>"$D/daemon-b.log" &
PB=$!
cleanup() {
	kill "$PA" "$PB" 2>/dev/null || true
	wait "$PA" "$PB" 2>/dev/null || true
	umount -l "$MA" "$MB" 2>/dev/null || true
	rmdir "$MA" "$MB" 2>/dev/null || true
	echo "--- daemon A log (tail)"
	tail -30 "$D/daemon-a.log"
	echo "--- daemon B log (tail)"
	tail -30 "$D/daemon-b.log"
}
trap cleanup EXIT
for _ in $(seq 100); do [ -e "$MA/version" ] && [ -e "$MB/version" ] && break; sleep 0.1; done
cat "$MA/version"

step() { echo "+ $*"; }

# requests DIR: the submission doc moving SIZE bytes between gb and ra in
# requests of at most 1 GiB (max_transfer_bytes).
requests() {
	local op=$1 off=0 n sep="" out=""
	while [ "$off" -lt "$SIZE" ]; do
		n=$((SIZE - off))
		[ "$n" -gt "$GIB" ] && n=$GIB
		out="$out$sep{\"memory\":\"gb\",\"offset\":$off,\"target_offset\":$off,\"length\":$n}"
		sep=","
		off=$((off + n))
	done
	echo "{\"op\":\"$op\",\"target\":\"ra\",\"requests\":[$out]}"
}

# batch OP K: K submissions of the whole region in one batch; prints the
# seconds from the first submit to the end of wait, and checks that every
# submission was accepted and every task completed over cuda_ipc.
batch() {
	local op=$1 k=$2 n doc t0 t1 st refused=0 tasks
	doc=$(requests "$op")
	n=$(cat "$MB/ctl/batches/clone")
	t0=$EPOCHREALTIME # no fork inside the timed window
	for _ in $(seq "$k"); do echo "$doc" >"$MB/ctl/batches/$n/submit" || refused=$((refused + 1)); done
	echo seal >"$MB/ctl/batches/$n/ctl"
	st=$(cat "$MB/ctl/batches/$n/wait")
	t1=$EPOCHREALTIME
	if [ "$st" != completed ]; then
		echo "batch $n: $st" >&2
		cat "$MB/ctl/batches/$n/status" "$MB/ctl/batches/$n/error" >&2 2>/dev/null || true
		return 1
	fi
	if [ "$refused" -gt 0 ]; then
		echo "batch $n: $refused of $k submissions refused (see /error)" >&2
		return 1
	fi
	tasks=$(ls "$MB/ctl/batches/$n/tasks" | wc -l)
	if [ "$tasks" -ne $((k * ((SIZE + GIB - 1) / GIB))) ]; then
		echo "batch $n: $tasks tasks for $k submissions" >&2
		return 1
	fi
	for t in "$MB/ctl/batches/$n/tasks/"*; do
		grep -q "\"transport\": *\"$WANT\"" "$t" || { echo "task $t did not go over $WANT: $(cat "$t")" >&2; return 1; }
	done
	rmdir "$MB/ctl/batches/$n"
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f\n", b - a }'
}

step register: A exports cuda:0 region ga, B registers cuda:0 region gb
echo "{\"name\":\"ga\",\"location\":\"$LOC\",\"bytes\":$SIZE,\"export\":\"read_write\"}" >"$MA/memory/register"
echo "{\"name\":\"gb\",\"location\":\"$LOC\",\"bytes\":$SIZE}" >"$MB/memory/register"
cat "$MA/memory/ga/info"
echo

step B opens A\'s region as a peer segment: its descriptor carries the CUDA IPC handle
echo "{\"name\":\"ra\",\"uri\":\"tcp://127.0.0.1:$PORT/ga\",\"permission\":\"read_write\"}" >"$MB/segments/open"
cat "$MB/segments/ra/info"
echo
[ "$WANT" != cuda_ipc ] || grep -q cuda_ipc "$MB/segments/ra/info"

step WRITE B\'s bytes into A\'s region over cuda_ipc, check them through A\'s mount
head -c "$SIZE" /dev/urandom >"$D/pattern.bin"
dd if="$D/pattern.bin" of="$MB/memory/gb/data" bs=4M conv=notrunc status=none
batch write 1 >/dev/null || exit 1
cmp "$MA/memory/ga/data" "$D/pattern.bin"

step READ them back into B\'s zeroed region, check through B\'s mount
dd if=/dev/zero of="$MB/memory/gb/data" bs=4M count=$((SIZE / 4194304)) conv=notrunc status=none
cmp -s "$MB/memory/gb/data" "$D/pattern.bin" && { echo "zeroing gb failed"; exit 1; }
batch read 1 >/dev/null || exit 1
cmp "$MB/memory/gb/data" "$D/pattern.bin"
rm -f "$D/pattern.bin"
echo "bytes checked: $SIZE each way"

step throughput: $REPS submissions of $SIZE bytes each way, then torch in the same run
batch write 1 >/dev/null || exit 1 # warm: streams, lanes
w=$(batch write "$REPS") || exit 1
r=$(batch read "$REPS") || exit 1
t=$("$PY" "$HERE/ipc_torch.py" --bytes "$SIZE" --reps "$REPS")
echo "torch: $t"
ts=$(echo "$t" | sed -n 's/.*"seconds": *\([0-9.e-]*\).*/\1/p')
for dir in write read; do
	s=$w
	[ "$dir" = read ] && s=$r
	awk -v d="$dir" -v s="$s" -v ts="$ts" -v n="$SIZE" -v k="$REPS" 'BEGIN {
		b = n * k
		printf "{\"check\":\"cuda_ipc\",\"direction\":\"%s\",\"bytes\":%d,\"seconds\":%.6f,\"gbps\":%.1f,\"torch_seconds\":%.6f,\"torch_gbps\":%.1f,\"ratio\":%.3f}\n", d, b, s, b / s / 1e9, ts, b / ts / 1e9, ts / s
	}' | tee -a "${RESULTS:-/dev/null}"
done
jq -c .cuda_ipc "$MB/stats" 2>/dev/null || true
step close: the segment, then the regions
rmdir "$MB/segments/ra" "$MB/memory/gb" "$MA/memory/ga"
echo cuda ipc checks passed
