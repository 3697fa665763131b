// strict.go owns strict JSON decoding of control documents. Every JSON
// document the mount accepts (submissions, memory/register,
// segments/open, and any document added later) is decoded by decodeStrict
// and nothing else, so the rules hold everywhere:
//
//   - one JSON object, nothing after it, at most max bytes;
//   - keys match the schema exactly: a key differing only in case ("OP"
//     for "op") is an unknown key, never an alias;
//   - a key given twice, at any depth, is an error (never "last wins");
//   - no unknown key, and strings are valid UTF-8.
//
// The decoder is github.com/go-json-experiment/json (the json v2
// semantics: case-sensitive names, duplicate names rejected, invalid
// UTF-8 rejected) with RejectUnknownMembers; encoding/json (v1) matches
// keys case-insensitively and lets the last duplicate win, and checking
// that by hand would mean a second JSON parser.

package control

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// decodeStrict decodes data into v. Every failure is KindInvalid except
// size (KindTooLarge), and names the offending key, byte or value.
func decodeStrict(data []byte, max int, v any) error {
	if max > 0 && len(data) > max {
		return tooLarge("document of %d bytes exceeds mount.max_document_bytes (%d)", len(data), max)
	}
	t := bytes.TrimSpace(data)
	if len(t) == 0 {
		return invalid("empty document: want a JSON object")
	}
	if t[0] != '{' {
		return invalid("want a JSON object starting with '{', got %s", quotePrefix(t, 20))
	}
	// Unmarshal itself refuses anything but whitespace after the value.
	err := json.Unmarshal(data, v, json.RejectUnknownMembers(true))
	if err == nil {
		return nil
	}
	return strictError(err)
}

// strictError turns a decoder error into KindInvalid naming the key (as
// a JSON pointer such as /requests/0/length) or the byte offset.
func strictError(err error) error {
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		if errors.Is(syn.Err, jsontext.ErrDuplicateName) {
			return invalid("duplicate key %q%s: each key may appear once", syn.JSONPointer.LastToken(), within(syn.JSONPointer.Parent()))
		}
		if errors.Is(syn.Err, io.ErrUnexpectedEOF) {
			return invalid("incomplete JSON document: it ends at byte %d", syn.ByteOffset)
		}
		msg := strings.TrimPrefix(syn.Err.Error(), "jsontext: ")
		if strings.Contains(syn.Error(), "after top-level value") {
			return invalid("trailing data after the JSON document at byte %d", syn.ByteOffset)
		}
		return invalid("invalid JSON at byte %d%s: %s", syn.ByteOffset, within(syn.JSONPointer), msg)
	}
	var sem *json.SemanticError
	if errors.As(err, &sem) {
		ptr := sem.JSONPointer
		if errors.Is(sem.Err, json.ErrUnknownName) {
			key := ptr.LastToken()
			hint := ""
			if strings.ToLower(key) != key {
				hint = " (keys are lowercase and case-sensitive)"
			}
			return invalid("unknown field %q%s%s", key, within(ptr.Parent()), hint)
		}
		field := strings.TrimPrefix(string(ptr), "/")
		if field == "" {
			field = "document"
		}
		if sem.Err != nil {
			// A custom decoder (size, duration, address) said why.
			return invalid("%s: %v", field, sem.Err)
		}
		return invalid("%s: JSON %s cannot be a %v", field, sem.JSONKind, sem.GoType)
	}
	return invalid("%v", err)
}

// within renders " in /requests/0" for a non-root parent pointer.
func within(parent jsontext.Pointer) string {
	if parent == "" {
		return ""
	}
	return fmt.Sprintf(" in %s", parent)
}
