// ctl.go owns the grammar of a batch's ctl file: one command per write.
//
//	seal          stop appends; the batch turns terminal when its work ends
//	cancel I      cancel task I if it has not started (EBUSY if running)
//	cancel_all    cancel every task that has not started
//	progress      accepted, does nothing: the engine's per-batch worker
//	              already drives I/O; re-read status afterwards
//	free          free the batch (EBUSY while work is queued or running)

package control

import (
	"strconv"
	"strings"
)

// CtlVerb is a ctl command.
type CtlVerb string

// The ctl commands.
const (
	CtlSeal      CtlVerb = "seal"
	CtlCancel    CtlVerb = "cancel"
	CtlCancelAll CtlVerb = "cancel_all"
	CtlProgress  CtlVerb = "progress"
	CtlFree      CtlVerb = "free"
)

// Ctl is one parsed ctl command; Task is set for cancel.
type Ctl struct {
	Verb CtlVerb
	Task int
}

// ParseCtl reads one command. Surrounding whitespace (echo's newline) is
// ignored; anything else that is not exactly one known command is
// KindInvalid naming the text.
func ParseCtl(text string) (Ctl, error) {
	line := strings.TrimSpace(text)
	if line == "" {
		return Ctl{}, invalid("empty ctl command: want seal, cancel I, cancel_all, progress or free")
	}
	if strings.ContainsAny(line, "\n\r") {
		return Ctl{}, invalid("ctl %s: one command per write", quoteText(line, quoteRunes))
	}
	f := strings.Fields(line)
	switch v := CtlVerb(f[0]); v {
	case CtlSeal, CtlCancelAll, CtlProgress, CtlFree:
		if len(f) != 1 {
			return Ctl{}, invalid("ctl %s: %s takes no argument", quoteText(line, quoteRunes), v)
		}
		return Ctl{Verb: v}, nil
	case CtlCancel:
		if len(f) != 2 {
			return Ctl{}, invalid("ctl %s: want cancel I (a task index)", quoteText(line, quoteRunes))
		}
		// Plain decimal digits only: Atoi alone would take "+1" and "-0".
		i, err := strconv.Atoi(f[1])
		if err != nil || strings.Trim(f[1], "0123456789") != "" {
			return Ctl{}, invalid("ctl %s: task index %s is not a nonnegative integer in plain decimal digits", quoteText(line, quoteRunes), quoteText(f[1], quoteRunes))
		}
		return Ctl{Verb: CtlCancel, Task: i}, nil
	}
	return Ctl{}, invalid("unknown ctl command %s: want seal, cancel I, cancel_all, progress or free", quoteText(line, quoteRunes))
}
