// driver_test.go tests Open without a GPU: the library search, the shared
// reference-counted driver, the PID guard and the mode names.

package gds

import (
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
)

func TestOpenMissingLibraryOverride(t *testing.T) {
	t.Setenv(EnvLibrary, "/nonexistent/libcufile.so.0")
	st := &processState{load: loadLibrary, getpid: os.Getpid}
	_, err := st.open(Options{Binder: noBinder})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Open = %v, want ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "/nonexistent/libcufile.so.0") {
		t.Fatalf("error %q does not name the override path", err)
	}
}

func TestOpenWithoutLibrary(t *testing.T) {
	if _, err := loadLibrary(); err == nil {
		t.Skip("libcufile.so.0 is installed here; this test covers machines without it")
	}
	_, err := Open(Options{Binder: noBinder})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "libcufile.so.0") {
		t.Fatalf("Open = %v, want ErrUnavailable naming libcufile.so.0", err)
	}
	for _, d := range searchDirs {
		if !strings.Contains(err.Error(), d) {
			t.Errorf("error %q does not name searched folder %s", err, d)
		}
	}
}

func TestOpenNilBinder(t *testing.T) {
	if _, err := Open(Options{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Open without binder = %v, want ErrInvalid", err)
	}
}

func TestDriverSharedAndRefcounted(t *testing.T) {
	f := &fakeCuFile{allow: 1}
	var pid atomic.Int64
	pid.Store(100)
	st := fakeProcess(f, &pid)
	a, err := st.open(Options{Binder: noBinder})
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.open(Options{Binder: noBinder})
	if err != nil {
		t.Fatal(err)
	}
	if n := f.opens.Load(); n != 1 {
		t.Fatalf("cuFileDriverOpen called %d times for two Opens, want 1", n)
	}
	if err := a.Close(); err != nil || f.closes.Load() != 0 {
		t.Fatalf("first Close: err %v, driver closes %d, want nil and 0", err, f.closes.Load())
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close of the same Driver: %v", err)
	}
	if f.closes.Load() != 0 {
		t.Fatal("a repeated Close dropped another Driver's reference")
	}
	if err := b.Close(); err != nil || f.closes.Load() != 1 {
		t.Fatalf("last Close: err %v, driver closes %d, want nil and 1", err, f.closes.Load())
	}
	if _, err := a.RegisterFile(0); !errors.Is(err, ErrClosed) {
		t.Fatalf("RegisterFile on a closed driver = %v, want ErrClosed", err)
	}
}

func TestDriverPIDGuard(t *testing.T) {
	f := &fakeCuFile{allow: 1}
	var pid atomic.Int64
	pid.Store(100)
	st := fakeProcess(f, &pid)
	parent, err := st.open(Options{Binder: noBinder})
	if err != nil {
		t.Fatal(err)
	}
	pid.Store(101) // as after fork, in the child
	if _, err := parent.NewParallelBatch(4, 2); !errors.Is(err, ErrForked) {
		t.Fatalf("parent's driver used in the child = %v, want ErrForked", err)
	}
	child, err := st.open(Options{Binder: noBinder})
	if err != nil {
		t.Fatal(err)
	}
	if n := f.opens.Load(); n != 2 {
		t.Fatalf("child Open reused the parent's driver (opens %d, want 2)", n)
	}
	if err := parent.Close(); err != nil || f.closes.Load() != 0 {
		t.Fatalf("closing the parent's Driver in the child: err %v, closes %d; want no driver close", err, f.closes.Load())
	}
	if err := child.Close(); err != nil || f.closes.Load() != 1 {
		t.Fatalf("child Close: err %v, closes %d, want 1", err, f.closes.Load())
	}
}

func TestOpenDriverFailures(t *testing.T) {
	var pid atomic.Int64
	pid.Store(1)
	f := &fakeCuFile{openStatus: uint64(OpDriverNotInitialized)}
	_, err := fakeProcess(f, &pid).open(Options{Binder: noBinder})
	var ce *Error
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &ce) || ce.Code != OpDriverNotInitialized {
		t.Fatalf("driver open failure = %v, want ErrUnavailable with CU_FILE_DRIVER_NOT_INITIALIZED", err)
	}
	if !strings.Contains(err.Error(), "CU_FILE_DRIVER_NOT_INITIALIZED") {
		t.Fatalf("error %q does not name the code", err)
	}
	f = &fakeCuFile{propsStatus: uint64(opBase + 2)}
	_, err = fakeProcess(f, &pid).open(Options{Binder: noBinder})
	if !errors.Is(err, ErrUnavailable) || f.closes.Load() != 1 {
		t.Fatalf("unreadable properties = %v (driver closes %d), want ErrUnavailable and the driver closed again", err, f.closes.Load())
	}
}

func TestModes(t *testing.T) {
	// DMA: only with nvidia-fs, and compatibility not forced.
	for _, c := range []struct {
		allow, force, nvfs bool
		want               Mode
		dma                bool
	}{
		{false, false, false, ModeDisabled, false},
		{false, false, true, ModeNative, true},
		{true, false, false, ModeCompatPermitted, false},
		{true, false, true, ModeCompatPermitted, true},
		{true, true, false, ModeCompatForced, false},
		{false, true, true, ModeCompatForced, false},
	} {
		got := modeOf(c.allow, c.force, c.nvfs)
		if got != c.want {
			t.Errorf("modeOf(allow=%v, force=%v, nvfs=%v) = %s, want %s", c.allow, c.force, c.nvfs, got, c.want)
		}
		if d := (&Driver{props: Properties{Mode: got, NvfsLoaded: c.nvfs}}); d.DMA() != c.dma {
			t.Errorf("DMA with mode %s, nvidia-fs %v: %v, want %v", got, c.nvfs, d.DMA(), c.dma)
		}
	}
	var pid atomic.Int64
	pid.Store(1)
	f := &fakeCuFile{allow: 1, force: 1}
	d, err := fakeProcess(f, &pid).open(Options{Binder: noBinder})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p := d.Properties()
	if d.Mode() != ModeCompatForced || !strings.Contains(p.ModeSource, "cuFileGetParameterBool") || p.MaxDirectIOSize != 16<<20 {
		t.Fatalf("properties %+v: want compat-forced read with cuFileGetParameterBool, max_direct_io_size 16 MiB", p)
	}
}
