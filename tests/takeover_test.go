package tests

import (
	"os"
	"strings"
	"testing"
)

// TestTakeOverFencesOldWriter: `ebbfs run --take-over` takes the lease from
// a writer that still runs (as a writer cut off on another machine would).
// The old writer's next fsync fails, what it wrote after the take-over is
// not in the new writer's state, and what was fsynced before is.
func TestTakeOverFencesOldWriter(t *testing.T) {
	t.Parallel()
	if noRun != "" {
		t.Skipf("end-to-end tests need: %s", noRun)
	}
	e := newEnv(t)
	e.init()
	old := e.mount()
	writeFile(t, e.path("before"), []byte("fsynced before the take-over"))
	fsyncFile(t, e.path("before"))

	n := e.sameStore()
	if r := n.run(ebbfsBin, "run", "-c", n.cfg, "--take-over", "--read-only"); r.code == 0 || !strings.Contains(r.stderr, "--take-over is for a writer") {
		t.Fatalf("--take-over with --read-only: %s", r)
	}
	np := n.mount("--take-over")
	if !strings.Contains(np.out.String(), "TAKING OVER the lease") {
		t.Fatalf("no take-over warning:\n%s", np.out.String())
	}

	// The old writer is fenced: its fsync fails and acknowledges nothing.
	if err := os.WriteFile(e.path("zombie"), []byte("after the take-over"), 0o644); err == nil {
		f, err := os.OpenFile(e.path("zombie"), os.O_RDWR, 0)
		if err == nil {
			err = f.Sync()
			f.Close()
		}
		if err == nil {
			t.Fatal("the old writer's fsync succeeded after the take-over")
		}
	}
	writeFile(t, n.path("after"), []byte("new writer"))
	fsyncFile(t, n.path("after"))
	if got := string(readFile(t, n.path("before"))); got != "fsynced before the take-over" {
		t.Fatalf("new writer reads %q", got)
	}
	if _, err := os.Stat(n.path("zombie")); err == nil {
		t.Fatal("the fenced writer's file is in the new writer's state")
	}
	old.kill()
	np.stop()
	np = n.mount()
	if _, err := os.Stat(n.path("zombie")); err == nil {
		t.Fatal("the fenced writer's file appeared after a restart")
	}
	if got := string(readFile(t, n.path("after"))); got != "new writer" {
		t.Fatalf("after restart: %q", got)
	}
	np.stop()
}
