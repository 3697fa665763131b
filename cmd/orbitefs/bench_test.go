package main

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/bench"
	"github.com/orbitefs/orbitefs/engine"
)

func TestParseBenchArgs(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, make([]byte, 3<<20+100), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"--file", file}
	cases := []struct {
		name  string
		args  []string
		want  []string // error substrings; nil: valid
		check func(*testing.T, benchArgs)
	}{
		{name: "defaults", args: base, check: func(t *testing.T, a benchArgs) {
			o := a.opts
			if o.Op != engine.OpRead || o.Pattern != bench.Seq || o.BlockSize != 4096 || o.QueueDepth != 1 ||
				o.Runtime != 10*time.Second || o.Direct || a.impl != bench.ImplEngine || a.json || a.create {
				t.Errorf("defaults: %+v", a)
			}
			if o.Size != 3<<20 { // the whole file, in whole blocks
				t.Errorf("size %d, want the file rounded down to 4KiB", o.Size)
			}
		}},
		{name: "smoke", args: append(base, "--op", "read", "--pattern", "rand", "--bs", "4KiB", "--qd", "8", "--size", "8MiB", "--runtime", "200ms", "--json"),
			check: func(t *testing.T, a benchArgs) {
				if a.opts.Pattern != bench.Rand || a.opts.QueueDepth != 8 || a.opts.Size != 8<<20 || a.opts.Runtime != 200*time.Millisecond || !a.json {
					t.Errorf("parsed %+v", a)
				}
			}},
		{name: "all flags", args: append(base, "--op", "write", "--bs", "1MiB", "--qd", "32", "--size", "1GiB", "--direct", "--impl", "pread", "--seed", "5", "--create", "--cpuprofile", "x.prof", "--mutexprofile", "m.prof"),
			check: func(t *testing.T, a benchArgs) {
				if a.opts.Op != engine.OpWrite || !a.opts.Direct || a.impl != bench.ImplPread || a.opts.Seed != 5 || !a.create || a.cpuprofile != "x.prof" || a.mutexprofile != "m.prof" {
					t.Errorf("parsed %+v", a)
				}
			}},
		{name: "no file", args: nil, want: []string{"--file is required"}},
		{name: "missing file", args: []string{"--file", filepath.Join(dir, "absent"), "--size", "8MiB"},
			want: []string{"--file " + filepath.Join(dir, "absent") + ": no such file (--create --size N makes one"}},
		{name: "missing file with --create", args: []string{"--file", filepath.Join(dir, "absent"), "--create", "--size", "8MiB"},
			check: func(t *testing.T, a benchArgs) {
				if !a.create || a.opts.Size != 8<<20 {
					t.Errorf("parsed %+v", a)
				}
			}},
		{name: "bad op", args: append(base, "--op", "append"), want: []string{`--op "append": want read or write`}},
		{name: "bad pattern", args: append(base, "--pattern", "zipf"), want: []string{`--pattern "zipf": want seq or rand`}},
		{name: "bad impl", args: append(base, "--impl", "dd"), want: []string{`--impl "dd": want engine or pread`}},
		{name: "bad bs", args: append(base, "--bs", "4KB/s"), want: []string{`--bs: size "4KB/s"`}},
		{name: "bad size", args: append(base, "--size", "-1"), want: []string{`--size: size "-1"`}},
		{name: "lowercase bs", args: append(base, "--bs", "4k"), want: []string{`--bs: size "4k"`}},
		{name: "spaced size", args: append(base, "--size", "1 GiB"), want: []string{`--size: size "1 GiB"`}},
		{name: "direct bs", args: append(base, "--direct", "--bs", "1000", "--size", "8000"), want: []string{"--bs (1000) must be a multiple of 4096 with --direct"}},
		{name: "qd zero", args: append(base, "--qd", "0"), want: []string{"--qd (0) must be in [1, 4096]"}},
		{name: "qd big", args: append(base, "--qd", "5000"), want: []string{"--qd (5000) must be in [1, 4096]"}},
		{name: "size below bs", args: append(base, "--bs", "1MiB", "--size", "4KiB"), want: []string{"--size (4KiB) must be >= --bs (1MiB)"}},
		{name: "runtime", args: append(base, "--runtime", "0s"), want: []string{"--runtime (0s) must be > 0"}},
		{name: "create without size", args: append(base, "--create"), want: []string{"--create needs --size"}},
		{name: "stray argument", args: append(base, "extra"), want: []string{`unexpected argument "extra"`}},
		{name: "several", args: []string{"--op", "x", "--pattern", "y"}, want: []string{`--op "x"`, `--pattern "y"`}},
		{name: "unknown flag", args: append(base, "--iodepth", "3"), want: []string{"flag provided but not defined: -iodepth"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := parseBenchArgs(c.args, io.Discard)
			if c.want == nil {
				if err != nil {
					t.Fatalf("parse: %v", err)
				}
				c.check(t, a)
				return
			}
			if err == nil {
				t.Fatalf("parse %q: nil error, want %q", c.args, c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("parse: %q does not contain %q", err, w)
				}
			}
		})
	}
	if _, err := parseBenchArgs([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// TestBenchJSON runs the CI smoke workload through the command's code
// path and checks the JSON keys the issue promises.
func TestBenchJSON(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	prof := filepath.Join(dir, "cpu.prof")
	mprof := filepath.Join(dir, "mutex.prof")
	a, err := parseBenchArgs([]string{"--file", file, "--create", "--op", "read", "--pattern", "rand", "--bs", "4KiB",
		"--qd", "8", "--size", "1MiB", "--runtime", "100ms", "--json", "--cpuprofile", prof, "--mutexprofile", mprof}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	res, err := runBench(a)
	if err != nil {
		if strings.Contains(err.Error(), "unavailable") {
			t.Skipf("io_uring: %v", err)
		}
		t.Fatal(err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"bytes_per_sec", "iops", "p50_us", "p99_us"} {
		if v, ok := m[k].(float64); !ok || v <= 0 {
			t.Errorf("%s = %v in %s", k, m[k], b)
		}
	}
	if st, err := os.Stat(prof); err != nil || st.Size() == 0 {
		t.Errorf("cpu profile: %v", err)
	}
	if st, err := os.Stat(mprof); err != nil || st.Size() == 0 {
		t.Errorf("mutex profile: %v", err)
	}
}
