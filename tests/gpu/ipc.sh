#!/usr/bin/env bash
# ipc.sh ORBITEFS DIR: CUDA IPC between two daemons on one GPU (gate.sh
# runs it on the GPU machine; it also runs alone). Daemon A exports a
# cuda:0 region ga; daemon B opens it as a peer segment over loopback
# (the descriptor carries the CUDA IPC handle: same host) and moves its
# own cuda:0 region gb into ga (WRITE) and back (READ).
#
# Both regions are SLOTS slots of SIZE bytes. Each direction is ROUNDS
# timed rounds; a round is one batch of REPS submissions of SIZE bytes,
# submission i moving slot i mod SLOTS (requests of at most 1 GiB), the
# way a user streams copies through a ring of buffers: a submission that
# reuses a slot waits for the one before it on that slot (the batch's
# fence), the others run beside it. A round is timed from before its
# first submit to the end of its wait, with nothing forked in between
# (bash builtins only: echo, read). Before a direction's rounds its
# destination is zeroed through its own mount; after them cmp through
# that mount must find the pattern: the bytes of the timed copies are
# checked. Every submission must be accepted and every task must have
# gone over cuda_ipc. ipc_torch.py then makes the same copies with torch
# in the same run (same slots and sizes, REPS copy_ calls a round on one
# stream, ROUNDS rounds, each direction), and one JSON line per direction
# gives both medians and their ratio.
#
# Environment: SIZE (bytes a submission and a copy, default 512 MiB, a
# multiple of 4 MiB), SLOTS (default 2: double buffering; the region,
# SIZE * SLOTS, is what the byte checks move through FUSE, so it sets
# the run time), REPS (default 16, at least SLOTS), ROUNDS (default
# 5), PY (the torch venv's python), RESULTS (a file the JSON lines are
# appended to); LOC=cpu WANT=tcp TORCH=0 rehearse the script's own
# steps on a machine without a GPU (host memory goes over TCP, no
# torch). Any failed step exits non-zero.
set -euo pipefail
BIN=$(realpath "$1")
D=$2
HERE=$(dirname "$(realpath "$0")")
SIZE=${SIZE:-536870912}
SLOTS=${SLOTS:-2}
REPS=${REPS:-16}
ROUNDS=${ROUNDS:-5}
TORCH=${TORCH:-1}
PY=${PY:-/opt/torch/.venv/bin/python3}
LOC=${LOC:-cuda:0}
WANT=${WANT:-cuda_ipc}
GIB=1073741824
REGION=$((SIZE * SLOTS))
bad() { echo "ipc.sh: $*" >&2; exit 2; }
[ "$SIZE" -gt 0 ] && [ $((SIZE % 4194304)) -eq 0 ] || bad "SIZE=$SIZE is not a positive multiple of 4 MiB"
[ "$SLOTS" -ge 1 ] || bad "SLOTS=$SLOTS is below 1"
[ "$REPS" -ge "$SLOTS" ] || bad "REPS=$REPS is below SLOTS=$SLOTS (a round must move every slot)"
[ "$ROUNDS" -ge 1 ] || bad "ROUNDS=$ROUNDS is below 1"
MA=$(mktemp -d /tmp/orbitefs-ipc-a.XXXXXX)
MB=$(mktemp -d /tmp/orbitefs-ipc-b.XXXXXX)
KEY=$D/ipc-peer.key
head -c 32 /dev/urandom | base64 >"$KEY"
chmod 600 "$KEY"
PORT=$((20000 + RANDOM % 20000))
# Every submission of a batch is charged against max_inflight_bytes
# from its submit to its end, even one waiting on its slot's fence: room
# for all REPS of them (else the later ones are refused with EAGAIN and
# move nothing).
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

step() { echo "+ [${SECONDS}s] $*"; }

# requests OP SLOT: the submission doc moving slot SLOT between gb and ra
# in requests of at most 1 GiB (max_transfer_bytes).
requests() {
	local op=$1 base=$(($2 * SIZE)) off=0 n sep="" out=""
	while [ "$off" -lt "$SIZE" ]; do
		n=$((SIZE - off))
		[ "$n" -gt "$GIB" ] && n=$GIB
		out="$out$sep{\"memory\":\"gb\",\"offset\":$((base + off)),\"target_offset\":$((base + off)),\"length\":$n}"
		sep=","
		off=$((off + n))
	done
	echo "{\"op\":\"$op\",\"target\":\"ra\",\"requests\":[$out]}"
}

# batch OP K: K submissions in one batch, submission i moving slot
# i mod SLOTS; prints the seconds from before the first submit to the end
# of wait (only builtins between the two clock reads), then checks that
# the batch completed, every submission was accepted, and every task
# completed over $WANT.
batch() {
	local op=$1 k=$2 n t0 t1 st="" refused=0 i tasks bad docs=()
	local c=$MB/ctl/batches
	for ((i = 0; i < SLOTS; i++)); do docs[i]=$(requests "$op" "$i"); done
	read -r n <"$c/clone"
	t0=$EPOCHREALTIME
	for ((i = 0; i < k; i++)); do echo "${docs[i % SLOTS]}" >"$c/$n/submit" || refused=$((refused + 1)); done
	echo seal >"$c/$n/ctl"
	read -r st <"$c/$n/wait" || true
	t1=$EPOCHREALTIME
	if [ "$st" != completed ]; then
		echo "batch $n: ${st:-wait failed}" >&2
		cat "$c/$n/status" "$c/$n/error" >&2 2>/dev/null || true
		return 1
	fi
	if [ "$refused" -gt 0 ]; then
		echo "batch $n: $refused of $k submissions refused (see /error)" >&2
		return 1
	fi
	tasks=$(ls "$c/$n/tasks" | wc -l)
	if [ "$tasks" -ne $((k * ((SIZE + GIB - 1) / GIB))) ]; then
		echo "batch $n: $tasks tasks for $k submissions" >&2
		return 1
	fi
	bad=$(cd "$c/$n/tasks" && grep -L "\"transport\": *\"$WANT\"" -- *) || true
	if [ -n "$bad" ]; then
		echo "batch $n: tasks not over $WANT: $bad; the first: $(cat "$c/$n/tasks/${bad%%$'\n'*}")" >&2
		return 1
	fi
	rmdir "$c/$n"
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f\n", b - a }'
}

# median: the median of the numbers on stdin.
median() {
	sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; if (NR % 2) print v[(NR + 1) / 2]; else printf "%.6f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# rounds OP: ROUNDS timed batches of REPS submissions; prints each
# round's seconds on one line.
rounds() {
	local op=$1 r s out=""
	for ((r = 0; r < ROUNDS; r++)); do
		s=$(batch "$op" "$REPS") || return 1
		out="$out $s"
	done
	echo $out
}

# zero FILE: zeroes a region's data file and checks it no longer holds
# the pattern.
zero() {
	dd if=/dev/zero of="$1" bs=4M count=$((REGION / 4194304)) conv=notrunc status=none
	if cmp -s "$1" "$D/pattern.bin"; then
		echo "zeroing $1 failed"
		return 1
	fi
}

step register: A exports cuda:0 region ga, B registers cuda:0 region gb
echo "{\"name\":\"ga\",\"location\":\"$LOC\",\"bytes\":$REGION,\"export\":\"read_write\"}" >"$MA/memory/register"
echo "{\"name\":\"gb\",\"location\":\"$LOC\",\"bytes\":$REGION}" >"$MB/memory/register"
cat "$MA/memory/ga/info"
echo

step B opens A\'s region as a peer segment: its descriptor carries the CUDA IPC handle
echo "{\"name\":\"ra\",\"uri\":\"tcp://127.0.0.1:$PORT/ga\",\"permission\":\"read_write\"}" >"$MB/segments/open"
cat "$MB/segments/ra/info"
echo
[ "$WANT" != cuda_ipc ] || grep -q cuda_ipc "$MB/segments/ra/info"

step fill B\'s region with random bytes, warm both directions \(mapping, streams, lanes\)
head -c "$REGION" /dev/urandom >"$D/pattern.bin"
dd if="$D/pattern.bin" of="$MB/memory/gb/data" bs=4M conv=notrunc status=none
batch write "$SLOTS" >/dev/null
batch read "$SLOTS" >/dev/null

step WRITE: $ROUNDS rounds of $REPS submissions of $SIZE bytes over $SLOTS slots, B -\> A over $WANT, bytes checked through A\'s mount
zero "$MA/memory/ga/data"
w=$(rounds write)
cmp "$MA/memory/ga/data" "$D/pattern.bin"
echo "write rounds (s): $w"

step READ: $ROUNDS rounds of $REPS submissions of $SIZE bytes over $SLOTS slots, A -\> B over $WANT, bytes checked through B\'s mount
zero "$MB/memory/gb/data"
r=$(rounds read)
cmp "$MB/memory/gb/data" "$D/pattern.bin"
rm -f "$D/pattern.bin"
echo "read rounds (s): $r"
echo "bytes checked: $REGION each way after the timed rounds"

ts_w="" ts_r=""
if [ "$TORCH" = 1 ]; then
	step torch: the same copies in the same run
	t=$("$PY" "$HERE/ipc_torch.py" --bytes "$SIZE" --slots "$SLOTS" --reps "$REPS" --rounds "$ROUNDS")
	echo "torch: $t"
	ts_w=$(echo "$t" | sed -n 's/.*"write": *{[^}]*"median_seconds": *\([0-9.e-]*\).*/\1/p')
	ts_r=$(echo "$t" | sed -n 's/.*"read": *{[^}]*"median_seconds": *\([0-9.e-]*\).*/\1/p')
	[ -n "$ts_w" ] && [ -n "$ts_r" ] || { echo "cannot read torch's medians"; exit 1; }
fi
for dir in write read; do
	s=$(echo $w | tr ' ' '\n' | median)
	ts=$ts_w
	if [ "$dir" = read ]; then
		s=$(echo $r | tr ' ' '\n' | median)
		ts=$ts_r
	fi
	awk -v d="$dir" -v s="$s" -v ts="${ts:-0}" -v n="$SIZE" -v k="$REPS" -v rr="$ROUNDS" -v sl="$SLOTS" -v want="$WANT" 'BEGIN {
		b = n * k
		printf "{\"check\":\"cuda_ipc\",\"transport\":\"%s\",\"direction\":\"%s\",\"size\":%d,\"slots\":%d,\"reps\":%d,\"rounds\":%d,\"bytes_per_round\":%d,\"median_seconds\":%.6f,\"gbps\":%.1f", want, d, n, sl, k, rr, b, s, b / s / 1e9
		if (ts > 0) printf ",\"torch_median_seconds\":%.6f,\"torch_gbps\":%.1f,\"ratio\":%.3f", ts, b / ts / 1e9, ts / s
		printf "}\n"
	}' | tee -a "${RESULTS:-/dev/null}"
done
jq -c .cuda_ipc "$MB/stats" 2>/dev/null || true
step close: the segment, then the regions
rmdir "$MB/segments/ra" "$MB/memory/gb" "$MA/memory/ga"
echo "cuda ipc checks passed (${SECONDS}s)"
