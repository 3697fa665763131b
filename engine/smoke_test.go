package engine_test

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/backends/iouring"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

func TestSmoke(t *testing.T) {
	cfg := config.DefaultEngine()
	e, err := engine.New(cfg, iouring.New(cfg.IOUring))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(time.Second)
	p := filepath.Join(t.TempDir(), "f")
	data := make([]byte, 1<<20)
	rand.Read(data)
	os.WriteFile(p, data, 0o644)
	seg, err := e.OpenFileSegment("file://"+p, engine.PermReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.RegisterMemory(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: r.BaseAddress(), Length: 1 << 20}}, time.Second)
	if err != nil {
		t.Fatal(err, rep)
	}
	got := make([]byte, 1<<20)
	r.ReadAt(got, 0)
	if !bytes.Equal(got, data) {
		t.Fatal("mismatch")
	}
	rep, err = e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: r.BaseAddress() + 3, TargetOffset: 5, Length: 100}}, time.Second)
	if err != nil {
		t.Fatal(err, rep)
	}
	t.Logf("%+v %+v", rep, e.Stats())
}
