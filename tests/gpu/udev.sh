#!/usr/bin/env bash
# udev.sh PATH...: write the udev database entries cuFile reads for the
# block device behind each PATH (and its parent disk when PATH lives on a
# partition), on machines that run without udev (the GPU gate machine).
#
# cuFile refuses cuFileHandleRegister when /run/udev/data/b<major>:<minor>
# is missing. This script is for the gate only: the engine never writes
# system files. Existing entries are left untouched. Needs root.
set -euo pipefail

if [ "$#" -eq 0 ]; then
	echo "usage: $0 PATH..." >&2
	exit 2
fi

write_entry() { # MAJ:MIN
	local f="/run/udev/data/b$1"
	if [ -e "$f" ]; then
		echo "udev.sh: $f exists, left alone"
		return
	fi
	mkdir -p /run/udev/data
	printf 'E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=ext4\n' >"$f"
	echo "udev.sh: wrote $f"
}

for path in "$@"; do
	if [ ! -e "$path" ]; then
		echo "udev.sh: $path does not exist" >&2
		exit 1
	fi
	dev=$(stat -c '%d' "$path")
	major=$(((dev >> 8) & 0xfff | ((dev >> 32) & ~0xfff)))
	minor=$(((dev & 0xff) | ((dev >> 12) & ~0xff)))
	if [ "$major" -eq 0 ]; then
		echo "udev.sh: $path is on a file system without a block device (major 0): nothing to write" >&2
		exit 1
	fi
	write_entry "$major:$minor"
	# A partition: its parent disk gets an entry too.
	if [ -e "/sys/dev/block/$major:$minor/partition" ]; then
		parent=$(basename "$(dirname "$(readlink -f "/sys/dev/block/$major:$minor")")")
		write_entry "$(cat "/sys/class/block/$parent/dev")"
	fi
	if command -v lsblk >/dev/null; then
		lsblk -ndo NAME,MAJ:MIN,TYPE "/dev/block/$major:$minor" 2>/dev/null || true
	fi
done
