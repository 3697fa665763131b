#!/usr/bin/env bash
# table.sh ORBITEFS EXT4DIR TMPFSDIR OUT.jsonl: the side-by-side table of
# the GPU targets (docs/qualification.md) in one run on the GPU machine:
# a 4 GiB file moved into GPU memory by every orbitefs path and by what a user would otherwise run
# (peers.py), cold on ext4 and from tmpfs, plus the disk's own parallel
# O_DIRECT rate and the engine's DRAM -> file write rate. One JSON object
# per line in OUT.jsonl; the gate passes if every run completed and
# verified (speed is recorded, not asserted).
set -euo pipefail
BIN=$(realpath "$1")
G=$2
S=$3
OUT=$4
PY=/opt/torch/.venv/bin/python3
HERE=$(dirname "$(realpath "$0")")
: >"$OUT"
emit() { # emit LABEL: tag stdin's JSON lines
	while read -r l; do echo "{\"label\":\"$1\",\"result\":$l}" | tee -a "$OUT"; done
}
dd if=/dev/urandom of="$G/w.bin" bs=4M count=1024 status=none
dd if=/dev/zero of="$G/o.bin" bs=4M count=1024 status=none
cp "$G/w.bin" "$S/w.bin"
sync
load() { # load LABEL ARGS...
	local l=$1
	shift
	"$BIN" bench load --json "$@" | emit "$l"
}

# The disk's own rate: 32 parallel 4 MiB O_DIRECT preads (no engine).
"$BIN" bench file --impl pread --direct --file "$G/w.bin" --op read --pattern seq --bs 4MiB --qd 32 --runtime 5s --json | emit disk-pread-odirect-qd32

# ext4, cold, file -> GPU.
load ext4-cold-staged --file "$G/w.bin" --mem cuda:0 --transport io_uring --cold --runs 3 --verify
load ext4-cold-staged-chunks128 --file "$G/w.bin" --mem cuda:0 --transport io_uring --cold --runs 3 --chunks 128
load ext4-cold-gds --file "$G/w.bin" --mem cuda:0 --transport gds --cold --runs 3 --verify
load ext4-cold-unspec --file "$G/w.bin" --mem cuda:0 --cold --runs 3
load ext4-cold-dram --file "$G/w.bin" --mem cpu --cold --runs 3
load ext4-cold-pinned --file "$G/w.bin" --mem pinned --cold --runs 3
sync
echo 3 >/proc/sys/vm/drop_caches
"$PY" "$HERE/peers.py" "$G/w.bin" --cold --runs 3 | emit ext4-cold-peer

# tmpfs, file -> GPU.
load tmpfs-staged --file "$S/w.bin" --mem cuda:0 --transport io_uring --runs 3 --verify
for l in 4 8 16; do
	load "tmpfs-staged-lanes$l" --file "$S/w.bin" --mem cuda:0 --transport io_uring --runs 3 --lanes "$l"
done
load tmpfs-staged-lanes16-chunks128 --file "$S/w.bin" --mem cuda:0 --transport io_uring --runs 3 --lanes 16 --chunks 128
load tmpfs-dram --file "$S/w.bin" --mem cpu --runs 3
"$PY" "$HERE/peers.py" "$S/w.bin" --runs 3 --peers naive,pinned | emit tmpfs-peer

# GPU -> file against DRAM -> file (the engine's own write rate).
load ext4-write-dram --file "$G/o.bin" --op write --mem cpu --runs 3 --verify
load ext4-write-staged --file "$G/o.bin" --op write --mem cuda:0 --transport io_uring --runs 3 --verify
load ext4-write-staged-chunks128 --file "$G/o.bin" --op write --mem cuda:0 --transport io_uring --runs 3 --chunks 128
load ext4-write-staged-chunk16m --file "$G/o.bin" --op write --mem cuda:0 --transport io_uring --runs 3 --chunks 64 --chunk 16MiB
load ext4-write-gds --file "$G/o.bin" --op write --mem cuda:0 --transport gds --runs 3 --verify
load tmpfs-write-staged --file "$S/w.bin" --op write --mem cuda:0 --transport io_uring --runs 3 --verify
rm -f "$G/w.bin" "$G/o.bin" "$S/w.bin"
echo table done
