// readme_test.go checks the README's quick start against the files it
// describes: the Go version go.mod requires, the packages .ci/run
// installs, and commands that work as root on a fresh Debian (no sudo).

package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestReadmeQuickStart(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	readme, gomod, ci := read("README.md"), read("go.mod"), read(".ci/run")
	start := readme[strings.Index(readme, "## Quick start"):]
	start = start[:strings.Index(start[3:], "\n## ")+3]

	goLine := regexp.MustCompile(`(?m)^go ([0-9.]+)$`).FindStringSubmatch(gomod)
	if goLine == nil {
		t.Fatal("go.mod has no go line")
	}
	if !strings.Contains(start, "Go "+goLine[1]) {
		t.Errorf("the quick start does not name the Go version go.mod requires (%s)", goLine[1])
	}

	pkgs := regexp.MustCompile(`(?m)^for p in ([^;]+); do`).FindStringSubmatch(ci)
	if pkgs == nil {
		t.Fatal(".ci/run: no `for p in ...; do` package list")
	}
	for _, p := range strings.Fields(pkgs[1]) {
		if !regexp.MustCompile(`(?m)^\| [^|]*\b` + regexp.QuoteMeta(p) + `\b[^|]*\| \S`).MatchString(start) {
			t.Errorf("the quick start's package table does not list %s (installed by .ci/run) with a reason", p)
		}
	}

	// Every sudo command has a root form without sudo.
	for _, l := range strings.Split(start, "\n") {
		if !strings.HasPrefix(l, "sudo ") {
			continue
		}
		plain := strings.ReplaceAll(l, "sudo ", "")
		if !strings.Contains(start, "\n"+plain+"\n") && !strings.Contains(start, "\n"+strings.Fields(plain)[0]) {
			t.Errorf("%q has no form for root, who has no sudo on a fresh Debian", l)
		}
	}
	if !strings.Contains(start, "As root") {
		t.Errorf("the quick start does not show the commands for root")
	}
}

// TestReadmeLayout checks the README's layout block against the tree: it
// names every top-level directory (and .ci) with a line of its own,
// every path it names exists, and its docs/ line lists every page in
// docs/, as does the Documentation table.
func TestReadmeLayout(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	open := strings.Index(readme, "\n```\n")
	end := strings.Index(readme[open+5:], "\n```\n")
	if open < 0 || end < 0 {
		t.Fatal("README.md has no layout block (a ``` block without a language)")
	}
	named := map[string]bool{}
	docsLine := ""
	for _, l := range strings.Split(readme[open+5:open+5+end], "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			t.Errorf("layout line %q: want a path and what it holds", l)
			continue
		}
		for _, p := range strings.Split(strings.TrimSuffix(f[0], ","), ",") {
			p = strings.TrimSuffix(strings.TrimSpace(p), "/")
			if p == "" {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				t.Errorf("layout names %s, which does not exist", p)
			}
			named[strings.SplitN(p, "/", 2)[0]] = true
		}
		if f[0] == "docs/" {
			docsLine = l
		}
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		n := e.Name()
		if !e.IsDir() || (strings.HasPrefix(n, ".") && n != ".ci") || n == "bin" {
			continue
		}
		if !named[n] {
			t.Errorf("the README layout block does not name the top-level directory %s/", n)
		}
	}
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if len(docs) == 0 {
		t.Fatal("no docs/*.md")
	}
	for _, d := range docs {
		base := strings.TrimSuffix(filepath.Base(d), ".md")
		if !strings.Contains(docsLine, base+".md") {
			t.Errorf("the README layout's docs/ line does not list docs/%s.md: %q", base, docsLine)
		}
		if !strings.Contains(readme, "| [docs/"+base+".md](docs/"+base+".md) | ") {
			t.Errorf("the README's Documentation table has no row for docs/%s.md", base)
		}
	}
}
