package control

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated blocks in README.md and docs/mount.md")

// Generated blocks are delimited by these markers in the checked-in docs.
func markers(name string) (begin, end string) {
	return "<!-- BEGIN GENERATED " + name + " (go test ./control -update) -->\n", "<!-- END GENERATED " + name + " -->"
}

// checkBlock fails when the block called name in path differs from want;
// with -update it rewrites the block instead.
func checkBlock(t *testing.T, path, name, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v", err)
	}
	text := string(b)
	begin, end := markers(name)
	i := strings.Index(text, begin)
	j := strings.Index(text, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q ... %q block", path, strings.TrimSpace(begin), end)
	}
	got := text[i+len(begin) : j]
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(text[:i+len(begin)]+want+text[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("updated %s", path)
		return
	}
	t.Errorf("%s: the generated %s block is out of date; run go test ./control -update", path, name)
}

func TestDocsInSync(t *testing.T) {
	checkBlock(t, "../README.md", "ERRNO TABLE", ErrnoTableMarkdown())
	checkBlock(t, "../docs/mount.md", "MOUNT REFERENCE", Reference())
}

func TestReferenceRendersTable(t *testing.T) {
	r := Reference()
	if strings.Contains(r, "{{") || !strings.Contains(r, ErrnoTableMarkdown()) {
		t.Errorf("reference does not carry the errno table")
	}
	for _, row := range ErrnoTable() {
		if !strings.Contains(r, "| "+row.Name+" |") {
			t.Errorf("reference lacks %s", row.Name)
		}
	}
}
