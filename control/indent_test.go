package control

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// randomValue builds a nested value of the shapes the mount renders, with
// strings full of the bytes an indenter could mistake for structure.
func randomValue(r *rand.Rand, depth int) any {
	pieces := []string{`"`, `\`, `\"`, `{`, `}`, `[`, `]`, `,`, `:`, ` `, "\n", "\t", "<&>", "é", "\u2028", "\x01", "ab"}
	switch k := r.IntN(7); {
	case depth > 3 || k == 0:
		var b strings.Builder
		for range r.IntN(6) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		return b.String()
	case k == 1:
		return r.Float64() * 1e6
	case k == 2:
		return nil
	case k == 3:
		return r.IntN(2) == 0
	case k == 4:
		s := make([]any, r.IntN(4))
		for i := range s {
			s[i] = randomValue(r, depth+1)
		}
		return s
	default:
		m := map[string]any{}
		for range r.IntN(4) {
			m[randomValue(r, 99).(string)] = randomValue(r, depth+1)
		}
		return m
	}
}

func TestIndentCompactMatchesJSONIndent(t *testing.T) {
	check := func(v any) {
		t.Helper()
		want, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if got := marshal(v); !bytes.Equal(got, append(want, '\n')) {
			t.Fatalf("for %#v:\ngot  %q\nwant %q", v, got, want)
		}
	}
	for _, v := range []any{
		map[string]any{}, []any{}, []any{[]any{}, map[string]any{}}, "", `\"`, nil, 0,
		map[string]any{"a": []any{map[string]any{"b": []any{}}}, "c": `x"}{][,:`},
		sampleStatus(),
	} {
		check(v)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		check(randomValue(r, 0))
	}
}

func sampleStatus() StatusJSON {
	return RenderStatus(BatchSnapshot{ID: 3, State: 2, Sealed: true, Capacity: 4})
}

func BenchmarkMarshalStatus(b *testing.B) {
	v := sampleStatus()
	b.ReportAllocs()
	for b.Loop() {
		marshal(v)
	}
}
