package control

import (
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/engine"
)

func TestParseEngineCtl(t *testing.T) {
	good := map[string]EngineCtl{
		"close_requester\n":     {Verb: EngineCloseRequester},
		"close_requester 5s":    {Verb: EngineCloseRequester, Timeout: 5 * time.Second},
		"  close 250ms \n":      {Verb: EngineClose, Timeout: 250 * time.Millisecond},
		"close":                 {Verb: EngineClose},
		"close_requester 1h30m": {Verb: EngineCloseRequester, Timeout: 90 * time.Minute},
	}
	for in, want := range good {
		got, err := ParseEngineCtl(in)
		if err != nil || got != want {
			t.Errorf("ParseEngineCtl(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "\n", "close_requester 0s", "close_requester -1s", "close_requester five", "close 1s 2s", "seal", "close\nclose"} {
		if _, err := ParseEngineCtl(in); engine.KindOf(err) != engine.KindInvalid {
			t.Errorf("ParseEngineCtl(%q): %v, want invalid", in, err)
		}
	}
}
