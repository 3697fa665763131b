// names.go owns the rule for the names users give memory regions and
// segments: each becomes a directory name on the mount.
//
// Invariants:
//   - A valid name is a single path element that the kernel accepts and
//     that never shadows a fixed file: non-empty, at most 255 bytes, valid
//     UTF-8, no '/', no control character (C0, DEL, C1 U+0080-U+009F),
//     no line or paragraph separator (U+2028, U+2029), not "." or "..",
//     and not one of the reserved names ("register", "open"). Names are
//     refused, never repaired: a name that passes is shown exactly as
//     given.
//   - A valid name uses only nameChars (ASCII letters, digits and a few
//     punctuation marks), so two names that differ are told apart by
//     every tool and every reader: no Unicode normalization forms ("é" as
//     one code point or as "e" plus a combining accent), no zero-width or
//     other format characters, no look-alikes such as the Kelvin sign.
//     Deciding normalization would need Unicode tables this module does
//     not carry; a small charset needs none.

package control

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNameBytes is the longest name (the kernel's NAME_MAX).
const MaxNameBytes = 255

// namePunct is the punctuation a name may hold besides ASCII letters and
// digits.
const namePunct = ". _ - + @ = , : ~"

// nameChars is every character a name may hold.
const nameChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-+@=,:~"

// reservedNames are the fixed files living next to named directories.
var reservedNames = map[string]bool{"register": true, "open": true}

// ValidateName checks a memory or segment name. The error names the bad
// value and the rule it broke; its kind is KindInvalid at the call site.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("name is empty")
	case len(name) > MaxNameBytes:
		return fmt.Errorf("name %.32q... is %d bytes, more than %d", name, len(name), MaxNameBytes)
	case name == "." || name == "..":
		return fmt.Errorf("name %q is not allowed", name)
	case reservedNames[name]:
		return fmt.Errorf("name %q is reserved (it is a control file)", name)
	case !utf8.ValidString(name):
		return fmt.Errorf("name %q is not valid UTF-8", name)
	}
	for _, r := range name {
		switch {
		case r == '/':
			return fmt.Errorf("name %q contains '/'", name)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f):
			return fmt.Errorf("name %q contains control character %U", name, r)
		case r == 0x2028 || r == 0x2029:
			return fmt.Errorf("name %q contains line or paragraph separator %U", name, r)
		case r >= utf8.RuneSelf || !strings.ContainsRune(nameChars, r):
			return fmt.Errorf("name %q contains %q (%U): names use only ASCII letters, digits and %s", name, r, r, namePunct)
		}
	}
	return nil
}
