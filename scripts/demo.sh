#!/usr/bin/env bash
# demo.sh: the README walkthrough, end to end, against a temporary mount.
#
# Starts bin/orbitefs in the background on a fresh mktemp -d mount point,
# waits for the mount, runs each walkthrough step and checks its output,
# then stops the daemon with SIGTERM and checks that it exits 0 and leaves
# no mount behind. Whatever happens, the trap unmounts: SIGTERM, then
# umount -l / fusermount3 -uz, then the fusectl abort file as a last
# resort. Exits non-zero on the first mismatch.
#
# Usage: bash scripts/demo.sh        (ORBITEFS_BIN overrides the binary)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${ORBITEFS_BIN:-$root/bin/orbitefs}
if [ ! -x "$bin" ]; then
	make -C "$root" build >/dev/null
fi

M=$(mktemp -d /tmp/orbitefs-demo-mnt.XXXXXX)
W=$(mktemp -d /tmp/orbitefs-demo-files.XXXXXX)
log=$W/daemon.log
pid=
conn=

say() { printf '%s\n' "$*"; }
fail() {
	say "FAIL $*"
	if [ -s "$log" ]; then
		say "--- daemon log"
		tail -n 30 "$log"
	fi
	exit 1
}

mounted() { grep -qs " $M fuse" /proc/mounts; }

cleanup() {
	local rc=$?
	set +e
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null
	fi
	if mounted; then
		umount -l "$M" 2>/dev/null || fusermount3 -uz "$M" 2>/dev/null || fusermount -uz "$M" 2>/dev/null
	fi
	if mounted && [ -n "$conn" ]; then
		if [ ! -d "/sys/fs/fuse/connections/$conn" ] && [ "$(id -u)" = 0 ]; then
			mount -t fusectl fusectl /sys/fs/fuse/connections 2>/dev/null
		fi
		echo 1 > "/sys/fs/fuse/connections/$conn/abort" 2>/dev/null
		umount -l "$M" 2>/dev/null
	fi
	if mounted; then
		say "WARNING: $M is still mounted"
		rc=1
	else
		rmdir "$M" 2>/dev/null
	fi
	rm -rf "$W"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# check DESCRIPTION WANT GOT
check() {
	if [ "$2" != "$3" ]; then
		fail "$1: got '$3', want '$2'"
	fi
	say "ok   $1 -> $3"
}

"$bin" mount "$M" 2>"$log" &
pid=$!
for _ in $(seq 100); do
	mounted && [ -e "$M/version" ] && break
	kill -0 "$pid" 2>/dev/null || fail "the daemon exited before mounting"
	sleep 0.1
done
mounted || fail "no mount at $M after 10s"
# The connection number (the mount's minor device) for the last-resort abort.
conn=$(awk -v m="$M" '$5 == m { split($3, d, ":"); print d[2] }' /proc/self/mountinfo | tail -n 1)
say "mounted $(cat "$M/version") at $M"

head -c 1M /dev/urandom >"$W/cache.bin"
echo '{"name":"buf","location":"cpu","bytes":"1MiB"}' >"$M/memory/register"
check "register buf" "buf" "$(ls "$M/memory" | grep -x buf)"
echo '{"name":"cache","uri":"file://'"$W"'/cache.bin","permission":"read_write"}' >"$M/segments/open"
check "open cache" "cache" "$(ls "$M/segments" | grep -x cache)"
N=$(cat "$M/ctl/batches/clone")
[[ $N =~ ^[0-9]+$ ]] || fail "clone returned '$N'"
say "ok   clone -> $N"
echo '{"op":"read","target":"cache","requests":[{"memory":"buf","offset":0,"target_offset":0,"length":1048576}]}' >"$M/ctl/batches/$N/submit"
echo seal >"$M/ctl/batches/$N/ctl"
check "wait" "completed" "$(timeout 30 cat "$M/ctl/batches/$N/wait")"
check "cmp data" "same" "$(cmp "$M/memory/buf/data" "$W/cache.bin" && echo same)"
if command -v jq >/dev/null; then
	got=$(jq .transferred_bytes <"$M/ctl/batches/$N/tasks/0")
else
	got=$(sed -n 's/.*"transferred_bytes": *\([0-9]*\).*/\1/p' "$M/ctl/batches/$N/tasks/0")
fi
check "tasks/0 transferred_bytes" "1048576" "$got"
rmdir "$M/ctl/batches/$N"
check "rmdir batch" "clone txn" "$(ls "$M/ctl/batches" | tr '\n' ' ' | sed 's/ $//')"

# Bad input: the write itself fails, the text is in the batch's error file.
N=$(cat "$M/ctl/batches/clone")
if echo '{"op":"read","target":"cache","requests":[{"memory":"buf","length":2097152}]}' >"$M/ctl/batches/$N/submit" 2>/dev/null; then
	fail "an out-of-range submission was accepted"
fi
check "bad submit error file" "out of range" "$(grep -o 'out of range' "$M/ctl/batches/$N/error")"
if cat "$M/ctl/batches/$N/wait" >/dev/null 2>&1; then
	fail "wait before seal succeeded"
fi
check "wait before seal" "not sealed" "$(grep -o 'not sealed' "$M/ctl/batches/$N/error")"
rmdir "$M/ctl/batches/$N" "$M/memory/buf" "$M/segments/cache"
check "rmdir memory and segment" "open register" "$(ls "$M/segments" "$M/memory" | grep -v '^$' | grep -v : | sort | tr '\n' ' ' | sed 's/ $//')"

kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=
check "daemon exit status after SIGTERM" "0" "$rc"
mounted && fail "mount still present after the daemon exited"
say "ok   no mount left at $M"
say "demo passed"
