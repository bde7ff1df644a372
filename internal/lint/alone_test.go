package lint

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAloneListIsComplete: scripts/test.sh runs the end-to-end tests that
// do not call t.Parallel in groups of their own (tests/alone.txt) and
// skips them in the main run. A serial test missing from the list would
// run first in the main run, before every parallel test, and slow make
// test by its whole length; a name on the list with no test would hide a
// rename.
func TestAloneListIsComplete(t *testing.T) {
	dir := filepath.Join("..", "..", "tests")
	listed := map[string]bool{}
	f, err := os.Open(filepath.Join(dir, "alone.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if len(fields) != 2 {
			t.Errorf("tests/alone.txt: %q: want a group and a test name", sc.Text())
			continue
		}
		listed[fields[1]] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}

	serial := map[string]bool{}
	all := map[string]bool{}
	paths, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
	for _, p := range paths {
		fset := token.NewFileSet()
		file, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, decl := range file.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Body == nil || !strings.HasPrefix(fd.Name.Name, "Test") || fd.Name.Name == "TestMain" {
				continue
			}
			all[fd.Name.Name] = true
			if !callsParallel(fd.Body) {
				serial[fd.Name.Name] = true
			}
		}
	}
	if len(all) == 0 {
		t.Fatal("no tests found in tests/")
	}
	for name := range serial {
		if !listed[name] {
			t.Errorf("%s does not call t.Parallel and is not in tests/alone.txt: list it in a group, or make it parallel", name)
		}
	}
	for name := range listed {
		if !all[name] {
			t.Errorf("tests/alone.txt names %s, which is not a test in tests/", name)
		} else if !serial[name] {
			t.Errorf("tests/alone.txt names %s, which calls t.Parallel: the main run skips it, so it would run beside its group's", name)
		}
	}
}

// callsParallel reports whether a test body calls t.Parallel() at its top
// level (where it must, to run in parallel).
func callsParallel(body *ast.BlockStmt) bool {
	for _, st := range body.List {
		es, ok := st.(*ast.ExprStmt)
		if !ok {
			continue
		}
		call, ok := es.X.(*ast.CallExpr)
		if !ok {
			continue
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Parallel" && len(call.Args) == 0 {
			return true
		}
	}
	return false
}
