package fusefs

import (
	"errors"
	"testing"
)

func TestFusermountError(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"fusermount exited with code 256\n", "fusermount3 exited with status 1 (its message is just above)"},
		{"fusermount exited with code 512\n", "fusermount3 exited with status 2 (its message is just above)"},
		{"fusermount exited with code 9\n", "fusermount3 was killed by signal killed"},
		{"no such device", "no such device"},
	} {
		if got := fusermountError(errors.New(c.in)).Error(); got != c.want {
			t.Errorf("fusermountError(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
