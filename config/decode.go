// decode.go owns reading TOML text onto a Daemon key by key, so that one
// bad file yields every problem in it at once: each unknown key and each
// value that does not decode, not only the first.
//
// Invariants:
//   - A key that fails to decode leaves its field as it was (the default),
//     so Validate can still run on the rest and report its own problems.
//   - Only a syntax error stops decoding early: past it nothing is known.
//   - Problems are sorted by key, so the message is the same every run.

package config

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

var tomlUnmarshaler = reflect.TypeFor[toml.Unmarshaler]()

// decode sets the fields of d named by the keys in text. It returns the
// problems found (unknown keys, values of the wrong type or grammar),
// each prefixed "config NAME:", or a single error when text does not
// parse at all.
func decode(text, name string, d *Daemon) ([]string, error) {
	var top map[string]toml.Primitive
	md, err := toml.Decode(text, &top)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", name, err)
	}
	var p []string
	decodeTable(&md, top, reflect.ValueOf(d).Elem(), nil, &p)
	sort.Strings(p)
	for i := range p {
		p[i] = "config " + name + ": " + p[i]
	}
	return p, nil
}

// decodeTable decodes each key of tab into the field of v (a struct) whose
// toml tag names it, recursing into sub-tables.
func decodeTable(md *toml.MetaData, tab map[string]toml.Primitive, v reflect.Value, keys []string, p *[]string) {
	fields := tomlFields(v.Type())
	for key, prim := range tab {
		at := append(keys[:len(keys):len(keys)], key)
		path := strings.Join(at, ".")
		i, ok := fields[key]
		if !ok {
			*p = append(*p, fmt.Sprintf("%s: unknown key", path))
			continue
		}
		f := v.Field(i)
		if f.Kind() == reflect.Struct && !reflect.PointerTo(f.Type()).Implements(tomlUnmarshaler) {
			// A table defined only by its sub-tables ([engine.runtime_queue]
			// and no [engine]) is implicit: md.Type says "" for it, but it
			// decodes as a table all the same.
			var sub map[string]toml.Primitive
			if typ := md.Type(at...); (typ != "Hash" && typ != "") || md.PrimitiveDecode(prim, &sub) != nil {
				*p = append(*p, fmt.Sprintf("%s: want a table [%s]", path, path))
				continue
			}
			decodeTable(md, sub, f, at, p)
			continue
		}
		// Decode into a copy, so a failed key keeps its previous value.
		tmp := reflect.New(f.Type())
		tmp.Elem().Set(f)
		if err := md.PrimitiveDecode(prim, tmp.Interface()); err != nil {
			*p = append(*p, path+cleanTOMLError(err))
			continue
		}
		f.Set(tmp.Elem())
	}
}

// tomlFields maps toml tag names to field indexes; "-" and untagged
// fields are not keys.
func tomlFields(t reflect.Type) map[string]int {
	m := make(map[string]int, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ",")
		if tag != "" && tag != "-" {
			m[tag] = i
		}
	}
	return m
}

// tomlPosition is the library's preamble on a value error: it names the
// line (worth keeping) and the key (already said).
var tomlPosition = regexp.MustCompile(`^(?:toml: )?line (\d+) \(last key "[^"]*"\): `)

// cleanTOMLError renders a value error as " (line N): detail", to follow
// the key it belongs to.
func cleanTOMLError(err error) string {
	s := err.Error()
	if m := tomlPosition.FindStringSubmatch(s); m != nil {
		return " (line " + m[1] + "): " + s[len(m[0]):]
	}
	return ": " + strings.TrimPrefix(s, "toml: ")
}
