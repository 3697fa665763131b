// Command orbitefs is the orbitefs daemon and tool: `mount` serves the
// control filesystem, `bench` drives the engine directly, `version`
// prints the version. Each subcommand lives in its own file.
package main

import (
	"fmt"
	"os"
	"runtime/debug"
)

var commands = map[string]func(args []string) int{}

func usage() {
	fmt.Fprint(os.Stderr, `usage: orbitefs <command> [flags]

commands:
  mount [--config FILE] MOUNTPOINT   serve the control filesystem (foreground)
  bench file [flags]                 drive the engine against a file (see bench file -h)
  version                            print the version
`)
}

// gcPercent is the collector's target unless GOGC says otherwise. The
// daemon's live heap is small (8-40 MiB, docs/performance.md) and every
// small transfer allocates a little, so the default 100 ran a collection
// every few thousand requests: 11 % of the CPU of 4 KiB tmpfs reads
// (scanObject), and 400 cut user CPU per request by about 30 %.
const gcPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	commands["version"] = func([]string) int { fmt.Printf("orbitefs %s\n", buildVersion()); return 0 }
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		if os.Args[1] != "-h" && os.Args[1] != "--help" && os.Args[1] != "help" {
			fmt.Fprintf(os.Stderr, "orbitefs: unknown command %q\n", os.Args[1])
		}
		usage()
		os.Exit(2)
	}
	os.Exit(cmd(os.Args[2:]))
}
