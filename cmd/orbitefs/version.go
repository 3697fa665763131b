// version.go owns what `orbitefs version` and /version say: the release,
// the commit the binary was built from and whether the tree had
// uncommitted changes ("dirty"), so that a binary found on a machine can
// be traced to its source.
//
// The commit comes from Go's VCS stamp (debug.ReadBuildInfo's
// vcs.revision and vcs.modified, written by `go build` inside a git
// clone), or, where Go writes none (a git worktree, -buildvcs=false),
// from the linker flags scripts/buildflags.sh prints, which `make build`
// and the end-to-end tests pass. Without either the line says so.
package main

import "runtime/debug"

// release is the orbitefs release.
const release = "0.1.0"

// Set by the linker (-X main.vcsRevision=... -X main.vcsModified=true),
// see scripts/buildflags.sh; empty when not set.
var (
	vcsRevision string
	vcsModified string
)

// commitLen is how much of the revision is shown: enough for git to find
// it unambiguously.
const commitLen = 12

// buildVersion is the version line without its "orbitefs " prefix:
// "0.1.0 commit 0123456789ab", "... dirty" when the tree was modified, or
// "0.1.0 commit unknown (...)" when the build carries no commit.
func buildVersion() string {
	info, _ := debug.ReadBuildInfo()
	return versionOf(release, info, vcsRevision, vcsModified)
}

// versionOf composes the version from the build info's VCS stamp, else
// the linker-set revision and modified flag.
func versionOf(rel string, info *debug.BuildInfo, ldRevision, ldModified string) string {
	rev, modified := ldRevision, ldModified == "true"
	if info != nil {
		var stampRev, stampMod string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				stampRev = s.Value
			case "vcs.modified":
				stampMod = s.Value
			}
		}
		if stampRev != "" {
			rev, modified = stampRev, stampMod == "true"
		}
	}
	if rev == "" {
		return rel + " commit unknown (built without VCS information; `make build` stamps it)"
	}
	if len(rev) > commitLen {
		rev = rev[:commitLen]
	}
	v := rel + " commit " + rev
	if modified {
		v += " dirty"
	}
	return v
}
