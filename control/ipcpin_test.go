package control_test

// ipcpin_test.go: rmdir of a registration a peer maps through CUDA IPC
// is EBUSY naming the region and the peers, info lists the mappings,
// and once they are returned rmdir succeeds. (The peer server records
// the mappings through Memory.HoldIPC; any region records them the same
// way, so host memory stands in for a GPU here.)

import (
	"encoding/json"
	"syscall"
	"testing"

	"github.com/orbitefs/orbitefs/control"
)

func TestUnregisterRefusedWhileIPCMapped(t *testing.T) {
	s, _ := newService(t, "")
	if err := s.Register(nil, []byte(`{"name":"kv","location":"cpu","bytes":"64KiB","export":"read_write"}`)); err != nil {
		t.Fatal(err)
	}
	m := s.Memory("kv")
	const a, b = "decode-0 (epoch 00000000000000aa, session 3)", "decode-1 (epoch 00000000000000bb, session 9)"
	for _, h := range []string{a, a, b} {
		if err := m.HoldIPC(h); err != nil {
			t.Fatal(err)
		}
	}
	wantErrno(t, "rmdir while mapped", s.Unregister(nil, "kv"), syscall.EBUSY,
		"unregister memory/kv: busy: peers map its device memory through CUDA IPC and may copy into it (3 mapping(s): "+a+" holds 2, "+b+" holds 1)")
	raw, err := s.MemoryInfo(m)
	if err != nil {
		t.Fatal(err)
	}
	var info control.MemoryInfo
	if err := json.Unmarshal(raw, &info); err != nil {
		t.Fatal(err)
	}
	if info.CUDAIPCMappings[a] != 2 || info.CUDAIPCMappings[b] != 1 {
		t.Fatalf("info mappings %v, want %s 2 and %s 1 (%s)", info.CUDAIPCMappings, a, b, raw)
	}
	m.ReleaseIPC(a, 1)
	m.ReleaseIPC(b, 0) // the end of b's session: all of them
	wantErrno(t, "rmdir while one is mapped", s.Unregister(nil, "kv"), syscall.EBUSY, "(1 mapping(s): "+a+" holds 1)")
	m.ReleaseIPC(a, 1)
	if err := s.Unregister(nil, "kv"); err != nil {
		t.Fatalf("rmdir after the mappings were returned: %v", err)
	}
	if err := m.HoldIPC(a); err == nil {
		t.Fatal("a mapping of an unregistered region was recorded")
	}
}
