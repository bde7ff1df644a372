// Package model holds the tests of the Promela model of the reclamation
// protocol (reclaim.pml, README.md, check.sh).
package model

import (
	"bufio"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoRoot is two levels up from docs/model.
const repoRoot = "../.."

// mappedName is one Go function named in the README's mapping table.
type mappedName struct {
	raw      string // as written
	dir      string // package directory relative to the repository root
	recv     string // receiver type ("" for a function)
	ptr      bool   // pointer receiver
	function string
}

var nameRE = regexp.MustCompile(`^([a-z0-9_/]+)\.(?:\(\*([A-Za-z_]\w*)\)\.([A-Za-z_]\w*)|([A-Za-z_]\w*)\.([A-Za-z_]\w*)|([A-Za-z_]\w*))$`)

func parseName(s string) (mappedName, error) {
	m := nameRE.FindStringSubmatch(s)
	if m == nil {
		return mappedName{}, errors.New("not of the form dir.Func, dir.Type.Method or dir.(*Type).Method")
	}
	n := mappedName{raw: s, dir: m[1]}
	switch {
	case m[2] != "":
		n.recv, n.ptr, n.function = m[2], true, m[3]
	case m[4] != "":
		n.recv, n.function = m[4], m[5]
	default:
		n.function = m[6]
	}
	return n, nil
}

// mappingNames returns the function names in the last column of the
// "Mapping" table of README.md.
func mappingNames(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = strings.HasPrefix(line, "## Mapping")
			continue
		}
		if !in || !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		last := strings.TrimSpace(cells[len(cells)-1])
		if !strings.HasPrefix(last, "`") {
			continue // header, separator
		}
		names = append(names, strings.Trim(last, "`"))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// declared returns "Func", "Type.Method" and "(*Type).Method" for every
// function declared in the non-test files of dir.
func declared(t *testing.T, dir string) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(repoRoot, dir, "*.go"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no Go files in %s (%v)", dir, err)
	}
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", p, err)
		}
		files = append(files, f)
	}
	out := map[string]bool{}
	for _, file := range files {
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			if fd.Recv == nil || len(fd.Recv.List) == 0 {
				out[fd.Name.Name] = true
				continue
			}
			typ := fd.Recv.List[0].Type
			ptr := false
			if st, ok := typ.(*ast.StarExpr); ok {
				ptr, typ = true, st.X
			}
			switch x := typ.(type) {
			case *ast.IndexExpr:
				typ = x.X
			case *ast.IndexListExpr:
				typ = x.X
			}
			id, ok := typ.(*ast.Ident)
			if !ok {
				continue
			}
			if ptr {
				out["(*"+id.Name+")."+fd.Name.Name] = true
			} else {
				out[id.Name+"."+fd.Name.Name] = true
			}
		}
	}
	return out
}

// TestMappingNamesExist fails when the README maps a model step to a Go
// function that no longer exists.
func TestMappingNamesExist(t *testing.T) {
	names := mappingNames(t)
	if len(names) < 20 {
		t.Fatalf("README.md mapping table: found %d function names, want the full table", len(names))
	}
	decls := map[string]map[string]bool{}
	for _, raw := range names {
		n, err := parseName(raw)
		if err != nil {
			t.Errorf("README.md names %q: %v", raw, err)
			continue
		}
		d, ok := decls[n.dir]
		if !ok {
			d = declared(t, n.dir)
			decls[n.dir] = d
		}
		key := n.function
		if n.recv != "" {
			if n.ptr {
				key = "(*" + n.recv + ")." + n.function
			} else {
				key = n.recv + "." + n.function
			}
		}
		if !d[key] {
			t.Errorf("README.md maps a model step to %s, but package directory %s declares no %s", raw, n.dir, key)
		}
	}
}

// TestParseName pins the accepted forms.
func TestParseName(t *testing.T) {
	for _, c := range []struct {
		in         string
		dir, recv  string
		ptr        bool
		fn         string
		shouldFail bool
	}{
		{in: "fs.(*Engine).Repoint", dir: "fs", recv: "Engine", ptr: true, fn: "Repoint"},
		{in: "cmd/ebbfs.enginePublisher.Publish", dir: "cmd/ebbfs", recv: "enginePublisher", fn: "Publish"},
		{in: "checkpoint.HorizonOf", dir: "checkpoint", fn: "HorizonOf"},
		{in: "Repoint", shouldFail: true},
		{in: "fs.(Engine).Repoint", shouldFail: true},
	} {
		n, err := parseName(c.in)
		if c.shouldFail {
			if err == nil {
				t.Errorf("%q: parsed, want an error", c.in)
			}
			continue
		}
		if err != nil || n.dir != c.dir || n.recv != c.recv || n.ptr != c.ptr || n.function != c.fn {
			t.Errorf("%q: got %+v, %v", c.in, n, err)
		}
	}
}

var resultRE = regexp.MustCompile(`^RESULT (\S+)\s+(\S+)\s+expect=(\S+)\s+got=(\S+)\s+trail=(\S+)\s+steps=(\S+)\s+states=(\S+)\s+time=(\S+)\s+(\S+)`)

// TestModelCheck runs check.sh on the quick instances (MODEL_SIZE=quick
// unless MODEL_SIZE says otherwise): the main configurations pass
// exhaustively and every mutant and finding gives a counterexample trail.
// make test runs it beside the other packages' tests; .ci/run sets
// EBBFS_MODEL_CHECKED, since it runs make model (the full bounds) beside
// make test.
func TestModelCheck(t *testing.T) {
	if os.Getenv("EBBFS_MODEL_CHECKED") == "1" {
		t.Skip("EBBFS_MODEL_CHECKED=1: make model checks the model beside the tests")
	}
	for _, tool := range []string{"spin", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s not installed (scripts/install-deps.sh installs it): the model cannot be checked", tool)
			}
			t.Skipf("%s not installed (scripts/install-deps.sh installs it); set CI=true to make this a failure", tool)
		}
	}
	if testing.Short() {
		t.Skip("-short: the model check takes minutes")
	}
	cmd := exec.Command("bash", "check.sh")
	if os.Getenv("MODEL_SIZE") == "" {
		cmd.Env = append(os.Environ(), "MODEL_SIZE=quick")
	}
	out, err := cmd.CombinedOutput()
	t.Logf("check.sh output:\n%s", out)
	if err != nil {
		t.Errorf("check.sh: %v", err)
	}
	mutants := map[string]bool{}
	mains := 0
	for _, line := range strings.Split(string(out), "\n") {
		m := resultRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		kind, name, got, trail, verdict := m[1], m[2], m[4], m[5], m[9]
		switch kind {
		case "main":
			mains++
			if got != "pass" {
				t.Errorf("main run %s: %s, want an exhaustive pass", name, got)
			}
		case "mutant", "finding":
			if got != "fail" || trail != "yes" {
				t.Errorf("%s %s: got=%s trail=%s, want a counterexample trail", kind, name, got, trail)
			}
			if kind == "mutant" {
				mutants[name] = true
			}
		}
		if verdict != "ok" {
			t.Errorf("%s %s: %s", kind, name, verdict)
		}
	}
	if mains == 0 {
		t.Error("check.sh reported no main run")
	}
	for _, want := range []string{"counter-before-delete", "repoint-before-upload", "drain-same-cycle", "cutoff-before-flush", "no-span-grace", "merge-no-grace", "mirror-no-retention", "mirror-journal-first", "mirror-no-record", "takeover-unconditional"} {
		if !mutants[want] {
			t.Errorf("mutant %s: no counterexample reported", want)
		}
	}
}
