package control

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/orbitefs/orbitefs/engine"
)

func TestKindTableCoversEveryKind(t *testing.T) {
	seen := map[engine.Kind]int{}
	for _, r := range kindTable {
		seen[r.Kind]++
		if r.Errno == 0 || r.Name == "" || r.Meaning == "" {
			t.Errorf("row for %v is incomplete: %+v", r.Kind, r)
		}
		if got := r.Errno.Error(); got == "" {
			t.Errorf("%s has no errno text", r.Name)
		}
	}
	for _, k := range engine.Kinds() {
		if seen[k] != 1 {
			t.Errorf("kind %v appears %d times in kindTable, want 1", k, seen[k])
		}
	}
	if len(seen) != len(engine.Kinds()) {
		t.Errorf("kindTable has %d kinds, engine has %d", len(seen), len(engine.Kinds()))
	}
}

func TestErrnoNames(t *testing.T) {
	// The C names in the table must name the errno values next to them.
	want := map[string]syscall.Errno{
		"EINVAL": syscall.EINVAL, "ERANGE": syscall.ERANGE, "ENOENT": syscall.ENOENT, "EEXIST": syscall.EEXIST,
		"EACCES": syscall.EACCES, "EAGAIN": syscall.EAGAIN, "EBUSY": syscall.EBUSY, "EOPNOTSUPP": syscall.EOPNOTSUPP,
		"ETIMEDOUT": syscall.ETIMEDOUT, "EFBIG": syscall.EFBIG, "EIO": syscall.EIO, "ESHUTDOWN": syscall.ESHUTDOWN,
		"EINTR": syscall.EINTR, "ENOSPC": syscall.ENOSPC,
	}
	for _, r := range ErrnoTable() {
		if e, ok := want[r.Name]; !ok || e != r.Errno {
			t.Errorf("row %q has errno %d (%v)", r.Name, r.Errno, r.Errno)
		}
	}
}

func TestErrno(t *testing.T) {
	engErr := func(k engine.Kind) error {
		return &engine.Error{Op: "submit", Name: "batches/1", Kind: k, Err: errors.New("x")}
	}
	for _, c := range []struct {
		name string
		err  error
		want syscall.Errno
	}{
		{"nil", nil, 0},
		{"invalid", engErr(engine.KindInvalid), syscall.EINVAL},
		{"range", engErr(engine.KindRange), syscall.ERANGE},
		{"notfound", engErr(engine.KindNotFound), syscall.ENOENT},
		{"exists", engErr(engine.KindExists), syscall.EEXIST},
		{"permission", engErr(engine.KindPermission), syscall.EACCES},
		{"exhausted", engErr(engine.KindExhausted), syscall.EAGAIN},
		{"busy", engErr(engine.KindBusy), syscall.EBUSY},
		{"unavailable", engErr(engine.KindUnavailable), syscall.EOPNOTSUPP},
		{"timeout", engErr(engine.KindTimeout), syscall.ETIMEDOUT},
		{"toolarge", engErr(engine.KindTooLarge), syscall.EFBIG},
		{"io", engErr(engine.KindIO), syscall.EIO},
		{"closed", engErr(engine.KindClosed), syscall.ESHUTDOWN},
		{"nospace", engErr(engine.KindNoSpace), syscall.ENOSPC},
		{"unknown kind", engErr(engine.KindUnknown), syscall.EIO},
		{"wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", engErr(engine.KindBusy))), syscall.EBUSY},
		{"sentinel", fmt.Errorf("x: %w", engine.ErrRange), syscall.ERANGE},
		{"control detail", invalid("bad %d", 1), syscall.EINVAL},
		{"control detail wrapped", fmt.Errorf("requests[0]: %w", notFound("no")), syscall.ENOENT},
		{"labelled detail", label("submit", "batches/1", tooLarge("big")), syscall.EFBIG},
		{"cancelled", fmt.Errorf("wait: %w", context.Canceled), syscall.EINTR},
		{"deadline", context.DeadlineExceeded, syscall.ETIMEDOUT},
		{"plain", errors.New("boom"), syscall.EIO},
		{"os error", os.ErrNotExist, syscall.EIO},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Errno(c.err); got != c.want {
				t.Errorf("Errno(%v) = %v (%d), want %v (%d)", c.err, got, got, c.want, c.want)
			}
		})
	}
}

func TestDetailKeepsKind(t *testing.T) {
	for k := range kindSentinels {
		err := detail(k, "m")
		if got := engine.KindOf(err); got != k {
			t.Errorf("KindOf(detail(%v)) = %v", k, got)
		}
		if !errors.Is(err, kindSentinels[k]) {
			t.Errorf("detail(%v) does not match its sentinel", k)
		}
		if err.Error() != "m" {
			t.Errorf("detail prints %q, want only its message", err.Error())
		}
	}
}

func TestLabel(t *testing.T) {
	// An engine error keeps its kind and detail under the control name.
	e := &engine.Error{Op: "open", Name: "segments/file:///x", Kind: engine.KindNotFound, Err: errors.New("open /x: no such file or directory")}
	got := label("open", "segments/cache", e).Error()
	if want := "open segments/cache: not found: open /x: no such file or directory"; got != want {
		t.Errorf("label = %q, want %q", got, want)
	}
	got = label("submit", "batches/2", fmt.Errorf("requests[1]: %w", detail(engine.KindRange, "beyond"))).Error()
	if want := "submit batches/2: out of range: requests[1]: beyond"; got != want {
		t.Errorf("label = %q, want %q", got, want)
	}
}
