// size.go owns the two scalar value types shared by the TOML daemon config
// and the JSON control documents: byte sizes and durations.
//
// A size is a bare integer (bytes) or a string with a unit, so that
// "bytes": 1048576 and "bytes": "1MiB" mean the same thing everywhere: in
// mount documents, the TOML config and bench flags, all through ParseSize.
// KB/MB/GB/TB multiply by 1024, as the QoS contract format does:
// there is no decimal unit, so a value never silently means two things.
//
// A duration is a Go duration string ("250ms", "5s"). JSON documents also
// take integer nanoseconds (the spec's wire form); the TOML config does
// not, because `default_timeout = 5` reads as 5 seconds to a person and
// would be 5 ns.

package config

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Size is a byte count. Its zero value is zero bytes.
type Size uint64

// sizeUnits is the whole unit grammar, matched case-sensitively. KB..TB
// are the spec's QoS spellings and mean the same 1024 multiples as
// KiB..TiB. Lowercase and one-letter forms ("1m", "4k", "1kb") are
// refused rather than guessed: "m" could be mega, mebi or milli.
var sizeUnits = []struct {
	suffix string
	shift  uint
}{
	// Longest suffixes first so "KiB" is not read as "B".
	{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40},
	{"KB", 10}, {"MB", 20}, {"GB", 30}, {"TB", 40},
	{"B", 0},
}

// sizeGrammar says what ParseSize accepts, for error messages.
const sizeGrammar = "want digits with an optional unit B, KiB, MiB, GiB, TiB, KB, MB, GB or TB (1024 multiples), no space"

// ParseSize reads "4096", "64KiB", "2GB" (binary multiples): digits and
// an optional unit from sizeUnits, nothing else. It rejects signs,
// fractions, spaces, lowercase or unknown units and overflow, and names
// the offending text in the error.
func ParseSize(s string) (Size, error) {
	if s == "" {
		return 0, fmt.Errorf("size %q: empty", s)
	}
	t, shift := s, uint(0)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, shift = strings.TrimSuffix(t, u.suffix), u.shift
			break
		}
	}
	if t == "" || strings.TrimLeft(t, "0123456789") != "" {
		return 0, fmt.Errorf("size %q: %s", s, sizeGrammar)
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil || (shift > 0 && n > math.MaxUint64>>shift) {
		return 0, fmt.Errorf("size %q: overflows 64 bits", s)
	}
	return Size(n << shift), nil
}

// String renders the largest exact binary unit: 1048576 -> "1MiB".
func (s Size) String() string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := uint64(s), 0
	for v != 0 && v%1024 == 0 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return strconv.FormatUint(v, 10) + units[i]
}

// UnmarshalText accepts the ParseSize grammar.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalText renders String, so round trips are exact.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalJSON accepts a nonnegative integer or a size string.
func (s *Size) UnmarshalJSON(b []byte) error {
	// Plain digits (every length in a submission) skip the reflection of
	// json.Unmarshal: the caller's decoder has already checked the JSON.
	if v, ok := plainUint(b); ok {
		*s = Size(v)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err == nil {
		v, err := strconv.ParseUint(n.String(), 10, 64)
		if err != nil {
			return fmt.Errorf("size %s: want a nonnegative integer or a string like \"64MiB\"", n)
		}
		*s = Size(v)
		return nil
	}
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return fmt.Errorf("size %s: want a nonnegative integer or a string like \"64MiB\"", b)
	}
	return s.UnmarshalText([]byte(str))
}

// plainUint parses b when it is 1 to 19 ASCII digits (no overflow).
func plainUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, true
}

// UnmarshalTOML accepts a TOML integer or string (BurntSushi/toml's hook).
func (s *Size) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return fmt.Errorf("size %d: must not be negative", x)
		}
		*s = Size(x)
		return nil
	case string:
		return s.UnmarshalText([]byte(x))
	}
	return fmt.Errorf("size %v: want an integer or a string like \"64MiB\"", v)
}

// Duration is a time.Duration that reads "250ms", "5s" or an integer
// count of nanoseconds.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// ParseDuration reads Go duration syntax ("250ms", "1m30s"); negative
// values are rejected.
func ParseDuration(s string) (Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("duration %q: want a value like \"250ms\" or \"5s\"", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("duration %q: must not be negative", s)
	}
	return Duration(v), nil
}

// UnmarshalText accepts the ParseDuration grammar.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalText renders Go duration syntax.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalJSON accepts a duration string or an integer of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var n json.Number
	if err := json.Unmarshal(b, &n); err == nil {
		v, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil || v < 0 {
			return fmt.Errorf("duration %s: want a string like \"5s\" or nonnegative nanoseconds", n)
		}
		*d = Duration(v)
		return nil
	}
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return fmt.Errorf("duration %s: want a string like \"5s\" or nonnegative nanoseconds", b)
	}
	return d.UnmarshalText([]byte(str))
}

// UnmarshalTOML accepts a TOML string in ParseDuration's grammar only: a
// bare number has no unit, so it is refused instead of read as nanoseconds.
func (d *Duration) UnmarshalTOML(v any) error {
	if x, ok := v.(string); ok {
		return d.UnmarshalText([]byte(x))
	}
	return fmt.Errorf("duration %v: want a duration like 5s, written as a quoted string with a unit (\"5s\", \"250ms\")", v)
}
