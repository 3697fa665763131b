package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

func validOptions() Options {
	return Options{File: "/tmp/x", Op: engine.OpRead, Pattern: Rand, BlockSize: 4096,
		QueueDepth: 8, Size: 1 << 20, Runtime: time.Second, Direct: true}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Options)
		want []string // substrings; nil means valid
	}{
		{"valid", func(*Options) {}, nil},
		{"valid page cache odd bs", func(o *Options) { o.Direct = false; o.BlockSize = 1000; o.Size = 5000 }, nil},
		{"no file", func(o *Options) { o.File = "" }, []string{"--file is required"}},
		{"bad op", func(o *Options) { o.Op = 7 }, []string{"op 7: want read or write"}},
		{"bad pattern", func(o *Options) { o.Pattern = 9 }, []string{"pattern 9: want seq or rand"}},
		{"zero bs", func(o *Options) { o.BlockSize = 0 }, []string{"--bs (0) must be > 0"}},
		{"huge bs", func(o *Options) { o.BlockSize = 2 << 30; o.Size = 4 << 30 }, []string{"--bs (2GiB) must be <= 1GiB"}},
		{"direct unaligned bs", func(o *Options) { o.BlockSize = 6000 }, []string{"--bs (6000) must be a multiple of 4096 with --direct"}},
		{"qd zero", func(o *Options) { o.QueueDepth = 0 }, []string{"--qd (0) must be in [1, 4096]"}},
		{"qd too big", func(o *Options) { o.QueueDepth = 4097 }, []string{"--qd (4097) must be in [1, 4096]"}},
		{"buffers too big", func(o *Options) { o.BlockSize = 1 << 30; o.QueueDepth = 8; o.Size = 1 << 30 },
			[]string{"--qd (8) * --bs (1GiB) = 8GiB of buffers exceeds 4GiB"}},
		{"size below bs", func(o *Options) { o.Size = 4095 }, []string{"--size (4095B) must be >= --bs (4KiB)", "--size (4095) must be a multiple of 4096 with --direct"}},
		{"runtime", func(o *Options) { o.Runtime = 0 }, []string{"--runtime (0s) must be > 0"}},
		{"all at once", func(o *Options) { o.File = ""; o.QueueDepth = -1; o.Runtime = -time.Second },
			[]string{"--file is required", "--qd (-1)", "--runtime (-1s)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := validOptions()
			c.edit(&o)
			err := o.Validate()
			if c.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: nil, want %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestParseEnums(t *testing.T) {
	for _, c := range []struct {
		in      string
		f       func(string) (string, error)
		wantErr string
	}{
		{"read", func(s string) (string, error) { o, err := ParseOp(s); return o.String(), err }, ""},
		{"write", func(s string) (string, error) { o, err := ParseOp(s); return o.String(), err }, ""},
		{"rw", func(s string) (string, error) { o, err := ParseOp(s); return o.String(), err }, `--op "rw": want read or write`},
		{"seq", func(s string) (string, error) { p, err := ParsePattern(s); return p.String(), err }, ""},
		{"rand", func(s string) (string, error) { p, err := ParsePattern(s); return p.String(), err }, ""},
		{"random", func(s string) (string, error) { p, err := ParsePattern(s); return p.String(), err }, `--pattern "random": want seq or rand`},
		{"engine", func(s string) (string, error) { i, err := ParseImpl(s); return i.String(), err }, ""},
		{"pread", func(s string) (string, error) { i, err := ParseImpl(s); return i.String(), err }, ""},
		{"dd", func(s string) (string, error) { i, err := ParseImpl(s); return i.String(), err }, `--impl "dd": want engine or pread`},
	} {
		got, err := c.f(c.in)
		switch {
		case c.wantErr == "" && (err != nil || got != c.in):
			t.Errorf("parse %q = %q, %v; want it back", c.in, got, err)
		case c.wantErr != "" && (err == nil || err.Error() != c.wantErr):
			t.Errorf("parse %q: err %v, want %q", c.in, err, c.wantErr)
		}
	}
}

func TestEngineConfig(t *testing.T) {
	o := validOptions()
	o.QueueDepth = 1024
	o.BlockSize = 2 << 20
	o.Size = 8 << 20
	base := config.DefaultEngine()
	base.MaxRegisteredBytes = 2 << 30 // not machine-dependent
	if err := o.checkEngine(base); err == nil {
		t.Fatal("checkEngine accepted the default config for qd 1024 x 2MiB")
	}
	c := o.EngineConfig(base)
	if err := c.Validate(); err != nil {
		t.Fatalf("EngineConfig result does not validate: %v", err)
	}
	if err := o.checkEngine(c); err != nil {
		t.Fatalf("checkEngine(EngineConfig): %v", err)
	}
	// max_registered_bytes is never raised: it protects the machine.
	small := c
	small.MaxRegisteredBytes = 1 << 30
	if err := o.checkEngine(o.EngineConfig(small)); err == nil || !strings.Contains(err.Error(), "--qd * --bs (2GiB) exceeds engine max_registered_bytes (1GiB") {
		t.Errorf("checkEngine with max_registered_bytes 1GiB: %v", err)
	}
	if !c.IOUring.DirectIO || c.CallerFastPathWait != base.CallerFastPathWait || c.MaxBatchRequests < 4*o.QueueDepth {
		t.Errorf("EngineConfig = direct %v, fast path wait %s, capacity %d", c.IOUring.DirectIO, c.CallerFastPathWait, c.MaxBatchRequests)
	}
	o.Direct = false
	c = o.EngineConfig(base)
	if c.IOUring.DirectIO || c.CallerFastPathWait != base.CallerFastPathWait {
		t.Errorf("page cache + fast path: direct %v, wait %s", c.IOUring.DirectIO, c.CallerFastPathWait)
	}
	// Never lowers a limit.
	big := base
	big.IOUring.QueueDepth = 8192
	if got := o.EngineConfig(big).IOUring.QueueDepth; got != 8192 {
		t.Errorf("queue depth lowered to %d", got)
	}
}
