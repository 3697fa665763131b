package control

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/orbitefs/orbitefs/engine"
)

// FuzzParseSubmission checks that the parser never panics, that every
// failure has a kind the errno table maps (invalid or too large), and
// that an accepted submission survives a marshal/parse round trip.
func FuzzParseSubmission(f *testing.F) {
	for _, seed := range []string{
		`{"op":"read","target":"cache","requests":[{"memory":"buf","offset":0,"target_offset":0,"length":1048576}]}`,
		`{"op":"write","target":"c","timeout":"5s","requests":[{"address":139872394444800,"target_offset":4096,"length":4096,"transport":"io_uring"}]}`,
		`{"op":"read","target":"c","requests":[{"target_offset":0,"elements":[{"memory":"b","offset":0,"length":4096},{"padding":512},{"address":"0x7f3a00002000","length":"4KiB"}]}]}`,
		`{"op":"read","target":"c","requests":[{"memory":"b","length":"1MiB","transport":"gds"}]}`,
		`{"op":"read","target":"c","requests":[]}`,
		`{"op":"read","target":"c","requests":[{"memory":"b","length":1}],"x":1}`,
		`{"op":"read"} {}`,
		`{"op":"read","target":"c","requests":[{"memory":"b","length":1,"elements":[]}]}`,
		`{"op":`,
		`[]`,
		``,
		`{"op":"read","target":"\u0000","requests":[{"memory":"b","length":-1}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSubmission(data, 1<<20)
		if err != nil {
			if s != nil {
				t.Fatalf("result and error: %+v, %v", s, err)
			}
			if k := engine.KindOf(err); k != engine.KindInvalid && k != engine.KindTooLarge {
				t.Fatalf("error kind %v for %q: %v", k, data, err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("accepted submission fails Validate: %v", err)
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		s2, err := ParseSubmission(b, 0)
		if err != nil {
			t.Fatalf("round trip of %q: %s does not parse: %v", data, b, err)
		}
		if !reflect.DeepEqual(s, s2) {
			t.Fatalf("round trip changed the submission:\n%+v\n%+v", s, s2)
		}
	})
}
