package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// v1Verdict is what re-decoding the prefix with encoding/json said (the
// scanner replaced that): "" for a valid or merely incomplete prefix,
// else the error text the mount reported.
func v1Verdict(b []byte) string {
	var raw json.RawMessage
	err := json.NewDecoder(bytes.NewReader(b)).Decode(&raw)
	var se *json.SyntaxError
	switch {
	case err == nil, errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return ""
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, err)
	}
	return err.Error()
}

// scanAll feeds b to a fresh scanner in chunks of size n and returns the
// error text ("" for none), whether the value ended, and where.
func scanAll(b []byte, n int) (msg string, done bool, end int) {
	var s jsonScanner
	s.reset()
	for i := 0; i < len(b); i += n {
		chunk := b[i:min(i+n, len(b))]
		k, err := s.feed(chunk)
		if err != nil {
			return strings.TrimPrefix(err.Error(), "invalid argument: "), false, 0
		}
		if s.done {
			return "", true, i + k
		}
	}
	return "", false, 0
}

var scanCases = []string{
	`{}`, ` {"a":1}`, `{"a":[1,2.5,-3e+7,0,-0.1E-2,true,false,null,{"b":"c\"\\\/\b\f\n\r\t\u00e9"}]}`,
	`{"a":[]}`, `{"a":{}}`, `{"a" :  [ 1 , 2 ] , "b" : { } }`,
	`{"op" "read"}`, `{"op":}`, `{"op":"read",}`, `{,}`, `{"a":1,}`, `{"a":[1,]}`, `{"a":[1 2]}`,
	`{"a":tru}`, `{"a":trux}`, `{"a":nul}`, `{"a":nulL}`, `{"a":fals}`, `{"a":falsy}`,
	`{"a":01}`, `{"a":-}`, `{"a":-x}`, `{"a":1.}`, `{"a":1.x}`, `{"a":1e}`, `{"a":1e+}`, `{"a":1ex}`,
	`{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"\u12g4"}`, "{\"a\":\"\x01\"}", `{"a":'x'}`, `{'a':1}`,
	`{"a":1}}`, `{"a":]}`, `{"a":[}`, `{"a":1]`, `{"a"`, `{"a":`, `{"a":"`, `{"a":"\`, `{"a":1`,
	`{"a":"é\u2028"}`, "{\"a\":\"\xff\"}", `{"a":+1}`, `{"a":.5}`, `{"a":Infinity}`, `{"a":NaN}`,
	`{"a":1} x`, "{\"a\":1}\n",
}

// TestJSONScannerMatchesDecoder checks the scanner against encoding/json,
// whose re-decoding it replaced: same verdict and same error text for
// every prefix, whatever the chunk size.
func TestJSONScannerMatchesDecoder(t *testing.T) {
	for _, c := range scanCases {
		checkScan(t, []byte(c))
	}
}

func checkScan(t *testing.T, b []byte) {
	t.Helper()
	for _, n := range []int{1, 2, 3, 7, len(b) + 1} {
		msg, done, end := scanAll(b, n)
		// The first prefix encoding/json refuses, if any.
		want, wantEnd := "", 0
		for i := 1; i <= len(b); i++ {
			if v := v1Verdict(b[:i]); v != "" {
				want = v
				break
			}
			if wantEnd == 0 && json.Valid(b[:i]) {
				wantEnd = i
				break
			}
		}
		if msg != want {
			t.Errorf("%q in %d-byte chunks: error %q, want %q", b, n, msg, want)
		}
		if want == "" && (done != (wantEnd > 0) || end != wantEnd) {
			t.Errorf("%q in %d-byte chunks: done %v at %d, want end %d", b, n, done, end, wantEnd)
		}
	}
}

func FuzzJSONScanner(f *testing.F) {
	for _, c := range scanCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tr := bytes.TrimLeft(b, " \t\r\n")
		if len(b) > 512 || len(tr) == 0 || tr[0] != '{' && tr[0] != '[' {
			return // documents are objects; a scalar needs a delimiter to end
		}
		checkScan(t, b)
	})
}

func TestJSONScannerDepth(t *testing.T) {
	b := []byte(`{"a":` + strings.Repeat("[", maxJSONDepth))
	msg, _, _ := scanAll(b, len(b))
	if !strings.Contains(msg, "exceeded max depth") {
		t.Fatalf("depth %d: %q", maxJSONDepth+1, msg)
	}
	b = []byte(`{"a":` + strings.Repeat("[", maxJSONDepth-2) + strings.Repeat("]", maxJSONDepth-2) + "}")
	if msg, done, _ := scanAll(b, 1); msg != "" || !done {
		t.Fatalf("depth %d: %q done %v", maxJSONDepth-1, msg, done)
	}
}
