package gpu

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/backends/cuda"
	"github.com/orbitefs/orbitefs/backends/gds"
	"github.com/orbitefs/orbitefs/backends/iouring"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// TestIdleEngineLoadsNothing: an engine with every backend loads neither
// libcuda nor libcufile for construction, segment open and info, stats,
// host registration or a DRAM transfer; the first device registration
// loads libcuda (showing the check can fire); an unspecified device
// transfer loads libcufile only where nvidia-fs is loaded, and the first
// transfer with transport gds loads it. It runs in a fresh process, since this test
// binary's other tests load both.
func TestIdleEngineLoadsNothing(t *testing.T) {
	if err := cuda.NewBackend(cuda.Options{}).Probe(); err != nil {
		// Without a GPU nothing can load, so the check could not fail.
		if os.Getenv("ORBITEFS_REQUIRE") == "gpu" {
			t.Fatalf("no GPU, and ORBITEFS_REQUIRE=gpu: %v", err)
		}
		t.Skipf("no GPU: %v", err)
	}
	path, _ := randomFile(t, ext4Dir(t), 1<<20)
	exe, _ := os.Executable()
	c := exec.Command(exe, "-test.run=^$")
	c.Env = append(os.Environ(), "ORBITEFS_IDLE_CHILD=1", "ORBITEFS_IDLE_FILE="+path)
	out, err := c.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("idle child: %v", err)
	}
}

func loaded(lib string) bool {
	b, _ := os.ReadFile("/proc/self/maps")
	return strings.Contains(string(b), lib)
}

func idleChild(path string) error {
	cfg := config.DefaultEngine()
	c := cuda.NewBackend(cuda.Options{})
	e, err := engine.New(cfg, iouring.New(cfg.IOUring), c, gds.NewBackend(c.Bind))
	if err != nil {
		return err
	}
	defer e.Close(time.Minute)
	none := func(step string) error {
		for _, lib := range []string{"libcuda.so", "libcufile.so"} {
			if loaded(lib) {
				return fmt.Errorf("%s is loaded after %s", lib, step)
			}
		}
		fmt.Println("nothing loaded after", step)
		return nil
	}
	if err := none("engine.New"); err != nil {
		return err
	}
	seg, err := e.OpenFileSegment("file://"+path, engine.PermReadWrite)
	if err != nil {
		return err
	}
	if _, err := e.FileSegmentInfo(seg); err != nil {
		return err
	}
	_ = e.Stats()
	if err := none("segment open, info and stats"); err != nil {
		return err
	}
	h, err := e.RegisterMemory(1 << 20)
	if err != nil {
		return err
	}
	if _, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: h.BaseAddress(), Length: 1 << 20}}, time.Minute); err != nil {
		return err
	}
	if err := none("a DRAM transfer"); err != nil {
		return err
	}
	d, err := e.RegisterDevice(0, 1<<20)
	if err != nil {
		return err
	}
	if !loaded("libcuda.so") || loaded("libcufile.so") {
		return errors.New("after a device registration: want libcuda loaded and libcufile not")
	}
	fmt.Println("libcuda loaded by the first device registration")
	// An unspecified transport considers cuFile only where it can move
	// bytes by DMA (the nvidia-fs module is loaded); an explicit gds
	// request always does.
	if _, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: d.BaseAddress(), Length: 1 << 20}}, time.Minute); err != nil {
		return err
	}
	_, nvfs := os.Stat("/sys/module/nvidia_fs")
	got, want := loaded("libcufile.so"), nvfs == nil
	if got != want {
		return fmt.Errorf("after an unspecified device transfer, nvidia-fs loaded %v: libcufile loaded %v", want, got)
	}
	fmt.Printf("an unspecified device transfer loaded libcufile: %v (nvidia-fs loaded: %v)\n", got, want)
	// Unavailable is an answer too (cuFile loaded, but it refuses: no
	// nvidia-fs and compatibility mode off); what is checked is the load.
	if _, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Transport: engine.TransportGDS, Address: d.BaseAddress(), Length: 1 << 20}}, time.Minute); err != nil && !errors.Is(err, engine.ErrUnavailable) {
		return err
	}
	if !loaded("libcufile.so") {
		return errors.New("a transfer with transport gds did not load libcufile")
	}
	fmt.Println("libcufile loaded by the first transfer with transport gds")
	e.Unregister(d)
	return nil
}
