package cuda

// ipccopy_test.go: a device-to-device copy queued on a stream lands, and
// the engine adapter exports an allocation's IPC handle (refusing an
// imported one). Across processes, tests/gpu/ipc.sh moves bytes between
// two daemons this way.

import (
	"bytes"
	"errors"
	"testing"
)

func TestDtoDAsync(t *testing.T) {
	dev := gpu(t)
	const n = 8 << 20
	src, err := dev.Alloc(n)
	must(t, err)
	defer func() { must(t, dev.Free(src)) }()
	dst, err := dev.Alloc(n)
	must(t, err)
	defer func() { must(t, dev.Free(dst)) }()
	want := ipcPattern()
	want = append(want, want...)
	want = append(want, want...)
	want = append(want, want...) // 8 MiB
	must(t, dev.CopyHtoD(src, want))
	must(t, dev.Memset(dst, 0, n))
	// The memset runs on the legacy stream, which a non-blocking stream
	// does not wait for.
	must(t, dev.Synchronize())
	s, err := dev.NewStream(true)
	must(t, err)
	defer s.Destroy()
	must(t, s.DtoDAsync(dst+4096, src+4096, n-8192))
	must(t, s.Sync())
	got := make([]byte, n)
	must(t, dev.CopyDtoH(got, dst))
	if !bytes.Equal(got[4096:n-4096], want[4096:n-4096]) || got[0] != 0 || got[n-1] != 0 {
		t.Fatal("the device-to-device copy moved the wrong bytes")
	}
	if err := s.DtoDAsync(dst, src, -1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative length: %v", err)
	}
}

func TestAdapterIPCHandle(t *testing.T) {
	gpu(t)
	b := NewBackend(Options{})
	m, err := b.Alloc(0, 1<<20)
	must(t, err)
	defer func() { must(t, m.Free()) }()
	h, err := m.(*deviceMemory).IPCHandle()
	must(t, err)
	want, err := m.(*deviceMemory).d.IPCHandle(m.(*deviceMemory).p)
	must(t, err)
	if !bytes.Equal(h, want[:]) {
		t.Fatal("the adapter's handle differs from cuIpcGetMemHandle's")
	}
	imported := &deviceMemory{d: m.(*deviceMemory).d, p: m.(*deviceMemory).p, ipc: true}
	if _, err := imported.IPCHandle(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an imported mapping exported: %v", err)
	}
}
