// strict.go owns strict JSON decoding of control documents: one object,
// no unknown field, nothing after it, at most max bytes.

package control

import (
	"bytes"
	"encoding/json"
	"strings"
)

// decodeStrict decodes data into v. Every failure is KindInvalid except
// size (KindTooLarge), and names the offending field, byte or value.
func decodeStrict(data []byte, max int, v any) error {
	if max > 0 && len(data) > max {
		return tooLarge("document of %d bytes exceeds mount.max_document_bytes (%d)", len(data), max)
	}
	t := bytes.TrimSpace(data)
	if len(t) == 0 {
		return invalid("empty document: want a JSON object")
	}
	if t[0] != '{' {
		return invalid("want a JSON object starting with '{', got %.20q", t)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if s := err.Error(); strings.HasPrefix(s, "json: unknown field ") {
			return invalid("unknown field %s", strings.TrimPrefix(s, "json: unknown field "))
		}
		return jsonError(err)
	}
	if rest := bytes.TrimSpace(data[dec.InputOffset():]); len(rest) > 0 {
		return invalid("trailing data after the JSON document at byte %d: %.20q", dec.InputOffset(), rest)
	}
	return nil
}
