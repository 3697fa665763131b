package lint

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/orbitefs/orbitefs/"

// forbidden maps a package directory to import paths (or prefixes) it
// must not use.
var forbidden = map[string][]string{
	"engine":  {"unsafe", "github.com/pawelgaczynski/giouring", "github.com/ebitengine/purego", module + "fusefs", module + "control", module + "backends/"},
	"control": {"unsafe", "github.com/pawelgaczynski/giouring", "github.com/ebitengine/purego", module + "fusefs", module + "backends/"},
	"fusefs":  {"unsafe", "github.com/pawelgaczynski/giouring", "github.com/ebitengine/purego", module + "backends/"},
	"config":  {"unsafe", module + "engine", module + "control", module + "fusefs", module + "backends/"},
	// peer is a transport beside the backends: it sees the engine's
	// error kinds and nothing above them; wire is pure encoding.
	"peer":      {"unsafe", "github.com/pawelgaczynski/giouring", "github.com/ebitengine/purego", module + "fusefs", module + "control", module + "backends/"},
	"peer/wire": {"unsafe", module + "engine", module + "control", module + "fusefs", module + "backends/", module + "config"},
}

func TestLayering(t *testing.T) {
	root, _ := filepath.Abs("../..")
	checked := 0
	for dir, bad := range forbidden {
		files, _ := filepath.Glob(filepath.Join(root, dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue // tests may use test-only backends
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			for _, imp := range af.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				for _, b := range bad {
					if p == b || (strings.HasSuffix(b, "/") && strings.HasPrefix(p, b)) {
						t.Errorf("%s imports %s, which the layering forbids", strings.TrimPrefix(f, root+"/"), p)
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no source files found: the check ran against nothing")
	}
}
