package main

import (
	"bytes"
	"flag"
	"strings"
	"testing"
)

// TestUsageListsEverything: the top-level help names every command,
// every bench subcommand and every mount flag; bench's help names every
// subcommand.
func TestUsageListsEverything(t *testing.T) {
	var top, bench bytes.Buffer
	usage(&top)
	benchHelp(&bench)
	for _, c := range topCommands() {
		if c.name != "bench" && !strings.Contains(top.String(), "\n  "+c.name) {
			t.Errorf("orbitefs --help does not list %q:\n%s", c.name, top.String())
		}
	}
	for _, c := range benchCommands() {
		line := "\n  " + c.name + " " + c.synopsis + "\n"
		if !strings.Contains(top.String(), line) {
			t.Errorf("orbitefs --help does not list %q", strings.TrimSpace(line))
		}
		if !strings.Contains(bench.String(), line) {
			t.Errorf("orbitefs bench --help does not list %q", strings.TrimSpace(line))
		}
	}
	mountFlags(&mountArgs{}).VisitAll(func(f *flag.Flag) {
		if !strings.Contains(top.String(), "[--"+f.Name+" ") && !strings.Contains(top.String(), "[--"+f.Name+"]") {
			t.Errorf("orbitefs --help does not show mount's --%s", f.Name)
		}
	})
}

// TestMountPointArgument: a mount command line without its MOUNTPOINT,
// with a flag after it (Go's flags stop at the first argument) or with
// a second argument says what is wrong, not only the usage.
func TestMountPointArgument(t *testing.T) {
	for _, c := range []struct {
		args      []string
		dir, want string
	}{
		{[]string{"/tmp/m"}, "/tmp/m", ""},
		{[]string{"--debug", "/tmp/m"}, "/tmp/m", ""},
		{nil, "", "no MOUNTPOINT given"},
		{[]string{"--debug"}, "", "no MOUNTPOINT given"},
		{[]string{"/tmp/m", "--debug"}, "", "--debug after MOUNTPOINT /tmp/m: flags go before it (orbitefs mount --debug /tmp/m)"},
		{[]string{"/tmp/m", "/tmp/n"}, "", "one MOUNTPOINT expected, got 2 arguments: /tmp/m /tmp/n"},
	} {
		fl := mountFlags(&mountArgs{})
		if err := fl.Parse(c.args); err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		dir, err := mountPoint(fl)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if dir != c.dir || got != c.want {
			t.Errorf("orbitefs mount %s: got %q, error %q; want %q, error %q", strings.Join(c.args, " "), dir, got, c.dir, c.want)
		}
	}
}
