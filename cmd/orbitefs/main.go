// Command orbitefs is the orbitefs daemon and tool: `mount` serves the
// control filesystem, `bench` drives the engine directly, `version`
// prints the version. Each subcommand lives in its own file; the tables
// below (topCommands, benchCommands in bench.go) are what dispatch and
// the help texts are made from, so that --help lists every command.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
)

// command is one command line entry point.
type command struct {
	name     string // "mount", or "bench file" for a bench subcommand
	synopsis string // its arguments, as usage shows them
	summary  string // one line
	run      func(args []string) int
}

// topCommands are orbitefs's commands. bench's subcommands are
// benchCommands.
func topCommands() []command {
	return []command{
		{"mount", mountSynopsis, "serve the control filesystem at MOUNTPOINT in the foreground", runMount},
		{"bench", "SUBCOMMAND [flags]", "measure the engine; subcommands below", benchMain},
		{"peer", "read|write|regions --addr HOST:PORT [flags]", "move bytes between a local file and a peer daemon's exported region (docs/peers.md)", runPeer},
		{"version", "", "print the release, the commit and \"dirty\" if built with uncommitted changes", runVersion},
		{"help", "", "print this text (also -h, --help)", nil},
	}
}

// usage writes the top-level help: every command and every bench
// subcommand with its synopsis.
func usage(w io.Writer) {
	fmt.Fprint(w, "usage: orbitefs COMMAND [flags]\n\ncommands:\n")
	for _, c := range topCommands() {
		if c.name == "bench" {
			for _, b := range benchCommands() {
				writeCommand(w, b)
			}
			continue
		}
		writeCommand(w, c)
	}
	fmt.Fprint(w, "\n`orbitefs mount -h`, `orbitefs bench SUBCOMMAND -h` and `orbitefs peer read -h`\n"+
		"print each command's flags; `orbitefs bench -h` lists the bench subcommands.\n"+
		"The mount's files are described in its /README once mounted (docs/mount.md\n"+
		"in the repository).\n")
}

// writeCommand writes one command's synopsis line and its summary.
func writeCommand(w io.Writer, c command) {
	fmt.Fprintf(w, "  %s\n      %s\n", strings.TrimSpace(c.name+" "+c.synopsis), c.summary)
}

func runVersion([]string) int {
	fmt.Printf("orbitefs %s\n", buildVersion())
	return 0
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "--help" || arg == "help" || arg == "-help"
}

// gcPercent is the collector's target unless GOGC says otherwise. The
// daemon's live heap is small (RSS 8-40 MiB, docs/performance-log.md) and every
// small transfer allocates a little, so the default 100 ran a collection
// every few thousand requests: 11 % of the CPU of 4 KiB tmpfs reads
// (scanObject), and 400 cut user CPU per request by about 30 %.
const gcPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	os.Exit(run(os.Args[1:]))
}

// run dispatches a command line (without the program name) and returns
// the exit status: help asked for goes to stdout with 0, a missing or
// unknown command to stderr with 2.
func run(args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return 2
	}
	if isHelp(args[0]) {
		usage(os.Stdout)
		return 0
	}
	for _, c := range topCommands() {
		if c.name == args[0] && c.run != nil {
			return c.run(args[1:])
		}
	}
	fmt.Fprintf(os.Stderr, "orbitefs: unknown command %q\n\n", args[0])
	usage(os.Stderr)
	return 2
}
