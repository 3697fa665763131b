// quote.go owns how error texts show what a client sent: quoted, and at
// most a short prefix of it. Error texts are logged and kept in the
// error files (one per batch, one for the mount), so quoting a whole
// write or document would let a client park megabytes in each of them,
// and would copy the whole buffer on every refusal.

package control

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// maxErrorText bounds an error text as the error files and the log keep
// it, whatever a message quoted: the last line of defence behind the
// quoting rule below.
const maxErrorText = 4096

// quoteRunes is how much of a client's text an error quotes.
const quoteRunes = 40

// quotePrefix quotes at most the first n runes of b, saying how long b
// was when it is cut; it never converts more of b than it shows.
func quotePrefix(b []byte, n int) string {
	i := 0
	for r := 0; r < n && i < len(b); r++ {
		_, size := utf8.DecodeRune(b[i:])
		i += size
	}
	return strconv.Quote(string(b[:i])) + cut(i, len(b))
}

// quoteText is quotePrefix for a string.
func quoteText(s string, n int) string {
	i := 0
	for r := 0; r < n && i < len(s); r++ {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return strconv.Quote(s[:i]) + cut(i, len(s))
}

// cut marks a quote of shown bytes out of total.
func cut(shown, total int) string {
	if shown == total {
		return ""
	}
	return fmt.Sprintf("... (%d bytes)", total)
}

// capText cuts s to at most max bytes (at a rune boundary), saying so.
func capText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + fmt.Sprintf("... (cut: %d bytes)", len(s))
}
