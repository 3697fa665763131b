package control

import (
	"strings"
	"testing"

	"github.com/orbitefs/orbitefs/engine"
)

func TestParseCtl(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Ctl
		err  string
	}{
		{"seal\n", Ctl{Verb: CtlSeal}, ""},
		{"  seal  ", Ctl{Verb: CtlSeal}, ""},
		{"cancel 3\n", Ctl{Verb: CtlCancel, Task: 3}, ""},
		{"cancel\t0", Ctl{Verb: CtlCancel, Task: 0}, ""},
		{"cancel_all", Ctl{Verb: CtlCancelAll}, ""},
		{"progress\n", Ctl{Verb: CtlProgress}, ""},
		{"free", Ctl{Verb: CtlFree}, ""},
		{"", Ctl{}, "empty ctl command"},
		{"\n", Ctl{}, "empty ctl command"},
		{"sael", Ctl{}, `unknown ctl command "sael"`},
		{"SEAL", Ctl{}, "unknown ctl command"},
		{"seal now", Ctl{}, "takes no argument"},
		{"cancel", Ctl{}, "want cancel I"},
		{"cancel x", Ctl{}, `task index "x"`},
		{"cancel -1", Ctl{}, `task index "-1"`},
		{"cancel +1", Ctl{}, `task index "+1" is not a nonnegative integer in plain decimal digits`},
		{"cancel -0", Ctl{}, `task index "-0"`},
		{"cancel 0x1", Ctl{}, `task index "0x1"`},
		{"cancel 1_0", Ctl{}, `task index "1_0"`},
		{"cancel ٣", Ctl{}, `task index "٣"`},
		{"cancel 007", Ctl{Verb: CtlCancel, Task: 7}, ""},
		{"cancel 1 2", Ctl{}, "want cancel I"},
		{"seal\nfree\n", Ctl{}, "one command per write"},
	} {
		got, err := ParseCtl(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || engine.KindOf(err) != engine.KindInvalid {
				t.Errorf("ParseCtl(%q) = %v, %v; want invalid %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseCtl(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}
