#!/usr/bin/env bash
# buildflags.sh: the -X linker flags that stamp the git commit and a dirty
# flag into bin/orbitefs (`orbitefs version`, /version). Go stamps them
# itself in a plain git clone, but not in a git worktree or with
# -buildvcs=false; these flags cover those. Prints nothing outside git.
#
# Usage: go build -ldflags="-checklinkname=0 $(scripts/buildflags.sh)" ./cmd/orbitefs
cd "$(dirname "$0")/.." || exit 0
rev=$(git rev-parse HEAD 2>/dev/null) || exit 0
modified=false
if [ -n "$(git status --porcelain 2>/dev/null)" ]; then
	modified=true
fi
printf '%s\n' "-X main.vcsRevision=$rev -X main.vcsModified=$modified"
