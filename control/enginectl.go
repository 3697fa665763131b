// enginectl.go owns /ctl/engine, the mount's handle on the engine as a
// whole: one command per write.
//
//	close_requester [DUR]  refuse new submissions (ESHUTDOWN) and wait up
//	                       to DUR (default mount.close_timeout) for the
//	                       accepted ones; ETIMEDOUT leaves them running,
//	                       write it again to keep waiting
//	close [DUR]            the daemon's shutdown path: drain up to DUR
//	                       (default mount.close_timeout), then close the
//	                       engine; every later operation answers ESHUTDOWN
//	                       until the mount is unmounted
//
// DUR is a Go duration ("5s", "250ms").

package control

import (
	"strings"
	"time"

	"github.com/orbitefs/orbitefs/engine"
)

// EngineVerb is an /ctl/engine command.
type EngineVerb string

const (
	EngineCloseRequester EngineVerb = "close_requester"
	EngineClose          EngineVerb = "close"
)

// EngineCtl is one parsed /ctl/engine command; Timeout is 0 when omitted.
type EngineCtl struct {
	Verb    EngineVerb
	Timeout time.Duration
}

// ParseEngineCtl reads one command; anything else is KindInvalid naming
// the text.
func ParseEngineCtl(text string) (EngineCtl, error) {
	line := strings.TrimSpace(text)
	if strings.ContainsAny(line, "\n\r") {
		return EngineCtl{}, invalid("engine ctl %s: one command per write", quoteText(line, quoteRunes))
	}
	f := strings.Fields(line)
	if len(f) == 0 {
		return EngineCtl{}, invalid("empty engine ctl command: want close_requester [DUR] or close [DUR]")
	}
	v := EngineVerb(f[0])
	if v != EngineCloseRequester && v != EngineClose {
		return EngineCtl{}, invalid("unknown engine ctl command %s: want close_requester [DUR] or close [DUR]", quoteText(line, quoteRunes))
	}
	c := EngineCtl{Verb: v}
	switch len(f) {
	case 1:
	case 2:
		d, err := time.ParseDuration(f[1])
		if err != nil || d <= 0 {
			return EngineCtl{}, invalid("engine ctl %s: timeout %s is not a positive duration such as 5s", quoteText(line, quoteRunes), quoteText(f[1], quoteRunes))
		}
		c.Timeout = d
	default:
		return EngineCtl{}, invalid("engine ctl %s: want %s [DUR]", quoteText(line, quoteRunes), v)
	}
	return c, nil
}

// EngineCtl runs one /ctl/engine command for caller, which must be
// privileged (owner.go): the engine is everyone's.
func (s *Service) EngineCtl(caller *engine.Caller, text string) error {
	sc := scope{caller: caller, op: "engine ctl", name: "engine"}
	if !s.privileged(caller) {
		return s.fail(sc, detail(engine.KindPermission, "ctl/engine is for the daemon's user (uid %d) and root, not uid %d", s.euid, caller.UID))
	}
	c, err := ParseEngineCtl(text)
	if err != nil {
		return s.fail(sc, err)
	}
	d := c.Timeout
	if d == 0 {
		d = s.opts.CloseTimeout
	}
	sc.op = string(c.Verb)
	switch c.Verb {
	case EngineCloseRequester:
		if s.closing.Load() {
			return s.fail(sc, errClosing())
		}
		err = s.e.CloseRequester(d)
	case EngineClose:
		s.log.Info("engine close requested through /ctl/engine", "op", "close", "timeout", d)
		err = s.Shutdown(d)
	}
	if err != nil {
		return s.fail(sc, err)
	}
	return nil
}
