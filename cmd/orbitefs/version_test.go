package main

import (
	"runtime/debug"
	"testing"
)

func TestVersionOf(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	stamped := func(modified string) *debug.BuildInfo {
		return &debug.BuildInfo{Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}}
	}
	unstamped := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "-compiler", Value: "gc"}}}
	for _, c := range []struct {
		name       string
		info       *debug.BuildInfo
		ldRev      string
		ldModified string
		want       string
	}{
		{"go stamp, clean", stamped("false"), "", "", "1.2.3 commit 0123456789ab"},
		{"go stamp, dirty", stamped("true"), "", "", "1.2.3 commit 0123456789ab dirty"},
		{"go stamp wins over linker flags", stamped("false"), "fedcba9876543210", "true", "1.2.3 commit 0123456789ab"},
		{"linker flags, clean", unstamped, "fedcba9876543210", "false", "1.2.3 commit fedcba987654"},
		{"linker flags, dirty", unstamped, "fedcba9876543210", "true", "1.2.3 commit fedcba987654 dirty"},
		{"no build info", nil, "fedcba98", "true", "1.2.3 commit fedcba98 dirty"},
		{"neither", unstamped, "", "", "1.2.3 commit unknown (built without VCS information; `make build` stamps it)"},
	} {
		if got := versionOf("1.2.3", c.info, c.ldRev, c.ldModified); got != c.want {
			t.Errorf("%s: versionOf = %q, want %q", c.name, got, c.want)
		}
	}
}
