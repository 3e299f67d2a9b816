package state

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestStateSpeaksNoFlagNames: the rules answer every door (the command
// line, HTTP, a replay), so no message of theirs names a command-line flag;
// the doors say which of theirs was wrong.
func TestStateSpeaksNoFlagNames(t *testing.T) {
	flag := regexp.MustCompile(`(^|[\s'"(,])--[a-z]`)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && flag.MatchString(lit.Value) {
				t.Errorf("%s: a message names a flag: %s", fset.Position(lit.Pos()), lit.Value)
			}
			return true
		})
	}
	if checked < 10 {
		t.Fatalf("only %d files of package state were read", checked)
	}
}
