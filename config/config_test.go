package config

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	cases := []struct {
		in   string
		want Size
		bad  bool
	}{
		{"0", 0, false}, {"4096", 4096, false}, {"10B", 10, false}, {"0B", 0, false},
		{"64KiB", 64 << 10, false}, {"1MiB", 1 << 20, false}, {"3GiB", 3 << 30, false}, {"1TiB", 1 << 40, false},
		{"4KB", 4 << 10, false}, {"2MB", 2 << 20, false}, {"2GB", 2 << 30, false}, {"1TB", 1 << 40, false},
		{"16777215TiB", 16777215 << 40, false},
		// Refused instead of guessed: lowercase, one-letter, spaced,
		// signed, fractional, unknown or empty.
		{"1m", 0, true}, {"4k", 0, true}, {"1kb", 0, true}, {"1tib", 0, true}, {"1Mib", 0, true},
		{"1 MiB", 0, true}, {" 1MiB", 0, true}, {"1MiB ", 0, true}, {"1\tMiB", 0, true},
		{"", 0, true}, {"-1", 0, true}, {"+1", 0, true}, {"1.5MiB", 0, true}, {"12XB", 0, true},
		{"MiB", 0, true}, {"B", 0, true}, {"1MiBB", 0, true}, {"0x10", 0, true}, {"1e3", 0, true},
		{"99999999999TiB", 0, true}, {"18446744073709551616", 0, true},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseSize(c.in)
			if (err != nil) != c.bad || (!c.bad && got != c.want) {
				t.Fatalf("ParseSize(%q) = %d, %v; want %d bad=%v", c.in, got, err, c.want, c.bad)
			}
			if c.bad && !strings.Contains(err.Error(), fmt.Sprintf("size %q", c.in)) {
				t.Errorf("error %q does not name the value", err)
			}
		})
	}
	for _, s := range []Size{0, 1, 1024, 1 << 20, 3 << 30, 4097} {
		if back, err := ParseSize(s.String()); err != nil || back != s {
			t.Errorf("round trip %d -> %q -> %d %v", s, s.String(), back, err)
		}
	}
}

func TestJSONValues(t *testing.T) {
	var v struct {
		A, B Size
		C, D Duration
	}
	if err := json.Unmarshal([]byte(`{"A":1048576,"B":"64MiB","C":"250ms","D":1000}`), &v); err != nil {
		t.Fatal(err)
	}
	if v.A != 1<<20 || v.B != 64<<20 || v.C.D() != 250*time.Millisecond || v.D.D() != time.Microsecond {
		t.Fatalf("%+v", v)
	}
	for _, bad := range []string{`{"A":-1}`, `{"A":1.5}`, `{"A":true}`, `{"C":"-1s"}`, `{"C":"soon"}`,
		`{"B":"1m"}`, `{"B":"1 MiB"}`, `{"B":"1kb"}`, `{"B":"4k"}`, `{"C":" 5s"}`} {
		if err := json.Unmarshal([]byte(bad), &v); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestDefaultsValidate(t *testing.T) {
	e := DefaultEngine()
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	d, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	// The embedded file and DefaultEngine must agree on every key.
	got, _ := json.Marshal(d.Engine)
	want, _ := json.Marshal(DefaultEngine())
	if string(got) != string(want) {
		t.Fatalf("default.toml and DefaultEngine differ:\n%s\n%s", got, want)
	}
	// The default roots are named: none depends on the working directory.
	if got := strings.Join(d.Mount.AllowedRoots, " "); got != "/tmp /dev/shm" || strings.Join(d.Engine.AllowedRoots, " ") != got {
		t.Fatalf("default roots %v, engine %v; want [/tmp /dev/shm]", d.Mount.AllowedRoots, d.Engine.AllowedRoots)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	cases := []struct {
		name string
		mut  func(*Engine)
		want []string
	}{
		{"segments", func(e *Engine) { e.MaxFileSegments = 4097 }, []string{"engine.max_file_segments (4097) must be in [1, 4096]"}},
		{"zero segments", func(e *Engine) { e.MaxFileSegments = 0 }, []string{"max_file_segments (0)"}},
		{"vector", func(e *Engine) { e.MaxVectorElements = 1025 }, []string{"max_vector_elements (1025) must be in [1, 1024]"}},
		{"transfer", func(e *Engine) { e.MaxTransferBytes = 0 }, []string{"max_transfer_bytes (0)"}},
		{"grace", func(e *Engine) { e.QuiesceGrace = 0 }, []string{"quiesce_grace (0s) must be > 0"}},
		{"two at once", func(e *Engine) { e.MaxBatchRequests = 0; e.IOUring.QueueDepth = 0 },
			[]string{"max_batch_requests (0)", "io_uring.queue_depth (0)"}},
		{"staging", func(e *Engine) { e.IOUring.PinnedStaging = true; e.IOUring.StagingSlots = 1000 }, []string{"exceeds 1GiB"}},
		{"dispatch", func(e *Engine) { e.RuntimeQueue.MaxDispatchOwners = 2000 }, []string{"runtime_queue.max_dispatch_owners (2000)"}},
		{"credits", func(e *Engine) { e.MaxReceiverCreditSessions = 5000 }, []string{"max_receiver_credit_sessions (5000) must be in [0, 4096]"}},
		{"pending notifications", func(e *Engine) { e.MaxPendingNotifications = 0 }, []string{"max_pending_notifications (0) must be in [1, 1048576]"}},
		{"pending notification bytes", func(e *Engine) { e.MaxPendingNotifyBytes = 0 }, []string{"max_pending_notification_bytes (0B) must be in [1B, 1GiB]"}},
		{"host copy min", func(e *Engine) { e.HostCopyMinBytes = 4<<20 + 1 }, []string{"host_copy_min_bytes (4194305B) must be <= 4MiB (the host copy unit); 0 turns it off"}},
		{"mlu NaN", func(e *Engine) { e.RuntimeQueue.MLULocalThreshold = math.NaN() }, []string{"runtime_queue.mlu_local_threshold (NaN) must be a finite number >= 0"}},
		{"mlu +Inf", func(e *Engine) { e.RuntimeQueue.MLULocalThreshold = math.Inf(1) }, []string{"runtime_queue.mlu_local_threshold (+Inf) must be a finite number >= 0"}},
		{"mlu -Inf", func(e *Engine) { e.RuntimeQueue.MLULocalThreshold = math.Inf(-1) }, []string{"runtime_queue.mlu_local_threshold (-Inf) must be a finite number >= 0"}},
		{"registered", func(e *Engine) { e.MaxRegisteredBytes = 1 << 62 }, []string{"max_registered_bytes (4194304TiB) must be <= this machine's MemTotal"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := DefaultEngine()
			c.mut(&e)
			err := e.Validate()
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "c.toml")
		os.WriteFile(p, []byte(s), 0o644)
		return p
	}
	root := t.TempDir()
	d, err := Load(write("[engine]\nmax_file_segments = 7\n[engine.io_uring]\nqueue_depth = 64\n[mount]\nallowed_roots = [\"" + root + "\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Engine.MaxFileSegments != 7 || d.Engine.IOUring.QueueDepth != 64 || d.Engine.MaxBatchRequests != 4096 {
		t.Fatalf("override not applied over defaults: %+v", d.Engine)
	}
	if len(d.Mount.AllowedRoots) != 1 || d.Mount.AllowedRoots[0] != root {
		t.Fatalf("roots %v", d.Mount.AllowedRoots)
	}
	for _, c := range []struct{ text, want string }{
		{"[engine]\nmax_file_segment = 7\n", "engine.max_file_segment: unknown key"},
		{"[engine]\nmax_file_segments = 0\n", "max_file_segments (0)"},
		{"[mount]\nlog_level = \"loud\"\n", "mount.log_level"},
		{"[mount]\nclose_timeout = \"forever\"\n", "close_timeout"},
		{"[engine\n", "c.toml"},
		{"[engine]\ndefault_timeout = 5\n", "engine.default_timeout (line 2): duration 5: want a duration like 5s"},
		{"[engine]\nmax_inflight_bytes = \"4 GiB\"\n", `engine.max_inflight_bytes (line 2): size "4 GiB"`},
		{"[engine]\nmax_inflight_bytes = \"4g\"\n", `size "4g"`},
		{"engine = 5\n", "engine: want a table [engine]"},
	} {
		if _, err := Load(write(c.text)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to mention %q", c.text, err, c.want)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing.toml")); err == nil {
		t.Error("missing file accepted")
	}
}

// TestLoadSubTableOnly: a file may name only a sub-table, as the headings
// of docs/config.md do ([engine.runtime_queue] with no [engine]); TOML
// defines the parent table implicitly. A parent that is not a table is
// still refused.
func TestLoadSubTableOnly(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.toml")
	for _, c := range []struct {
		text  string
		check func(*Daemon) bool
		err   string
	}{
		{text: "[engine.runtime_queue]\nenabled = true\nmax_dispatch_owners = 8\n",
			check: func(d *Daemon) bool {
				return d.Engine.RuntimeQueue.Enabled && d.Engine.RuntimeQueue.MaxDispatchOwners == 8 && d.Engine.MaxBatchRequests == 4096
			}},
		{text: "[engine.io_uring]\nqueue_depth = 64\n[mount]\nlog_level = \"debug\"\n",
			check: func(d *Daemon) bool { return d.Engine.IOUring.QueueDepth == 64 && d.Mount.LogLevel == "debug" }},
		{text: "engine.runtime_queue.enabled = true\n",
			check: func(d *Daemon) bool { return d.Engine.RuntimeQueue.Enabled }},
		{text: "engine = { max_file_segments = 7 }\n",
			check: func(d *Daemon) bool { return d.Engine.MaxFileSegments == 7 }},
		{text: "[[engine]]\nmax_file_segments = 7\n", err: "engine: want a table [engine]"},
		{text: "[engine]\nruntime_queue = 1\n", err: "engine.runtime_queue: want a table [engine.runtime_queue]"},
	} {
		if err := os.WriteFile(p, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := Load(p)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want it to mention %q", c.text, err, c.err)
			}
		case err != nil:
			t.Errorf("%q: %v", c.text, err)
		case !c.check(d):
			t.Errorf("%q: not applied: %+v", c.text, d)
		}
	}
}

// TestLoadReportsEveryProblem: unknown keys, values that do not decode and
// values out of bounds come back together in one error, each named.
func TestLoadReportsEveryProblem(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.toml")
	text := `[mount]
log_level = "loud"
colour = "blue"
[engine]
max_file_segment = 7
max_file_segments = 0
default_timeout = 5
max_inflight_bytes = "1 MiB"
max_batch_requests = "many"
[engine.io_uring]
queue_depth = 0
sq_poll = true
`
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		"mount.colour: unknown key",
		"engine.max_file_segment: unknown key",
		"engine.io_uring.sq_poll: unknown key",
		"engine.default_timeout (line 7): duration 5: want a duration like 5s",
		`engine.max_inflight_bytes (line 8): size "1 MiB"`,
		"engine.max_batch_requests (line 9): ",
		"mount.log_level: level \"loud\"",
		"engine.max_file_segments (0) must be in [1, 4096]",
		"engine.io_uring.queue_depth (0) must be in [1, 32768]",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 9 {
		t.Errorf("%d problems reported, want 9:\n%v", n, err)
	}
}

func TestRegisteredLimit(t *testing.T) {
	for _, c := range []struct{ mem, want uint64 }{
		{0, AutoRegisteredFallback}, {24 << 30, 12 << 30}, {1 << 30, 512 << 20}, {4 << 40, AutoRegisteredCap},
	} {
		if got := AutoRegistered(c.mem); got != c.want {
			t.Errorf("AutoRegistered(%d) = %d, want %d", c.mem, got, c.want)
		}
	}
	mt, err := MemTotal()
	if err != nil {
		t.Skipf("no /proc/meminfo: %v", err)
	}
	e := DefaultEngine()
	if got := e.RegisteredLimit(); got != AutoRegistered(mt) || got == 0 {
		t.Errorf("default limit %d, want half of MemTotal %d", got, mt)
	}
	e.MaxRegisteredBytes = 8 << 20
	if got := e.RegisteredLimit(); got != 8<<20 {
		t.Errorf("explicit limit %d", got)
	}
}

func TestMaxBufferedDocumentBytes(t *testing.T) {
	for _, c := range []struct {
		text, want string
	}{
		{"max_buffered_document_bytes = \"512KiB\"", "mount.max_buffered_document_bytes (524288) must be in [mount.max_document_bytes (1048576), 64GiB]"},
		{"max_buffered_document_bytes = \"65GiB\"", "mount.max_buffered_document_bytes (69793218560) must be in"},
		{"max_buffered_document_bytes = \"1MiB\"", ""},
		{"max_buffered_document_bytes_per_user = \"512KiB\"", "mount.max_buffered_document_bytes_per_user (524288) must be in [mount.max_document_bytes (1048576), 64GiB]: one user's unfinished document of the largest size must fit"},
		{"max_buffered_document_bytes_per_user = \"65GiB\"", "mount.max_buffered_document_bytes_per_user (69793218560) must be in"},
		{"max_buffered_document_bytes = \"1MiB\"\nmax_buffered_document_bytes_per_user = \"1MiB\"", ""},
	} {
		p := filepath.Join(t.TempDir(), "c.toml")
		if err := os.WriteFile(p, []byte("[mount]\n"+c.text+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := Load(p)
		if c.want == "" {
			if err != nil || d.Mount.MaxBufferedDocumentBytes != 1<<20 {
				t.Errorf("%s: %v", c.text, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.text, err, c.want)
		}
	}
}

func TestMaxUserShare(t *testing.T) {
	for _, c := range []struct {
		text string
		want float64
		err  string
	}{
		{"", 0.5, ""},
		{"max_user_share = 0.25", 0.25, ""},
		{"max_user_share = 1.0", 1, ""},
		{"max_user_share = 0.0", 0, "mount.max_user_share (0) must be a number in (0, 1]"},
		{"max_user_share = 1.5", 0, "mount.max_user_share (1.5) must be a number in (0, 1]"},
		{"max_user_share = -0.5", 0, "mount.max_user_share (-0.5) must be"},
		{"max_user_share = nan", 0, "mount.max_user_share (NaN) must be"},
		{"max_user_share = inf", 0, "mount.max_user_share (+Inf) must be"},
	} {
		p := filepath.Join(t.TempDir(), "c.toml")
		if err := os.WriteFile(p, []byte("[mount]\n"+c.text+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := Load(p)
		if c.err == "" {
			if err != nil || d.Mount.MaxUserShare != c.want {
				t.Errorf("%q: %v, share %v; want %v", c.text, err, d.Mount.MaxUserShare, c.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%q: error %v, want %q", c.text, err, c.err)
		}
	}
}

// TestQoSFileErrorQuotesNothing: a qos_file that is not JSON is refused
// without echoing its bytes (it may be a secret named by mistake).
func TestQoSFileErrorQuotesNothing(t *testing.T) {
	dir := t.TempDir()
	for _, content := range []string{"root:SECRETHASH:19000:0:99999:7:::\n", "  \n\tSECRET{}", "[\"SECRET\"]"} {
		p := filepath.Join(dir, "qos.json")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := ParseQoSFile(p)
		if err == nil || !strings.Contains(err.Error(), "want a JSON object") || !strings.Contains(err.Error(), p) {
			t.Fatalf("%q: %v", content, err)
		}
		if strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "root") {
			t.Errorf("%q: the error quotes the file: %v", content, err)
		}
	}
}

// TestLoadImpliedTable: a sub-table header alone ([engine.runtime_queue]
// without [engine]) implies its parent, as TOML says.
func TestLoadImpliedTable(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(p, []byte("[engine.runtime_queue]\nmlu_local_threshold = 0.5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := Load(p)
	if err != nil || d.Engine.RuntimeQueue.MLULocalThreshold != 0.5 {
		t.Fatalf("implied [engine]: %v", err)
	}
	if err := os.WriteFile(p, []byte("engine = 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "engine: want a table [engine]") {
		t.Fatalf("engine = 5: %v", err)
	}
}

// TestAllowedRoots: a root is an absolute path to an existing directory,
// and one that resolves to / needs mount.allow_filesystem_root.
func TestAllowedRoots(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	slash := filepath.Join(dir, "slash")
	os.Symlink("/", slash)
	cases := []struct {
		name, toml string
		want       string // "" accepted
	}{
		{"directory", `allowed_roots = ["` + dir + `"]`, ""},
		{"relative", `allowed_roots = ["data"]`, `mount.allowed_roots "data" is not an absolute path: name the directory (a relative root would depend on the daemon's working directory)`},
		{"dot", `allowed_roots = ["."]`, `mount.allowed_roots "." is not an absolute path`},
		{"missing", `allowed_roots = ["` + dir + `/nope"]`, `mount.allowed_roots "` + dir + `/nope" does not exist: create the directory or remove it from the list`},
		{"regular file", `allowed_roots = ["` + file + `"]`, `mount.allowed_roots "` + file + `" is not a directory: a root must be a directory`},
		{"slash", `allowed_roots = ["/"]`, `mount.allowed_roots "/" resolves to /, which lets segments open any file on the host: set mount.allow_filesystem_root = true to allow it`},
		{"slash through ..", `allowed_roots = ["/tmp/.."]`, `mount.allowed_roots "/" resolves to /`},
		{"symlink to slash", `allowed_roots = ["` + slash + `"]`, `mount.allowed_roots "` + slash + `" resolves to /`},
		{"slash, allowed", "allowed_roots = [\"/\"]\nallow_filesystem_root = true", ""},
		{"link to slash, allowed", "allowed_roots = [\"" + slash + "\"]\nallow_filesystem_root = true", ""},
		{"every problem", `allowed_roots = ["/", "` + file + `"]`, `resolves to /`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("[mount]\n" + c.toml + "\n")
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
	// Every bad root is reported, not just the first.
	_, err := Parse("[mount]\nallowed_roots = [\"/\", \"" + file + "\"]\n")
	if err == nil || !strings.Contains(err.Error(), "resolves to /") || !strings.Contains(err.Error(), "is not a directory") {
		t.Fatalf("two bad roots: %v, want both reported", err)
	}
}
