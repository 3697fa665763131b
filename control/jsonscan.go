// jsonscan.go owns the resumable JSON syntax scanner that checks a
// document while it arrives in write(2) chunks. Each byte is examined
// exactly once, whatever the chunking: the scanner's whole state is a
// step function and a stack of open containers, kept between writes, so
// a document sent one byte per write costs the same as one sent whole.
// The standard library's scanner (encoding/json) is not exported, and
// re-decoding the prefix on each write made 1-byte writes quadratic.
//
// It checks syntax only (RFC 8259 grammar, as encoding/json does: bytes
// of strings are not checked for valid UTF-8); keys, types and values
// are the strict decoder's business once the document is complete.
// Its error texts are encoding/json's ("invalid character 'x' after
// object key"), with the same 1-based byte offset, so a malformed prefix
// reads the same as it did when it was found by re-decoding.
//
// Invariants:
//   - pos is the number of bytes fed since the last reset; an error or
//     the end of the top-level value stops the scan (step is nil).
//   - len(stack) <= maxJSONDepth: the stack is bounded by the nesting
//     limit the decoder applies, not by the document size.

package control

import (
	"fmt"
	"strconv"
)

// maxJSONDepth is the deepest nesting accepted (the decoders' limit).
const maxJSONDepth = 10000

// Container kinds on the scanner's stack.
const (
	inObjectKey   byte = iota // inside an object, before a key's ':'
	inObjectValue             // inside an object, after a key's ':'
	inArray
)

// jsonScanner is the state of a syntax check in progress; reset it
// before use. The top-level value is expected to be an object or an
// array (a document is an object): a top-level number has no delimiter
// to end it.
type jsonScanner struct {
	step  func(*jsonScanner, byte) error
	stack []byte
	pos   int64  // bytes fed so far
	steps int64  // bytes examined since the scanner was made (never reset)
	done  bool   // the top-level value ended at byte pos
	word  string // the literal being matched (true, false, null)
	n     int    // bytes of word matched; hex digits left in a \u escape
}

// reset prepares the scanner for a new top-level value.
func (s *jsonScanner) reset() {
	s.step, s.stack, s.pos, s.done, s.word, s.n = stepBeginValue, s.stack[:0], 0, false, "", 0
}

// feed scans p and returns how many bytes of it belong to the value:
// len(p) while the value is still open, fewer when it ended inside p
// (done is then set). A syntax error stops the scan.
func (s *jsonScanner) feed(p []byte) (int, error) {
	if s.step == nil && !s.done {
		s.step = stepBeginValue
	}
	for i, c := range p {
		if s.done {
			return i, nil
		}
		s.pos++
		s.steps++
		if err := s.step(s, c); err != nil {
			s.step = nil
			return i, err
		}
	}
	return len(p), nil
}

// syntaxErr reports c as unexpected in context, at the byte just fed.
func (s *jsonScanner) syntaxErr(c byte, context string) error {
	return invalid("invalid JSON at byte %d: invalid character %s %s", s.pos, quoteChar(c), context)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func stepBeginValue(s *jsonScanner, c byte) error {
	if isSpace(c) {
		return nil
	}
	switch c {
	case '{':
		s.step = stepBeginKeyOrEmpty
		return s.push(inObjectKey)
	case '[':
		s.step = stepBeginValueOrEmpty
		return s.push(inArray)
	case '"':
		s.step = stepInString
	case '-':
		s.step = stepNeg
	case '0':
		s.step = stepZero
	case 't':
		s.literal("true")
	case 'f':
		s.literal("false")
	case 'n':
		s.literal("null")
	default:
		if '1' <= c && c <= '9' {
			s.step = stepDigits
			return nil
		}
		return s.syntaxErr(c, "looking for beginning of value")
	}
	return nil
}

func (s *jsonScanner) push(kind byte) error {
	if len(s.stack) >= maxJSONDepth {
		return invalid("invalid JSON at byte %d: exceeded max depth (%d)", s.pos, maxJSONDepth)
	}
	s.stack = append(s.stack, kind)
	return nil
}

func stepBeginValueOrEmpty(s *jsonScanner, c byte) error {
	if c == ']' {
		return s.close()
	}
	return stepBeginValue(s, c)
}

func stepBeginKeyOrEmpty(s *jsonScanner, c byte) error {
	if c == '}' {
		return s.close()
	}
	return stepBeginKey(s, c)
}

func stepBeginKey(s *jsonScanner, c byte) error {
	switch {
	case isSpace(c):
		return nil
	case c == '"':
		s.step = stepInString
		return nil
	}
	return s.syntaxErr(c, "looking for beginning of object key string")
}

// close pops the innermost container, just ended.
func (s *jsonScanner) close() error {
	s.stack = s.stack[:len(s.stack)-1]
	return s.endValue()
}

// endValue is reached when a value is complete.
func (s *jsonScanner) endValue() error {
	if len(s.stack) == 0 {
		s.step, s.done = nil, true
		return nil
	}
	s.step = stepEndValue
	return nil
}

// stepEndValue follows a complete value inside a container.
func stepEndValue(s *jsonScanner, c byte) error {
	if isSpace(c) {
		return nil
	}
	top := len(s.stack) - 1
	switch s.stack[top] {
	case inObjectKey:
		if c == ':' {
			s.stack[top] = inObjectValue
			s.step = stepBeginValue
			return nil
		}
		return s.syntaxErr(c, "after object key")
	case inObjectValue:
		switch c {
		case ',':
			s.stack[top] = inObjectKey
			s.step = stepBeginKey
			return nil
		case '}':
			return s.close()
		}
		return s.syntaxErr(c, "after object key:value pair")
	default:
		switch c {
		case ',':
			s.step = stepBeginValue
			return nil
		case ']':
			return s.close()
		}
		return s.syntaxErr(c, "after array element")
	}
}

// afterScalar ends a number: c is the first byte after it.
func (s *jsonScanner) afterScalar(c byte) error {
	if err := s.endValue(); err != nil || s.done {
		return err
	}
	return stepEndValue(s, c)
}

func stepInString(s *jsonScanner, c byte) error {
	switch {
	case c == '"':
		return s.endValue()
	case c == '\\':
		s.step = stepEscape
	case c < 0x20:
		return s.syntaxErr(c, "in string literal")
	}
	return nil
}

func stepEscape(s *jsonScanner, c byte) error {
	switch c {
	case 'b', 'f', 'n', 'r', 't', '\\', '/', '"':
		s.step = stepInString
		return nil
	case 'u':
		s.n = 4
		s.step = stepHex
		return nil
	}
	return s.syntaxErr(c, "in string escape code")
}

func stepHex(s *jsonScanner, c byte) error {
	if !isHex(c) {
		return s.syntaxErr(c, "in \\u hexadecimal character escape")
	}
	s.n--
	if s.n == 0 {
		s.step = stepInString
	}
	return nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func stepNeg(s *jsonScanner, c byte) error {
	switch {
	case c == '0':
		s.step = stepZero
	case '1' <= c && c <= '9':
		s.step = stepDigits
	default:
		return s.syntaxErr(c, "in numeric literal")
	}
	return nil
}

func stepDigits(s *jsonScanner, c byte) error {
	if isDigit(c) {
		return nil
	}
	return stepZero(s, c)
}

// stepZero follows the integer part of a number.
func stepZero(s *jsonScanner, c byte) error {
	switch c {
	case '.':
		s.step = stepDot
		return nil
	case 'e', 'E':
		s.step = stepExp
		return nil
	}
	return s.afterScalar(c)
}

func stepDot(s *jsonScanner, c byte) error {
	if isDigit(c) {
		s.step = stepFraction
		return nil
	}
	return s.syntaxErr(c, "after decimal point in numeric literal")
}

func stepFraction(s *jsonScanner, c byte) error {
	switch {
	case isDigit(c):
		return nil
	case c == 'e' || c == 'E':
		s.step = stepExp
		return nil
	}
	return s.afterScalar(c)
}

func stepExp(s *jsonScanner, c byte) error {
	if c == '+' || c == '-' {
		s.step = stepExpSign
		return nil
	}
	return stepExpSign(s, c)
}

func stepExpSign(s *jsonScanner, c byte) error {
	if isDigit(c) {
		s.step = stepExpDigits
		return nil
	}
	return s.syntaxErr(c, "in exponent of numeric literal")
}

func stepExpDigits(s *jsonScanner, c byte) error {
	if isDigit(c) {
		return nil
	}
	return s.afterScalar(c)
}

// literal expects the rest of word (true, false or null), whose first
// byte was just fed.
func (s *jsonScanner) literal(word string) {
	s.word, s.n = word, 1
	s.step = stepLiteral
}

func stepLiteral(s *jsonScanner, c byte) error {
	if c != s.word[s.n] {
		return s.syntaxErr(c, fmt.Sprintf("in literal %s (expecting %s)", s.word, quoteChar(s.word[s.n])))
	}
	s.n++
	if s.n == len(s.word) {
		return s.endValue()
	}
	return nil
}

// quoteChar renders a byte as encoding/json's errors do: 'x'.
func quoteChar(c byte) string {
	switch c {
	case '\'':
		return `'\''`
	case '"':
		return `'"'`
	}
	q := strconv.Quote(string(rune(c)))
	return "'" + q[1:len(q)-1] + "'"
}
