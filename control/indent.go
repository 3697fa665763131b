// indent.go owns the indentation of the mount's JSON files. encoding/json's
// MarshalIndent marshals compactly and then re-scans the result through
// its validating state machine, one indirect call per byte; for a batch's
// status that second pass took 60 % of the rendering and the rendering
// about a tenth of a one-file transaction's daemon time
// (docs/performance.md, control plane). json.Marshal's output is already
// valid and compact, so indenting it needs only to know whether a byte is
// inside a string.
//
// Invariants:
//   - indentCompact(src) equals what json.Indent(src, "", "  ") writes for
//     any compact JSON src (indent_test.go checks it against json.Indent):
//     "{}" and "[]" stay on one line, ": " after keys, two spaces a level.

package control

// indentCompact appends the two-space indented form of src, which must be
// compact JSON (json.Marshal's output), to dst.
func indentCompact(dst, src []byte) []byte {
	depth := 0
	inStr, esc, open := false, false, false
	for _, c := range src {
		if inStr {
			dst = append(dst, c)
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		// An opened object or array gets its newline only once it turns
		// out not to be empty.
		if open && c != '}' && c != ']' {
			open = false
			depth++
			dst = newline(dst, depth)
		}
		switch c {
		case '"':
			inStr = true
			dst = append(dst, c)
		case '{', '[':
			open = true
			dst = append(dst, c)
		case ',':
			dst = append(dst, c)
			dst = newline(dst, depth)
		case ':':
			dst = append(dst, ':', ' ')
		case '}', ']':
			if open {
				open = false
			} else {
				depth--
				dst = newline(dst, depth)
			}
			dst = append(dst, c)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

func newline(dst []byte, depth int) []byte {
	dst = append(dst, '\n')
	for range depth {
		dst = append(dst, ' ', ' ')
	}
	return dst
}
