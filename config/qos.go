// qos.go owns the spec's JSON QoS document ("JSON QoS configuration"):
// its shape, strict parsing and validation. It is pure data; the engine
// compiles it into contracts (engine/qos.go).
//
//	{"qos": {"version": 1,
//	  "defaults": {"priority": "medium", "max_inflight_bytes": "64MiB", "max_inflight_requests": 128},
//	  "tenants": [{"name": "tenant-a", "defaults": {"max_inflight_bytes": "128MiB"},
//	    "intents": {"foreground_get": {"priority": "high"}}}]}}
//
// Invariants:
//   - ParseQoSJSON returns (nil, nil) for a disabled document (missing or
//     null "qos", {} or a version-only object), a *QoS that passes
//     Validate, or an error wrapping ErrInvalidQoS; never a partial result.
//   - Names are stored normalized (QoSName: ASCII whitespace trimmed,
//     ASCII letters lowercased, everything else exact); Validate refuses
//     blank, over-long, control-character and duplicate normalized names.
//   - A priority is exactly one of the documented words or digits (ASCII
//     case-insensitive, nothing around it).
//   - A nil field inherits; an empty (non-nil) action list replaces the
//     inherited one.

package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// QoS limits from the spec.
const (
	MaxQoSDocumentBytes = 1 << 20
	MaxQoSNameBytes     = 256
	MaxQoSContracts     = 4096
)

// ErrInvalidQoS is wrapped by every QoS document error (the spec's
// Error::InvalidQosConfig).
var ErrInvalidQoS = errors.New("invalid qos config")

func qosErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidQoS, fmt.Sprintf(format, args...))
}

// Priority is a QoS priority; lower is more urgent.
type Priority uint8

const (
	PriorityHigh   Priority = 0
	PriorityMedium Priority = 1
	PriorityLow    Priority = 2
)

func (p Priority) String() string {
	switch p {
	case PriorityHigh:
		return "high"
	case PriorityMedium:
		return "medium"
	case PriorityLow:
		return "low"
	}
	return fmt.Sprintf("priority(%d)", uint8(p))
}

// ParsePriority reads exactly 0/1/2 or high/medium/low, the words in any
// ASCII case. Nothing is trimmed and no Unicode folding applies: " high",
// "high\n" and "H\u0130GH" are refused, as a priority is a JSON value,
// never a line a shell wrote.
func ParsePriority(s string) (Priority, error) {
	switch asciiLower(s) {
	case "0", "high":
		return PriorityHigh, nil
	case "1", "medium":
		return PriorityMedium, nil
	case "2", "low":
		return PriorityLow, nil
	}
	return 0, fmt.Errorf("priority %q: want 0/1/2 or high/medium/low", s)
}

// asciiLower lowercases A-Z only: strings.ToLower also maps non-ASCII
// letters onto ASCII ones (U+212A KELVIN SIGN to 'k', U+0130 to 'i').
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// UnmarshalJSON accepts 0, 1, 2 or a name.
func (p *Priority) UnmarshalJSON(b []byte) error {
	s := string(b)
	if len(b) > 0 && b[0] == '"' {
		var err error
		if s, err = strconv.Unquote(s); err != nil {
			return fmt.Errorf("priority %s: not a JSON string", b)
		}
	}
	v, err := ParsePriority(s)
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// MarshalJSON writes the name.
func (p Priority) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(p.String())), nil }

// QoS degraded actions the engine executes; the others the format names are
// refused.
const (
	ActionDelay  = "delay"
	ActionReject = "reject"
)

var unsupportedActions = map[string]bool{"fallback_transport": true, "local_recompute": true, "compress": true}

// DefaultMaxPriority is the most urgent priority a request may ask for
// under a contract that does not set max_priority: asking for more than
// the default priority needs the contract's permission.
const DefaultMaxPriority = PriorityMedium

// QoSFields is one contract layer. A nil field inherits from the layer
// below; an effective nil cap means no cap and 0 is a hard zero.
type QoSFields struct {
	Priority *Priority `json:"priority,omitempty"`
	// MaxPriority is the most urgent priority a request may ask for
	// (nil: DefaultMaxPriority). It limits the request's own priority
	// only; a contract's Priority replaces the request's.
	MaxPriority            *Priority `json:"max_priority,omitempty"`
	MaxInflightBytes       *Size     `json:"max_inflight_bytes,omitempty"`
	MaxInflightRequests    *uint64   `json:"max_inflight_requests,omitempty"`
	AllowedDegradedActions *[]string `json:"allowed_degraded_actions,omitempty"`
}

// Overlay returns f with every field o sets replaced by o's.
func (f QoSFields) Overlay(o QoSFields) QoSFields {
	if o.Priority != nil {
		f.Priority = o.Priority
	}
	if o.MaxPriority != nil {
		f.MaxPriority = o.MaxPriority
	}
	if o.MaxInflightBytes != nil {
		f.MaxInflightBytes = o.MaxInflightBytes
	}
	if o.MaxInflightRequests != nil {
		f.MaxInflightRequests = o.MaxInflightRequests
	}
	if o.AllowedDegradedActions != nil {
		f.AllowedDegradedActions = o.AllowedDegradedActions
	}
	return f
}

// Delay reports whether the effective actions include delay.
func (f QoSFields) Delay() bool {
	if f.AllowedDegradedActions == nil {
		return false
	}
	for _, a := range *f.AllowedDegradedActions {
		if a == ActionDelay {
			return true
		}
	}
	return false
}

// QoSTenant is a tenant's defaults and intent overrides.
type QoSTenant struct {
	Name     string               `json:"name"`
	Defaults QoSFields            `json:"defaults"`
	Intents  map[string]QoSFields `json:"intents,omitempty"`
}

// QoS is the version-1 contract set.
type QoS struct {
	Version  int         `json:"version"`
	Defaults QoSFields   `json:"defaults"`
	Tenants  []QoSTenant `json:"tenants,omitempty"`
}

// QoSName normalizes a tenant or intent name: ASCII whitespace trimmed,
// ASCII letters lowercased; every other character is kept exactly (no
// Unicode case folding: U+212A KELVIN SIGN is not 'k'). It refuses
// invalid UTF-8, control characters (C0, DEL, C1) and line or paragraph
// separators anywhere in the name, and names over MaxQoSNameBytes. A
// blank name normalizes to "" (the caller decides what blank means).
func QoSName(s string) (string, error) {
	n := asciiLower(strings.Trim(s, " \t\n\v\f\r"))
	switch {
	case !utf8.ValidString(n):
		return "", fmt.Errorf("name %q is not valid UTF-8", s)
	case len(n) > MaxQoSNameBytes:
		return "", fmt.Errorf("name %.20q... is %d bytes, more than %d", n, len(n), MaxQoSNameBytes)
	}
	for _, r := range n {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == 0x2028 || r == 0x2029 {
			return "", fmt.Errorf("name %q contains control character %U", s, r)
		}
	}
	return n, nil
}

// qosWire is the document as written: every key optional, so a
// version-only or empty object can be told from a real one.
type qosWire struct {
	Version  *int        `json:"version"`
	Defaults *QoSFields  `json:"defaults"`
	Tenants  []QoSTenant `json:"tenants"`
}

// ParseQoSJSON reads the "qos" section of an OrbiTE JSON object. Unknown
// wrapper keys are errors (EngineFromJSON reads a whole engine document).
func ParseQoSJSON(data []byte) (*QoS, error) {
	if len(data) > MaxQoSDocumentBytes {
		return nil, qosErr("document of %d bytes exceeds the 1MiB limit", len(data))
	}
	var top struct {
		QoS jsontext.Value `json:"qos"`
	}
	if err := strictJSON(data, &top); err != nil {
		return nil, qosErr("%v", err)
	}
	return parseQoSSection(top.QoS)
}

// ParseQoSFile is ParseQoSJSON of a file's contents.
func ParseQoSFile(path string) (*QoS, error) {
	b, err := readLimited(path, MaxQoSDocumentBytes)
	if err != nil {
		return nil, qosErr("%v", err)
	}
	q, err := ParseQoSJSON(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return q, nil
}

// parseQoSSection decodes the value of "qos" (nil or null: disabled).
func parseQoSSection(v jsontext.Value) (*QoS, error) {
	if len(v) == 0 || string(bytes.TrimSpace(v)) == "null" {
		return nil, nil
	}
	var w qosWire
	if err := strictJSON(v, &w); err != nil {
		return nil, qosErr("qos%v", prefixed(err))
	}
	if w.Version != nil && *w.Version != 1 {
		return nil, qosErr("qos.version %d: only version 1 is accepted", *w.Version)
	}
	if w.Defaults == nil && w.Tenants == nil {
		return nil, nil // {} or version-only: QoS disabled
	}
	q := &QoS{Version: 1, Tenants: w.Tenants}
	if w.Defaults != nil {
		q.Defaults = *w.Defaults
	}
	if err := q.normalize(); err != nil {
		return nil, err
	}
	return q, nil
}

func prefixed(err error) string {
	s := err.Error()
	if strings.HasPrefix(s, "/") {
		return s
	}
	return ": " + s
}

// normalize lowercases names in place and validates the whole set.
func (q *QoS) normalize() error {
	for i := range q.Tenants {
		t := &q.Tenants[i]
		at := fmt.Sprintf("qos.tenants[%d]", i)
		n, err := QoSName(t.Name)
		if err != nil {
			return qosErr("%s.name: %v", at, err)
		}
		t.Name = n
		if len(t.Intents) > 0 {
			in := make(map[string]QoSFields, len(t.Intents))
			for k, f := range t.Intents {
				n, err := QoSName(k)
				if err != nil {
					return qosErr("%s (%q).intents: %v", at, t.Name, err)
				}
				if _, dup := in[n]; dup {
					return qosErr("qos.tenants[%d] (%q): duplicate intent %q after normalization", i, t.Name, n)
				}
				in[n] = f
			}
			t.Intents = in
		}
	}
	return q.Validate()
}

// Validate checks names, counts and actions.
func (q *QoS) Validate() error {
	if q.Version != 1 {
		return qosErr("qos.version %d: only version 1 is accepted", q.Version)
	}
	if err := checkFields("qos.defaults", q.Defaults); err != nil {
		return err
	}
	seen := map[string]bool{}
	contracts := 1
	for i, t := range q.Tenants {
		at := fmt.Sprintf("qos.tenants[%d]", i)
		if err := checkQoSName(at+".name", t.Name); err != nil {
			return err
		}
		if seen[t.Name] {
			return qosErr("%s.name %q: duplicate tenant after normalization", at, t.Name)
		}
		seen[t.Name] = true
		if err := checkFields(at+".defaults", t.Defaults); err != nil {
			return err
		}
		contracts++
		for name, f := range t.Intents {
			if err := checkQoSName(at+".intents", name); err != nil {
				return err
			}
			if err := checkFields(fmt.Sprintf("%s.intents.%s", at, name), f); err != nil {
				return err
			}
			contracts++
		}
	}
	if contracts > MaxQoSContracts {
		return qosErr("%d contracts exceed the limit of %d", contracts, MaxQoSContracts)
	}
	return nil
}

func checkQoSName(at, n string) error {
	switch {
	case n == "":
		return qosErr("%s: empty name", at)
	}
	norm, err := QoSName(n)
	switch {
	case err != nil:
		return qosErr("%s: %v", at, err)
	case norm != n:
		return qosErr("%s %q: not normalized (trimmed, ASCII lowercase)", at, n)
	}
	return nil
}

// checkFields checks one layer: priorities in range (a programmatic
// config bypasses ParsePriority) and the actions.
func checkFields(at string, f QoSFields) error {
	for _, p := range []struct {
		name string
		v    *Priority
	}{{"priority", f.Priority}, {"max_priority", f.MaxPriority}} {
		if p.v != nil && *p.v > PriorityLow {
			return qosErr("%s.%s %d: want 0/1/2 or high/medium/low", at, p.name, *p.v)
		}
	}
	if f.AllowedDegradedActions == nil {
		return nil
	}
	for _, a := range *f.AllowedDegradedActions {
		switch {
		case a == ActionDelay || a == ActionReject:
		case unsupportedActions[a]:
			return qosErr("%s.allowed_degraded_actions: action %q is not supported (only delay and reject)", at, a)
		default:
			return qosErr("%s.allowed_degraded_actions: unknown action %q (want delay or reject)", at, a)
		}
	}
	return nil
}

// UsesDelay reports whether any contract layer allows delay.
func (q *QoS) UsesDelay() bool {
	if q == nil {
		return false
	}
	if q.Defaults.Delay() {
		return true
	}
	for _, t := range q.Tenants {
		if t.Defaults.Delay() {
			return true
		}
		for _, f := range t.Intents {
			if f.Delay() {
				return true
			}
		}
	}
	return false
}

// strictJSON decodes one JSON object: unknown and duplicate keys are
// errors that name the key.
func strictJSON(data []byte, v any) error {
	t := bytes.TrimSpace(data)
	if len(t) == 0 {
		return errors.New("want a JSON object, got an empty document")
	}
	if t[0] != '{' {
		// Never quote the bytes: the file may be one that is not meant to
		// be shown (a mistyped path to a secret).
		return fmt.Errorf("want a JSON object: the first non-blank byte, at offset %d, is not '{'", bytes.IndexFunc(data, func(r rune) bool { return !unicode.IsSpace(r) }))
	}
	err := json.Unmarshal(data, v, json.RejectUnknownMembers(true))
	if err == nil {
		return nil
	}
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		if errors.Is(syn.Err, jsontext.ErrDuplicateName) {
			return fmt.Errorf("%s: duplicate field %q", syn.JSONPointer.Parent(), syn.JSONPointer.LastToken())
		}
		return fmt.Errorf("invalid JSON at byte %d: %v", syn.ByteOffset, syn.Err)
	}
	var sem *json.SemanticError
	if errors.As(err, &sem) {
		if errors.Is(sem.Err, json.ErrUnknownName) {
			return fmt.Errorf("%s: unknown field %q", sem.JSONPointer.Parent(), sem.JSONPointer.LastToken())
		}
		if sem.Err != nil {
			return fmt.Errorf("%s: %v", sem.JSONPointer, sem.Err)
		}
		return fmt.Errorf("%s: JSON %s cannot be a %v", sem.JSONPointer, sem.JSONKind, sem.GoType)
	}
	return err
}

// readLimited reads at most max bytes of path and refuses a longer file.
func readLimited(path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, fmt.Errorf("%s: larger than the %d byte limit", path, max)
	}
	return b, nil
}
