#!/usr/bin/env bash
# peergpu.sh ORBITEFS DIR [LOCATION]: GPU memory between two daemons over
# TCP on loopback (gate.sh runs it on the GPU machine). Daemon A exports
# a LOCATION region (default cuda:0) that peers reach through A's pinned
# copy staging; daemon B opens it as a tcp:// and an hp_tcp:// segment
# and moves bytes with the batch API between it and B's own memory (host
# memory, and a cuda:0 region of B's too, so both sides stage): WRITE from
# B, checked with cmp through A's data file; READ back into B, checked
# with cmp through B's. Every step is checked; any failure exits non-zero.
#
# A dry run on a machine without a GPU runs the same steps on host memory:
#   bash tests/gpu/peergpu.sh bin/orbitefs /tmp cpu
set -euo pipefail
BIN=$(realpath "$1")
D=$2
LOC=${3:-cuda:0}
W=$(mktemp -d "$D/orbitefs-peergpu.XXXXXX")
MA=$W/mnt-a
MB=$W/mnt-b
mkdir -p "$MA" "$MB"
head -c 32 /dev/urandom | base64 >"$W/peer.key"
chmod 600 "$W/peer.key"
cat >"$W/a.toml" <<EOF
[peer]
listen = "127.0.0.1:0"
name = "gpu-a"
key_file = "$W/peer.key"
EOF
cat >"$W/b.toml" <<EOF
[peer]
name = "gpu-b"
key_file = "$W/peer.key"
lanes = 4
EOF
"$BIN" mount --config "$W/a.toml" "$MA" 2>"$W/a.log" &
PA=$!
"$BIN" mount --config "$W/b.toml" "$MB" 2>"$W/b.log" &
PB=$!
cleanup() {
	kill "$PA" "$PB" 2>/dev/null || true
	wait "$PA" "$PB" 2>/dev/null || true
	umount -l "$MA" 2>/dev/null || true
	umount -l "$MB" 2>/dev/null || true
	echo "--- daemon A log"
	cat "$W/a.log"
	echo "--- daemon B log"
	cat "$W/b.log"
	# Never rm -r: a mount point that did not unmount would be walked.
	rm -f "$W"/*.bin "$W"/*.toml "$W"/*.log "$W"/task.json "$W"/peer.key
	rmdir "$MA" "$MB" "$W" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 100); do [ -e "$MA/version" ] && [ -e "$MB/version" ] && break; sleep 0.1; done
cat "$MA/version"
ADDR=$(sed -n 's/.*msg="peer listening".* addr=\([0-9.]*:[0-9]*\).*/\1/p' "$W/a.log" | head -1)
[ -n "$ADDR" ] || { echo "daemon A logged no peer address"; exit 1; }
echo "A listens on $ADDR"

step() { echo "+ $*"; }

run_batch() { # run_batch DOC: one group on B, sealed, waited; prints task 0
	local n st
	n=$(cat "$MB/ctl/batches/clone")
	echo "$1" >"$MB/ctl/batches/$n/submit"
	echo seal >"$MB/ctl/batches/$n/ctl"
	st=$(cat "$MB/ctl/batches/$n/wait")
	cat "$MB/ctl/batches/$n/tasks/0"
	echo
	if [ "$st" != completed ]; then
		echo "batch $n: $st"
		cat "$MB/ctl/batches/$n/status" "$MB/ctl/batches/$n/error" 2>/dev/null
		return 1
	fi
	rmdir "$MB/ctl/batches/$n"
}

N=$((64 << 20))
step "A exports a $LOC region; B registers host and $LOC memory and opens A's region"
echo '{"name":"kv","location":"'"$LOC"'","bytes":"64MiB","export":"read_write"}' >"$MA/memory/register"
cat "$MA/memory/kv/info"
echo
echo '{"name":"h","location":"cpu","bytes":"64MiB"}' >"$MB/memory/register"
echo '{"name":"g","location":"'"$LOC"'","bytes":"64MiB"}' >"$MB/memory/register"
echo '{"name":"r","uri":"tcp://'"$ADDR"'/kv","permission":"read_write"}' >"$MB/segments/open"
echo '{"name":"s","uri":"hp_tcp://'"$ADDR"'/kv","permission":"read_write"}' >"$MB/segments/open"
cat "$MB/segments/r/info"
echo

step "WRITE over tcp: B's host memory into A's $LOC region"
head -c $N /dev/urandom >"$W/one.bin"
cat "$W/one.bin" >"$MB/memory/h/data"
run_batch '{"op":"write","target":"r","requests":[{"memory":"h","offset":0,"target_offset":0,"length":'$N'}]}' | tee "$W/task.json"
grep -q '"remote_effect": "applied"' "$W/task.json"
cmp "$MA/memory/kv/data" "$W/one.bin"

step "READ over hp_tcp: A's $LOC region back into B's $LOC memory"
run_batch '{"op":"read","target":"s","requests":[{"memory":"g","offset":0,"target_offset":0,"length":'$N'}]}'
cmp "$MB/memory/g/data" "$W/one.bin"

step "WRITE over hp_tcp from B's $LOC memory, unaligned, into A's region"
head -c $N /dev/urandom >"$W/two.bin"
cat "$W/two.bin" >"$MB/memory/g/data"
run_batch '{"op":"write","target":"s","requests":[{"memory":"g","offset":3,"target_offset":5,"length":40000000}]}' | tee "$W/task.json"
grep -q '"remote_effect": "applied"' "$W/task.json"
cmp <(head -c 40000005 "$MA/memory/kv/data" | tail -c 40000000) <(head -c 40000003 "$W/two.bin" | tail -c 40000000)
cmp <(head -c 5 "$MA/memory/kv/data") <(head -c 5 "$W/one.bin")

step "READ over tcp: A's region into B's host memory"
head -c $N /dev/zero >"$MB/memory/h/data"
run_batch '{"op":"read","target":"r","requests":[{"memory":"h","offset":0,"target_offset":0,"length":'$N'}]}'
cmp "$MB/memory/h/data" "$MA/memory/kv/data"

step stats
grep -A7 '"copy_staging"' "$MA/stats" "$MB/stats" || echo "(no copy staging: host memory only)"
rmdir "$MB/segments/r" "$MB/segments/s" "$MB/memory/h" "$MB/memory/g" "$MA/memory/kv"
echo peer gpu checks passed
