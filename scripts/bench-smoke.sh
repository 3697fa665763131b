#!/usr/bin/env bash
# bench-smoke.sh: one short run (200 ms; bench load: two passes of a
# 3 MiB file cut in three submissions) of each bench command, so that they keep
# working (speed is not checked); bench peer runs its notifications
# (its READ and WRITE need a daemon: bench/peer-compare.sh). Each run's JSON goes to a fresh
# temporary directory, is checked with jq and removed with it; the
# script prints one line per command. bench ctl mounts FUSE, so it runs
# only as root with /dev/fuse (else a line says it was skipped).
#
# Usage: bash scripts/bench-smoke.sh     (ORBITEFS_BIN overrides bin/orbitefs)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${ORBITEFS_BIN:-$root/bin/orbitefs}
d=$(mktemp -d /tmp/orbitefs-bench-smoke.XXXXXX)
trap 'rm -rf "$d"' EXIT

# run NAME JQ-CHECK JQ-SUMMARY ARGS...: run bench ARGS --json into
# $d/NAME.json, fail with its output unless JQ-CHECK holds.
run() {
	local name=$1 check=$2 summary=$3
	shift 3
	if ! TMPDIR=$d "$bin" bench "$@" --json >"$d/$name.json" 2>"$d/$name.err"; then
		echo "bench-smoke: orbitefs bench $* failed:" >&2
		cat "$d/$name.err" >&2
		exit 1
	fi
	if ! jq -e "$check" "$d/$name.json" >/dev/null; then
		echo "bench-smoke: orbitefs bench $*: its JSON does not satisfy $check:" >&2
		head -c 4000 "$d/$name.json" >&2
		exit 1
	fi
	echo "bench-smoke: bench $name: $(jq -r "$summary" "$d/$name.json")"
}

run file '.ops > 0 and .bytes == .ops * 4096' '"\(.ops) random 4 KiB reads"' \
	file --file "$d/file.bin" --create --size 8MiB --op read --pattern rand --bs 4KiB --qd 8 --runtime 200ms
head -c 3MiB /dev/urandom >"$d/load.bin"
run load '.verified == true and .bytes == 3145728 and .plan.submissions == 3' '"\(.bytes) bytes in \(.plan.submissions) submissions, verified"' \
	load --file "$d/load.bin" --request 1MiB --max-transfer-bytes 1MiB --max-inflight-bytes 2MiB --runs 2 --verify
run kvswap '.batches > 0 and .bytes > 0' '"\(.batches) batches by \(.clients) clients"' \
	kvswap --dir "$d/kv" --create --layers 2 --groups 8 --group-bytes 64KiB --batch 4 --clients 2 --write-pct 25 --runtime 200ms
# bench peer's notifications need no daemon: it runs the receiver itself.
head -c 32 /dev/urandom | base64 >"$d/peer.key"
chmod 600 "$d/peer.key"
printf '[peer]\nkey_file = "%s"\n' "$d/peer.key" >"$d/peer.toml"
run peer '.notify.delivered == 200 and .notify.received == 200 and .notify.duplicates == 0' '"\(.notify.delivered) notifications, each received once"' \
	peer --config "$d/peer.toml" --op notify --count 200 --concurrency 4
if [ -e /dev/fuse ] && [ "$(id -u)" = 0 ]; then
	run ctl '[.runs[] | .round_trips > 0] | length > 0 and all' '"\([.runs[].via] | unique | join(", ")): \([.runs[].round_trips] | add) round trips"' \
		ctl --clients 2 --runtime 200ms
else
	echo "bench-smoke: bench ctl skipped: it mounts FUSE and needs root and /dev/fuse"
fi
