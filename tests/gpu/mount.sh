#!/usr/bin/env bash
# mount.sh ORBITEFS DIR: the mount driven from the shell with GPU memory
# (gate.sh runs it on the GPU machine). A cuda:0 region is filled from an
# ext4 file through a submission, read back through its data file, changed
# through the data file and written to another file; a pinned region takes
# the host path; a tmpfs file goes to the GPU and back through its own
# pages (transport mapped), also after it is rewritten. Every step is
# checked; any failure exits non-zero.
set -euo pipefail
BIN=$(realpath "$1")
D=$2
M=$(mktemp -d /tmp/orbitefs-gate-mnt.XXXXXX)
F=$D/mount-src.bin
O=$D/mount-dst.bin
dd if=/dev/urandom of="$F" bs=1M count=64 status=none
dd if=/dev/zero of="$O" bs=1M count=64 status=none
"$BIN" mount "$M" 2>"$D/daemon.log" &
PID=$!
cleanup() {
	kill "$PID" 2>/dev/null || true
	wait "$PID" 2>/dev/null || true
	umount -l "$M" 2>/dev/null || true
	rmdir "$M" 2>/dev/null || true
	echo "--- daemon log"
	cat "$D/daemon.log"
}
trap cleanup EXIT
for _ in $(seq 100); do [ -e "$M/version" ] && break; sleep 0.1; done
cat "$M/version"

step() { echo "+ $*"; }

step register cuda:0 and pinned, open segments
echo '{"name":"g","location":"cuda:0","bytes":"64MiB"}' >"$M/memory/register"
echo '{"name":"p","location":"pinned","bytes":"64MiB"}' >"$M/memory/register"
cat "$M/memory/g/info"
echo
echo '{"name":"src","uri":"file://'"$F"'","permission":"read"}' >"$M/segments/open"
echo '{"name":"dst","uri":"file://'"$O"'","permission":"read_write"}' >"$M/segments/open"

run_batch() { # run_batch DOC: one group, sealed, waited; prints task 0
	local n
	n=$(cat "$M/ctl/batches/clone")
	echo "$1" >"$M/ctl/batches/$n/submit"
	echo seal >"$M/ctl/batches/$n/ctl"
	local st
	st=$(cat "$M/ctl/batches/$n/wait")
	cat "$M/ctl/batches/$n/tasks/0"
	echo
	if [ "$st" != completed ]; then
		echo "batch $n: $st"
		cat "$M/ctl/batches/$n/status" "$M/ctl/batches/$n/error" 2>/dev/null
		return 1
	fi
	rmdir "$M/ctl/batches/$n"
}

step file to GPU, unspec transport, then read back through the data file
run_batch '{"op":"read","target":"src","requests":[{"memory":"g","offset":0,"target_offset":0,"length":67108864}]}'
cmp "$M/memory/g/data" "$F"

step file to GPU through staging with an unaligned extent
run_batch '{"op":"read","target":"src","requests":[{"memory":"g","offset":3,"target_offset":5,"length":1000000,"transport":"io_uring"}]}'
cmp <(head -c 1000003 "$M/memory/g/data" | tail -c 1000000) <(head -c 1000005 "$F" | tail -c 1000000)

step change the GPU bytes through the data file, write them to a file
head -c 67108864 "$F" >"$M/memory/g/data"
dd if=/dev/urandom of="$M/memory/g/data" bs=4096 count=16 seek=100 conv=notrunc status=none
cat "$M/memory/g/data" >"$D/expect.bin"
run_batch '{"op":"write","target":"dst","requests":[{"memory":"g","offset":0,"target_offset":0,"length":67108864,"transport":"gds"}]}'
cmp "$O" "$D/expect.bin"

step vector of GPU ranges, pinned memory and padding
run_batch '{"op":"read","target":"src","requests":[{"target_offset":4096,"elements":[{"memory":"g","offset":0,"length":8192},{"padding":512},{"memory":"p","offset":0,"length":4096},{"memory":"g","offset":65536,"length":100}]}]}'
cmp <(head -c 8192 "$M/memory/g/data") <(head -c 12288 "$F" | tail -c 8192)
cmp <(head -c 4096 "$M/memory/p/data") <(head -c 16896 "$F" | tail -c 4096)

step a tmpfs file to GPU and back through its own pages: transport mapped
S=$(mktemp -d /dev/shm/orbitefs-gate-mnt.XXXXXX)
head -c 8388608 "$F" >"$S/kv.bin"
echo '{"name":"kv","uri":"file://'"$S/kv.bin"'","permission":"read_write"}' >"$M/segments/open"
run_batch '{"op":"read","target":"kv","requests":[{"memory":"g","offset":0,"target_offset":0,"length":8388608}]}' | tee "$D/task.json"
grep -q '"transport": *"mapped"' "$D/task.json"
cmp <(head -c 8388608 "$M/memory/g/data") "$S/kv.bin"
dd if=/dev/urandom of="$M/memory/g/data" bs=1M count=8 conv=notrunc status=none
head -c 8388608 "$M/memory/g/data" >"$D/expect-kv.bin"
run_batch '{"op":"write","target":"kv","requests":[{"memory":"g","offset":0,"target_offset":0,"length":8388608}]}' | tee "$D/task.json"
grep -q '"transport": *"mapped"' "$D/task.json"
cmp "$S/kv.bin" "$D/expect-kv.bin"
# Rewritten under the mapping: the next read moves the new bytes.
head -c 8388608 /dev/urandom >"$S/kv.bin"
run_batch '{"op":"read","target":"kv","requests":[{"memory":"g","offset":0,"target_offset":0,"length":8388608}]}' >/dev/null
cmp <(head -c 8388608 "$M/memory/g/data") "$S/kv.bin"
cat "$M/stats" | jq -c .mapped_files
rmdir "$M/segments/kv"
rm -rf "$S"

step device 9 does not exist: EOPNOTSUPP and a reason
if echo '{"name":"nine","location":"cuda:9","bytes":4096}' >"$M/memory/register" 2>"$D/err.txt"; then
	echo "cuda:9 registered"; exit 1
fi
grep -q "not supported" "$D/err.txt"
cat "$M/error"

step stats
cat "$M/stats" | jq -c '{staging, gds}'
cat "$M/metrics" | grep -E "staging|gds" | head -20 || true
rmdir "$M/memory/g" "$M/memory/p" "$M/segments/src" "$M/segments/dst"
echo mount checks passed
