package config

// doc_test.go holds docs/config.md to the code: its key list and
// defaults to default.toml and to the keys the decoder accepts (every
// section), and its bounds column to what Load validates: every bound
// written as numbers is tried at its edges (the bound itself is
// accepted, one step past it refused, naming the key).

import (
	"fmt"
	"math"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// docRow is one key's row of docs/config.md.
type docRow struct{ key, def, bounds string }

func configDocRows(t *testing.T) []docRow {
	t.Helper()
	b, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []docRow
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		c := strings.Split(line, "|")
		if len(c) < 5 {
			t.Fatalf("docs/config.md row %q: want key | default | bounds | meaning", line)
		}
		rows = append(rows, docRow{strings.Trim(strings.TrimSpace(c[1]), "`"), strings.Trim(strings.TrimSpace(c[2]), "`"), strings.TrimSpace(c[3])})
	}
	return rows
}

// docKind is how a key's values are written in TOML, from its default.
type docKind int

const (
	kindOther docKind = iota
	kindInt
	kindFloat
	kindSize
	kindDuration
	kindString
)

func kindOf(def string) docKind {
	if def == `""` {
		return kindString
	}
	if strings.HasPrefix(def, `"`) {
		s := strings.Trim(def, `"`)
		if _, err := ParseSize(s); err == nil {
			return kindSize
		}
		if _, err := ParseDuration(s); err == nil {
			return kindDuration
		}
		return kindOther
	}
	if _, err := strconv.Atoi(def); err == nil {
		return kindInt
	}
	if _, err := strconv.ParseFloat(def, 64); err == nil {
		return kindFloat
	}
	return kindOther
}

// docNumber reads one bound as the doc writes it: 4096, 2^30, 64 bytes,
// 4 KiB, 1 GiB (sizes) or 1s, 200us (durations), as a count of bytes or
// nanoseconds.
func docNumber(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	if b, e, ok := strings.Cut(s, "^"); ok {
		bf, err1 := strconv.ParseFloat(b, 64)
		ef, err2 := strconv.ParseFloat(e, 64)
		return math.Pow(bf, ef), err1 == nil && err2 == nil
	}
	if n, ok := strings.CutSuffix(s, " bytes"); ok {
		s = n
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return f, true
	}
	if n, err := ParseSize(strings.ReplaceAll(s, " ", "")); err == nil {
		return float64(n), true
	}
	if d, err := time.ParseDuration(s); err == nil {
		return float64(d), true
	}
	return 0, false
}

// tomlValue writes v (bytes, nanoseconds or a number) for a key of kind k.
func tomlValue(k docKind, v float64) string {
	switch k {
	case kindDuration:
		return strconv.Quote(time.Duration(v).String())
	case kindFloat:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return strconv.FormatUint(uint64(v), 10)
}

// edge is one value to try and whether the doc says it is accepted.
type edge struct {
	value  string
	accept bool
}

var (
	rangeRe   = regexp.MustCompile(`^\[?([^,\[\]]+?)(?:,| to) ([^,;\]]+?)\]?(?: \([^)]*\))?(?:([,;]) .*)?$`)
	lowerRe   = regexp.MustCompile("^(>=?) (`[^`]+`|[0-9][^ ]*)(?: and <= ([0-9][^ ]*))?(?: \\([^)]*\\))?$")
	offOrMore = regexp.MustCompile(`^0 \(off\) or >= ([0-9][^ ]*)$`)
	atMost    = regexp.MustCompile(`^at most ([0-9]+) bytes$`)
)

// edges turns one row's bounds into the values to try at its edges.
// Where the cell also names other keys or conditions (", >= `x`",
// "; count x size ..."), accepting a bound depends on them and only the
// refusals past it are tried.
func edges(r docRow) ([]edge, bool) {
	k := kindOf(r.def)
	if k == kindOther || r.bounds == "" {
		return nil, false
	}
	if k == kindString {
		m := atMost.FindStringSubmatch(r.bounds)
		if m == nil {
			return nil, false
		}
		n, _ := strconv.Atoi(m[1])
		return []edge{{strconv.Quote(strings.Repeat("x", n)), true}, {strconv.Quote(strings.Repeat("x", n+1)), false}}, true
	}
	step := 1.0
	if k == kindFloat {
		step = 1e-9
	}
	var out []edge
	lowEdge := func(lo float64, incl, alone bool) {
		if incl {
			if alone {
				out = append(out, edge{tomlValue(k, lo), true})
			}
			if lo-step >= 0 || k == kindFloat {
				out = append(out, edge{tomlValue(k, lo-step), false})
			}
			return
		}
		out = append(out, edge{tomlValue(k, lo), false})
		if alone {
			out = append(out, edge{tomlValue(k, lo+step), true})
		}
	}
	bounds, finite := strings.CutPrefix(r.bounds, "finite, ")
	if finite {
		out = append(out, edge{"inf", false})
	}
	if m := offOrMore.FindStringSubmatch(bounds); m != nil {
		lo, ok := docNumber(m[1])
		if !ok {
			return nil, false
		}
		out = append(out, edge{tomlValue(k, 0), true})
		lowEdge(lo, true, true)
		return out, true
	}
	if m := lowerRe.FindStringSubmatch(bounds); m != nil {
		if strings.HasPrefix(m[2], "`") {
			return nil, false
		}
		lo, ok := docNumber(m[2])
		if !ok {
			return nil, false
		}
		lowEdge(lo, m[1] == ">=", true)
		if m[3] != "" {
			hi, ok := docNumber(m[3])
			if !ok {
				return nil, false
			}
			out = append(out, edge{tomlValue(k, hi), true}, edge{tomlValue(k, hi+step), false})
		}
		if k == kindFloat {
			out = append(out, edge{"nan", false})
		}
		return out, true
	}
	if m := rangeRe.FindStringSubmatch(r.bounds); m != nil {
		alone := m[3] == "" && !strings.Contains(r.bounds, "`")
		lo, okLo := docNumber(m[1])
		hi, okHi := docNumber(m[2])
		if !okLo && !okHi {
			return nil, false
		}
		if okLo {
			lowEdge(lo, true, alone)
		}
		if okHi {
			if alone {
				out = append(out, edge{tomlValue(k, hi), true})
			}
			out = append(out, edge{tomlValue(k, hi+step), false})
		}
		return out, len(out) > 0
	}
	return nil, false
}

// TestConfigDocBounds tries every numeric bound of docs/config.md
// against Load: the documented edge is accepted, one step past it is
// refused with an error that names the key.
func TestConfigDocBounds(t *testing.T) {
	checked := 0
	for _, r := range configDocRows(t) {
		es, ok := edges(r)
		if !ok {
			continue
		}
		checked++
		i := strings.LastIndex(r.key, ".")
		section, name := r.key[:i], r.key[i+1:]
		names := regexp.MustCompile(`(^|: )` + regexp.QuoteMeta(r.key) + `[ (]`)
		for _, e := range es {
			text := fmt.Sprintf("[%s]\n%s = %s\n", section, name, e.value)
			_, err := Parse(text)
			named := err != nil && names.MatchString(err.Error())
			shown := e.value
			if len(shown) > 40 {
				shown = fmt.Sprintf("%s... (%d bytes)", shown[:20], len(shown))
			}
			switch {
			case e.accept && named:
				t.Errorf("docs/config.md gives %s the bounds %q, but %s = %s is refused: %v", r.key, r.bounds, r.key, shown, err)
			case !e.accept && !named:
				t.Errorf("docs/config.md gives %s the bounds %q, but %s = %s is not refused for it (error: %v)", r.key, r.bounds, r.key, shown, err)
			}
		}
	}
	if checked < 35 {
		t.Errorf("checked the bounds of only %d keys of docs/config.md; is the table still | key | default | bounds | meaning |?", checked)
	}
	t.Logf("checked the bounds of %d keys", checked)
}

// TestConfigDocQoSDefaults: the QoS field table gives max_priority's
// default as the code has it.
func TestConfigDocQoSDefaults(t *testing.T) {
	b, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?m)^\\| max_priority \\|.*\\(default `([a-z]+)`\\) \\|$").FindStringSubmatch(string(b))
	if m == nil {
		t.Fatal("docs/config.md's QoS field table has no max_priority row giving its default")
	}
	if m[1] != DefaultMaxPriority.String() {
		t.Errorf("docs/config.md gives max_priority the default %s; the code's is %s", m[1], DefaultMaxPriority)
	}
}

// decoderKeys lists every dotted key the decoder accepts for a value of
// type t (the toml tags, tables recursed into), prefixed by pre.
func decoderKeys(t reflect.Type, pre string) []string {
	var keys []string
	for name, i := range tomlFields(t) {
		f := t.Field(i).Type
		if f.Kind() == reflect.Struct && !reflect.PointerTo(f).Implements(tomlUnmarshaler) {
			keys = append(keys, decoderKeys(f, pre+name+".")...)
			continue
		}
		keys = append(keys, pre+name)
	}
	return keys
}

// defaultTOMLKeys reads default.toml line by line: each key with the
// text of its default, as written.
func defaultTOMLKeys(t *testing.T) map[string]string {
	t.Helper()
	keys := map[string]string{}
	section := ""
	for _, line := range strings.Split(DefaultTOML(), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("default.toml line %q: want key = value on one line", line)
			}
			key := section + "." + strings.TrimSpace(k)
			if _, dup := keys[key]; dup {
				t.Fatalf("default.toml sets %s twice", key)
			}
			keys[key] = strings.TrimSpace(v)
		}
	}
	return keys
}

// TestConfigDocCoversEveryKey holds three lists to one another: the keys
// the decoder accepts, the keys default.toml sets, and the rows of
// docs/config.md. A key the decoder accepts but default.toml does not
// list, a row missing or giving another default, and a row for a key
// that does not exist all fail, in every section.
func TestConfigDocCoversEveryKey(t *testing.T) {
	toml := defaultTOMLKeys(t)
	code := decoderKeys(reflect.TypeFor[Daemon](), "")
	sort.Strings(code)
	sections := map[string]bool{}
	for _, k := range code {
		sections[k[:strings.Index(k, ".")]] = true
		if _, ok := toml[k]; !ok {
			t.Errorf("the decoder accepts %s, but default.toml does not list it with its default", k)
		}
	}
	for k := range toml {
		if i := sort.SearchStrings(code, k); i == len(code) || code[i] != k {
			t.Errorf("default.toml sets %s, which the decoder does not accept", k)
		}
	}
	for _, s := range []string{"mount", "engine", "peer", "cluster"} {
		if !sections[s] {
			t.Errorf("found no key of [%s] in the decoder", s)
		}
	}
	rows := map[string]docRow{}
	for _, r := range configDocRows(t) {
		if _, dup := rows[r.key]; dup {
			t.Errorf("docs/config.md documents %s twice", r.key)
		}
		rows[r.key] = r
	}
	for k, def := range toml {
		r, ok := rows[k]
		switch {
		case !ok:
			t.Errorf("docs/config.md has no row for %s (default %s)", k, def)
		case r.def != def:
			t.Errorf("docs/config.md gives %s the default %s; default.toml has %s", k, r.def, def)
		}
	}
	for k := range rows {
		if _, ok := toml[k]; !ok {
			t.Errorf("docs/config.md documents %s, which is not a key", k)
		}
	}
	if len(code) < 100 {
		t.Errorf("found only %d keys in the decoder", len(code))
	}
}
