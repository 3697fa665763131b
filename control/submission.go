// submission.go owns the submission document written to
// /ctl/batches/<N>/submit: its JSON shape, strict parsing and structural
// validation. It is a spec: pure data, no engine object. Turning names
// into addresses happens in Service.resolve, against the live tables.
//
//	{"op": "read", "target": "cache", "timeout": "5s", "requests": [
//	  {"memory": "buf", "offset": 0, "target_offset": 8, "length": 4},
//	  {"address": 139872394444800, "target_offset": 4096, "length": 4096, "transport": "io_uring"},
//	  {"target_offset": 0, "elements": [
//	    {"memory": "buf", "offset": 0, "length": 4096},
//	    {"padding": 512},
//	    {"address": "0x7f3a00002000", "length": 4096}]}]}
//
// Invariants:
//   - ParseSubmission returns either a Submission that passes Validate or
//     an error with kind KindInvalid or KindTooLarge; never both, never a
//     partial result.
//   - Marshalling a parsed Submission and parsing it again yields an equal
//     Submission (the fuzz target checks this).

package control

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// Submission is one group of requests against one target.
type Submission struct {
	Op      string           `json:"op"`
	Target  string           `json:"target"`
	Timeout *config.Duration `json:"timeout,omitempty"`
	// Deadline, relative to submit, may shorten the timeout's deadline;
	// QoS names the request context its policy resolves from (qos.go).
	Deadline *config.Duration `json:"deadline,omitempty"`
	QoS      *QoSContext      `json:"qos,omitempty"`
	Requests []Request        `json:"requests"`
	// Notify names the peers told once every request succeeded (notify.go).
	Notify []NotifyTarget `json:"notify,omitempty"`
}

// Request is one transfer: a local range named by memory+offset or by a
// raw registered address, or a vector of elements.
type Request struct {
	Memory       *string      `json:"memory,omitempty"`
	Offset       *config.Size `json:"offset,omitempty"`
	Address      *Address     `json:"address,omitempty"`
	TargetOffset config.Size  `json:"target_offset"`
	Length       *config.Size `json:"length,omitempty"`
	Transport    string       `json:"transport,omitempty"`
	Elements     []Element    `json:"elements,omitempty"`
}

// Element is one piece of a vector: {"memory","offset","length"},
// {"address","length"} or {"padding"}.
type Element struct {
	Memory  *string      `json:"memory,omitempty"`
	Offset  *config.Size `json:"offset,omitempty"`
	Address *Address     `json:"address,omitempty"`
	Length  *config.Size `json:"length,omitempty"`
	Padding *config.Size `json:"padding,omitempty"`
}

// Address is a raw local address: a JSON integer, or a string in decimal
// or 0x-prefixed hex (for addresses above 2^53, which JSON numbers in
// most tools cannot carry exactly).
type Address uint64

// UnmarshalJSON accepts 139872394444800, "139872394444800" or
// "0x7f3a00000000".
func (a *Address) UnmarshalJSON(b []byte) error {
	var n json.Number
	if err := json.Unmarshal(b, &n); err == nil {
		v, err := strconv.ParseUint(n.String(), 10, 64)
		if err != nil {
			return fmt.Errorf("address %s: want a nonnegative integer or a string like \"0x7f3a00000000\"", n)
		}
		*a = Address(v)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("address %s: want a nonnegative integer or a string like \"0x7f3a00000000\"", b)
	}
	t := strings.TrimSpace(s)
	base := 10
	if r, ok := strings.CutPrefix(strings.ToLower(t), "0x"); ok {
		t, base = r, 16
	}
	v, err := strconv.ParseUint(t, base, 64)
	if err != nil {
		return fmt.Errorf("address %s: want a decimal or 0x-prefixed hex integer", quoteText(s, quoteRunes))
	}
	*a = Address(v)
	return nil
}

// MarshalJSON writes the hex string form, which round-trips exactly.
func (a Address) MarshalJSON() ([]byte, error) {
	return json.Marshal(fmt.Sprintf("%#x", uint64(a)))
}

// ParseSubmission decodes and validates one submission document of at
// most max bytes (max <= 0: no limit here).
func ParseSubmission(data []byte, max int) (*Submission, error) {
	var s Submission
	if err := decodeStrict(data, max, &s); err != nil {
		return nil, err
	}
	for i := range s.Requests {
		if len(s.Requests[i].Elements) == 0 {
			s.Requests[i].Elements = nil // "elements": [] means none
		}
	}
	if len(s.Notify) == 0 {
		s.Notify = nil // "notify": [] means none
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// EngineOp returns the engine's op; Validate has checked it.
func (s *Submission) EngineOp() engine.Op {
	if s.Op == "write" {
		return engine.OpWrite
	}
	return engine.OpRead
}

// Validate checks the structure: a known op, a valid target name, at
// least one request, and each request or element in exactly one of its
// forms. Ranges and addresses are checked later, against live objects.
func (s *Submission) Validate() error {
	switch s.Op {
	case "read", "write":
	case "":
		return invalid("op is missing: want \"read\" or \"write\"")
	default:
		return invalid("op %s: want \"read\" or \"write\"", quoteText(s.Op, quoteRunes))
	}
	if s.Target == "" {
		return invalid("target is missing: want the name of an open segment")
	}
	if err := ValidateName(s.Target); err != nil {
		return invalid("target: %v", err)
	}
	if len(s.Requests) == 0 {
		return invalid("requests is empty: want at least one request")
	}
	if s.Deadline != nil && *s.Deadline <= 0 {
		return invalid("deadline %s: must be > 0", *s.Deadline)
	}
	for i := range s.Requests {
		if err := s.Requests[i].validate(); err != nil {
			return invalid("requests[%d]: %v", i, err)
		}
	}
	if err := validateNotify(s.Notify); err != nil {
		return invalid("%v", err)
	}
	return nil
}

func (r *Request) validate() error {
	if _, err := ParseTransport(r.Transport); err != nil {
		return err
	}
	if len(r.Elements) > 0 {
		if r.Memory != nil || r.Offset != nil || r.Address != nil || r.Length != nil {
			return fmt.Errorf("a vector request (elements) takes memory, offset, address and length inside its elements only")
		}
		for j := range r.Elements {
			if err := r.Elements[j].validate(); err != nil {
				return fmt.Errorf("elements[%d]: %v", j, err)
			}
		}
		return nil
	}
	return validateRange(r.Memory, r.Offset, r.Address, r.Length)
}

func (e *Element) validate() error {
	if e.Padding != nil {
		if e.Memory != nil || e.Offset != nil || e.Address != nil || e.Length != nil {
			return fmt.Errorf("a padding element takes no memory, offset, address or length")
		}
		if *e.Padding == 0 {
			return fmt.Errorf("padding is 0; omit empty elements")
		}
		return nil
	}
	return validateRange(e.Memory, e.Offset, e.Address, e.Length)
}

// validateRange checks a local range given by memory(+offset) or address,
// plus a nonzero length.
func validateRange(memory *string, offset *config.Size, address *Address, length *config.Size) error {
	switch {
	case memory != nil && address != nil:
		return fmt.Errorf("give memory (with offset) or address, not both")
	case memory == nil && address == nil:
		return fmt.Errorf("local memory is missing: give memory (with offset) or address")
	case address != nil && offset != nil:
		return fmt.Errorf("offset goes with memory; with address, add the offset to the address")
	}
	if memory != nil {
		if err := ValidateName(*memory); err != nil {
			return fmt.Errorf("memory: %v", err)
		}
	}
	if length == nil {
		return fmt.Errorf("length is missing")
	}
	if *length == 0 {
		return fmt.Errorf("length is 0")
	}
	return nil
}

// ParseTransport maps "", "unspec", "io_uring" and "gds" to the engine's
// transport kinds.
func ParseTransport(s string) (engine.TransportKind, error) {
	switch s {
	case "", "unspec":
		return engine.TransportUnspec, nil
	case "io_uring":
		return engine.TransportIOUring, nil
	case "gds":
		return engine.TransportGDS, nil
	}
	return 0, fmt.Errorf("transport %s: want \"unspec\", \"io_uring\" or \"gds\"", quoteText(s, quoteRunes))
}
