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
