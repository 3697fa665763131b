// reference.go owns the mount reference: the text /README serves and
// docs/mount.md carries between its generated-block markers. The text
// lives in reference.md (embedded at build time); the errno table inside
// it is rendered from errno.go, so the reference cannot drift from the
// code. reference_test.go checks the checked-in copies.

package control

import (
	_ "embed"
	"strings"
)

//go:embed reference.md
var referenceTemplate string

// Reference returns the mount reference in Markdown.
func Reference() string {
	return strings.Replace(referenceTemplate, "{{ERRNO_TABLE}}", ErrnoTableMarkdown(), 1)
}
