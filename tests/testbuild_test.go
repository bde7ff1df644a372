package tests

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestProductionBuildHasNoFailpoints builds ebbfs as a user would (no
// tags) and checks that it is not a test build: `ebbfs version` names no
// test tags, and EBBFS_FAILPOINT, which makes a test build exit 97 at its
// first barrier, is ignored with a warning while the writer runs on and
// stops cleanly.
func TestProductionBuildHasNoFailpoints(t *testing.T) {
	t.Parallel()
	if noRun != "" {
		t.Skipf("end-to-end tests need: %s", noRun)
	}
	prod := filepath.Join(t.TempDir(), "ebbfs")
	build := exec.Command("go", "build", "-o", prod, "ebbfs.dev/ebbfs/cmd/ebbfs")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the production binary: %v\n%s", err, out)
	}
	ver := func(bin string) string {
		out, err := exec.Command(bin, "version").CombinedOutput()
		if err != nil {
			t.Fatalf("%s version: %v\n%s", bin, err, out)
		}
		return string(out)
	}
	if v := ver(prod); strings.Contains(v, "TEST BUILD") {
		t.Fatalf("production build says it is a test build:\n%s", v)
	}
	if v := ver(ebbfsBin); !strings.Contains(v, "TEST BUILD, tags: ebbfs_testclock") {
		t.Fatalf("test build does not name its tags:\n%s", v)
	}

	e := newEnv(t, withEnvVars("EBBFS_FAILPOINT=barrier-after-journal"))
	e.init()
	p := e.startBin(prod)
	p.waitMounted()
	writeFile(t, e.path("f"), []byte("durable"))
	fsyncFile(t, e.path("f"))
	if p.exited() {
		t.Fatalf("the production build fired a failpoint (exit %d):\n%s", p.code, p.out.String())
	}
	if !strings.Contains(p.out.String(), "EBBFS_FAILPOINT is ignored: this is a production build") {
		t.Fatalf("no warning about EBBFS_FAILPOINT:\n%s", p.out.String())
	}
	p.stop()
}
