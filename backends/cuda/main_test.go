// main_test.go owns the shared test setup: one Driver and device 0 for the
// whole binary (opened on first need), the skip-or-fail rule when there
// is no GPU, the per-test leak check, and the IPC child mode.

package cuda

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
)

// envRequire set to "gpu" turns a missing GPU into a failure (the gate).
const envRequire = "ORBITEFS_REQUIRE"

var shared struct {
	once sync.Once
	drv  *Driver
	dev  *Device
	err  error
}

func TestMain(m *testing.M) {
	if h := os.Getenv(envIPCChild); h != "" {
		if err := ipcChild(h); err != nil {
			fmt.Fprintln(os.Stderr, "ipc child:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	code := m.Run()
	if shared.dev != nil {
		if err := shared.dev.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "closing device:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// gpu returns device 0, or skips (fails under ORBITEFS_REQUIRE=gpu) with
// the reason when there is none. It fails the test if the test leaks a
// driver object.
func gpu(t testing.TB) *Device {
	t.Helper()
	shared.once.Do(func() {
		shared.drv, shared.err = Open(Options{})
		if shared.err == nil {
			shared.dev, shared.err = shared.drv.Device(0)
		}
	})
	if shared.err != nil {
		if os.Getenv(envRequire) == "gpu" {
			t.Fatalf("%s=gpu but no GPU: %v", envRequire, shared.err)
		}
		if !errors.Is(shared.err, ErrUnavailable) && !errors.Is(shared.err, ErrNoDevice) {
			t.Fatalf("opening cuda: %v", shared.err)
		}
		t.Skip(shared.err.Error())
	}
	before := snapshot(shared.drv.Live())
	t.Cleanup(func() {
		if after := snapshot(shared.drv.Live()); after != before {
			t.Errorf("driver objects leaked: before %+v, after %+v", before, after)
		}
	})
	return shared.dev
}

type liveCounts struct{ dev, host, reg, streams, events, ipc int64 }

func snapshot(l *Live) liveCounts {
	return liveCounts{l.DeviceAllocs.Load(), l.HostAllocs.Load(), l.HostRegs.Load(),
		l.Streams.Load(), l.Events.Load(), l.IPCOpens.Load()}
}

// must fails the test on err.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
