// Package lint holds tests that check the shape of the code base rather
// than its behaviour.
package lint

import (
	"go/build"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "ebbfs.dev/ebbfs/"

// shared are the small internal pieces any layer may use (DESIGN section 1:
// clock, failpoints, key derivation; and the retry loop, histograms,
// atomic file writes and buffers on huge pages).
var shared = []string{"internal/clock", "internal/directio", "internal/diskspace", "internal/failpoint", "internal/fileutil", "internal/hugemem", "internal/keys", "internal/retry", "internal/stats", "internal/worker"}

// layers lists, for every package of the module, the packages of the
// module its non-test files may import (DESIGN section 1: imports go
// downward only). "*" allows any. A package missing here fails the test:
// a new package must take its place in the layering explicitly.
var layers = map[string][]string{
	"cmd/ebbfs": {"*"},
	// The daemon wires the engine, reclamation, FUSE, NBD and the admin
	// endpoint; telemetry, the monitor and the mount helper sit below it
	// and beside each other.
	"internal/daemon":      {"fs", "fs/fuse", "nbd", "reclaim", "checkpoint", "mirror", "lsm", "objstore", "internal/admin", "internal/config", "internal/gnutls", "internal/telemetry", "internal/mountinfo", "internal/clock", "internal/failpoint", "internal/keys", "internal/stats", "internal/worker"},
	"internal/telemetry":   {"fs", "reclaim", "checkpoint", "segment", "segread", "objstore", "internal/clock", "internal/stats", "internal/worker"},
	"internal/monitor":     {"internal/telemetry", "internal/admin", "checkpoint", "internal/stats"},
	"internal/mounthelper": {"fs/fuse", "internal/config", "internal/mountinfo"},
	"fs/fuse":              {"fs"},
	"nbd":                  {"fs", "internal/gnutls"},
	"nbd/nbdtest":          {},
	"fs":                   {"lsm", "lsm/schema", "segment", "segread", "checkpoint", "objstore"},
	"reclaim":              {"lsm", "lsm/schema", "segment", "segread", "checkpoint", "objstore"},
	"checkpoint":           {"lsm", "lsm/schema", "objstore"},
	"mirror":               {"lsm", "lsm/schema", "segment", "checkpoint", "objstore"},
	"lsm":                  {"lsm/schema", "objstore"},
	"lsm/schema":           {},
	"segread":              {"segment", "objstore"},
	"segment":              {"objstore"},
	"segment/segtest":      {},
	"objstore":             {},
	"objstore/storetest":   {"objstore"},
	"internal/admin":       {"internal/worker"},
	"internal/config":      {},
	"internal/gnutls":      {},
	"internal/s3test":      {"objstore", "internal/worker", "internal/testport"},
	"internal/testport":    {},
	"internal/clock":       {},
	"internal/failpoint":   {},
	"internal/keys":        {},
	"internal/retry":       {"internal/clock"},
	"internal/worker":      {"internal/clock"},
	"internal/diskspace":   {"internal/clock", "internal/worker"},
	"internal/directio":    {},
	"internal/testutil":    {"*"},
	"internal/stats":       {},
	"internal/fileutil":    {},
	"internal/hugemem":     {},
	"internal/lint":        {},
	"bench/mountbench":     {"internal/mountinfo", "internal/s3test"},
	"internal/mountinfo":   {},
	"tests":                {"*"},
	"docs/model":           {},
}

// forbidden lists imports that would otherwise look downward but break a
// rule of the design.
var forbidden = map[string][]string{
	"fs": {"reclaim"}, // internal/daemon wires them through fs.Events and reclaim.Host
}

func TestImportLayers(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	pkgs := map[string]bool{}
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "run" || name == "bin" || name == "node_modules") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, p)
		for _, tags := range [][]string{nil, {"ebbfs_testclock"}} {
			ctx := build.Default
			ctx.BuildTags = tags
			bp, err := ctx.ImportDir(p, 0)
			if err != nil {
				if _, ok := err.(*build.NoGoError); ok {
					return nil
				}
				t.Errorf("%s: %v", rel, err)
				return nil
			}
			pkgs[rel] = true
			check(t, rel, bp.Imports)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 15 {
		t.Fatalf("found only %d packages under %s; the walk is broken", len(pkgs), root)
	}
	var stale []string
	for p := range layers {
		if !pkgs[p] && p != "docs/model" {
			stale = append(stale, p)
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Errorf("layer table names packages that do not exist: %v", stale)
	}
}

func check(t *testing.T, pkg string, imports []string) {
	t.Helper()
	allowed, ok := layers[pkg]
	if !ok {
		t.Errorf("package %s is not in the layer table of internal/lint: add it where it belongs", pkg)
		return
	}
	for _, imp := range imports {
		if !strings.HasPrefix(imp, module) {
			continue
		}
		dep := strings.TrimPrefix(imp, module)
		if contains(forbidden[pkg], dep) {
			t.Errorf("%s imports %s, which the design forbids", pkg, dep)
			continue
		}
		if contains(allowed, "*") || contains(allowed, dep) {
			continue
		}
		if contains(shared, dep) && !strings.HasPrefix(pkg, "internal/") {
			continue
		}
		t.Errorf("%s imports %s: not a layer below it (allowed: %v and the shared internal pieces)", pkg, dep, allowed)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
