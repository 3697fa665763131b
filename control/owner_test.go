package control_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/orbitefs/orbitefs/engine"
)

// TestOwnership: an unprivileged caller acts only on what it created and
// may not name, map or address anyone else's objects; the daemon (nil),
// root and the daemon's uid act on everything. Refusals change nothing.
func TestOwnership(t *testing.T) {
	s, _ := newService(t, "")
	alice := &engine.Caller{UID: 4242, GID: 4242}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// The daemon's objects, then alice's (memory segments: no file to
	// open, so no credential switch is involved).
	must(s.Register(nil, []byte(`{"name":"dbuf","location":"cpu","bytes":8192}`)))
	must(s.OpenSegment(nil, []byte(`{"name":"dseg","uri":"mem://dbuf","permission":"read_write"}`)))
	dbt, err := s.Clone(nil)
	must(err)
	must(s.Register(alice, []byte(`{"name":"abuf","location":"cpu","bytes":8192}`)))
	must(s.OpenSegment(alice, []byte(`{"name":"aseg","uri":"mem://abuf","permission":"read_write"}`)))
	abt, err := s.Clone(alice)
	must(err)
	if uid, gid, ok := s.Memory("abuf").Owner(); !ok || uid != 4242 || gid != 4242 {
		t.Fatalf("abuf owner %d:%d %v, want 4242:4242", uid, gid, ok)
	}
	if _, _, ok := s.Memory("dbuf").Owner(); ok {
		t.Fatalf("the daemon's own memory reports an owner")
	}
	base := func(name string) uint64 {
		b, err := s.MemoryInfo(s.Memory(name))
		must(err)
		var info struct {
			BaseAddress uint64 `json:"base_address"`
		}
		must(json.Unmarshal(b, &info))
		return info.BaseAddress
	}
	sub := func(target, req string) string {
		return fmt.Sprintf(`{"op":"read","target":"%s","requests":[%s]}`, target, req)
	}
	own := sub("aseg", `{"memory":"abuf","offset":4096,"target_offset":0,"length":4096}`)

	for _, c := range []struct {
		what string
		do   func() error
		text string
	}{
		{"mem:// of the daemon's memory", func() error {
			return s.OpenSegment(alice, []byte(`{"name":"steal","uri":"mem://dbuf","permission":"read"}`))
		}, "memory dbuf belongs to uid"},
		{"submit to the daemon's batch", func() error { return s.Submit(alice, dbt, []byte(own)) }, fmt.Sprintf("batches/%d belongs to uid", dbt.ID)},
		{"target the daemon's segment", func() error {
			return s.Submit(alice, abt, []byte(sub("dseg", `{"memory":"abuf","length":4096}`)))
		}, `target "dseg": segment belongs to uid`},
		{"name the daemon's memory", func() error {
			return s.Submit(alice, abt, []byte(sub("aseg", `{"memory":"dbuf","length":4096}`)))
		}, `memory "dbuf" belongs to uid`},
		{"address the daemon's memory", func() error {
			return s.Submit(alice, abt, []byte(sub("aseg", fmt.Sprintf(`{"address":%d,"length":4096}`, base("dbuf")))))
		}, "is not inside a memory region of uid 4242"},
		{"address past the end of its own memory", func() error {
			return s.Submit(alice, abt, []byte(sub("aseg", fmt.Sprintf(`{"address":%d,"length":8192}`, base("abuf")+4096))))
		}, "is not inside a memory region of uid 4242"},
		{"ctl the daemon's batch", func() error { return s.Ctl(alice, dbt, "seal") }, "belongs to uid"},
		{"free the daemon's batch", func() error { return s.FreeBatch(alice, dbt.ID) }, "belongs to uid"},
		{"unregister the daemon's memory", func() error { return s.Unregister(alice, "dbuf") }, "memory dbuf belongs to uid"},
		{"close the daemon's segment", func() error { return s.CloseSegment(alice, "dseg") }, "segment dseg belongs to uid"},
		{"ctl/engine", func() error { return s.EngineCtl(alice, "close_requester 1s") }, "ctl/engine is for the daemon's user"},
	} {
		wantErrno(t, c.what, c.do(), syscall.EACCES, c.text)
	}
	if s.Memory("dbuf") == nil || s.Segment("dseg") == nil || s.Batch(dbt.ID) == nil || s.TaskCount(abt) != 0 || s.TaskCount(dbt) != 0 {
		t.Fatal("a refused operation changed something")
	}
	// Refusals go to the refused caller's view of /error, not to the
	// daemon's batch's error file; another uid sees none of them.
	if e := dbt.Error(); len(e) != 0 {
		t.Errorf("the daemon's batch error file after alice's refusals: %q, want it empty", e)
	}
	if e := string(s.LastError(alice)); !strings.Contains(e, "ctl/engine is for the daemon's user") {
		t.Errorf("alice's /error = %q, want her last refusal", e)
	}
	if e := s.LastError(&engine.Caller{UID: 4343, GID: 4343}); len(e) != 0 {
		t.Errorf("uid 4343's /error = %q, want it empty", e)
	}
	if e := string(s.LastError(nil)); !strings.Contains(e, "ctl/engine is for the daemon's user") {
		t.Errorf("the daemon's /error = %q, want the last refusal of anyone", e)
	}

	// Alice's own objects, by name and by address inside them.
	must(s.Submit(alice, abt, []byte(own)))
	must(s.Submit(alice, abt, []byte(sub("aseg", fmt.Sprintf(`{"address":%d,"target_offset":4096,"length":4096}`, base("abuf")+4096)))))
	// Privileged callers act on everyone's objects.
	root := &engine.Caller{UID: 0, GID: 0}
	must(s.Submit(root, dbt, []byte(sub("aseg", `{"memory":"dbuf","length":4096}`))))
	must(s.Submit(nil, dbt, []byte(sub("dseg", `{"memory":"abuf","length":4096}`))))
	must(s.Ctl(root, abt, "seal"))
	must(s.CloseSegment(root, "aseg"))
}

// TestLastErrorUsersBounded: the per-uid error texts are bounded in
// number (a user with many subordinate uids fails once with each).
func TestLastErrorUsersBounded(t *testing.T) {
	s, _ := newService(t, "")
	const users = 3000
	for uid := uint32(10000); uid < 10000+users; uid++ {
		s.EngineCtl(&engine.Caller{UID: uid, GID: uid}, "close")
	}
	kept := 0
	for uid := uint32(10000); uid < 10000+users; uid++ {
		if len(s.LastError(&engine.Caller{UID: uid, GID: uid})) > 0 {
			kept++
		}
	}
	if kept == 0 || kept > 1024 {
		t.Fatalf("%d of %d uids keep an error text, want between 1 and 1024", kept, users)
	}
	if e := string(s.LastError(&engine.Caller{UID: 10000 + users - 1})); !strings.Contains(e, "uid 12999") {
		t.Fatalf("the last failing uid's /error = %q, want its own refusal", e)
	}
}
