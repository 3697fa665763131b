package fusefs

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLeadsInto(t *testing.T) {
	root := t.TempDir()
	mnt := filepath.Join(root, "mnt")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(mnt, "memory"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "a", "b"), 0o755))
	must(os.WriteFile(filepath.Join(root, "a", "f"), nil, 0o644))
	must(os.Symlink("../../mnt/memory", filepath.Join(root, "a", "b", "rel")))
	must(os.Symlink(mnt, filepath.Join(root, "a", "abs")))
	must(os.Symlink("b/rel", filepath.Join(root, "a", "chain")))
	must(os.Symlink("loop", filepath.Join(root, "a", "loop")))
	must(os.Symlink("f", filepath.Join(root, "a", "tof")))
	must(os.Symlink("mnt2", filepath.Join(root, "a", "dangling")))
	must(os.Mkdir(filepath.Join(root, "mnt2"), 0o755))

	in := LeadsInto(mnt)
	for p, want := range map[string]bool{
		mnt:                                  true,
		mnt + "/version":                     true,
		root + "/a/../mnt/version":           true,
		root + "/a/b/rel/buf/data":           true,
		root + "/a/abs/version":              true,
		root + "/a/chain/x":                  true,
		root + "/a/f":                        false,
		root + "/a/tof":                      false,
		root + "/mnt2/x":                     false, // a sibling whose name starts like the mount
		root + "/a/loop":                     false, // loops end the walk; the open reports them
		root + "/a/missing/x":                false,
		root + "/a/dangling":                 false,
		root + "/a/b/rel/../../../mnt2/file": true, // the walk passes through the mount
	} {
		if got := in(p); got != want {
			t.Errorf("LeadsInto(%s)(%s) = %v, want %v", mnt, p, got, want)
		}
	}
}
