package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStatusAfterCrash: a running writer's status leads with its health;
// after kill -9, status names what the writer left behind (the dead
// mount, the stale socket, the unreleased lease whose holder is dead)
// with how to recover, and exits 1; following its advice, a new writer
// starts and status is healthy again.
func TestStatusAfterCrash(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	p := e.mount()
	writeFile(t, e.path("a"), randBytes(t, 256*kib))
	fsyncFile(t, e.path("a"))
	st := e.mustEbbfs("status")
	first := strings.SplitN(st.stdout, "\n", 2)[0]
	for _, want := range []string{"health:", "writer", "lease epoch 1", "last barrier", "dirty", "0 replicas", "store reachable", "no damage"} {
		if !strings.Contains(st.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, st.stdout)
		}
	}
	if !strings.HasPrefix(first, "health:     writer") {
		t.Errorf("status does not lead with the health line: %q", first)
	}

	p.kill()
	r := e.ebbfs("status")
	if r.code != 1 {
		t.Fatalf("status after kill -9: %s", r)
	}
	for _, want := range []string{
		"dead mount " + e.mnt, "fusermount3 -u " + e.mnt,
		"stale socket " + filepath.Join(e.cache, "admin.sock"),
		"lease writer.lease: not released", "is dead", "takes it over at once",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status after kill -9 lacks %q:\n%s", want, r.stdout)
		}
	}
	t.Logf("status after kill -9:\n%s", r.stdout)
	var left struct {
		Running    bool `json:"running"`
		LeftBehind []struct {
			What string `json:"what"`
		} `json:"left_behind"`
	}
	rj := e.ebbfs("status", "--json")
	if err := json.Unmarshal([]byte(rj.stdout), &left); err != nil || left.Running || len(left.LeftBehind) != 3 {
		t.Fatalf("status --json after kill -9: %v %s", err, rj)
	}

	// Recover as it says: unmount the dead mount, start again.
	if out, err := exec.Command("fusermount3", "-u", e.mnt).CombinedOutput(); err != nil {
		t.Logf("fusermount3 -u: %v %s (detaching instead)", err, out)
		e.forceUnmount()
	}
	p = e.mount()
	st = e.mustEbbfs("status")
	if !strings.Contains(st.stdout, "lease epoch 2") || !strings.Contains(st.stdout, "store reachable") {
		t.Errorf("status after recovery:\n%s", st.stdout)
	}
	if got := readFile(t, e.path("a")); len(got) != 256*kib {
		t.Errorf("the fsynced file has %d bytes after recovery", len(got))
	}
	p.stop()
	if r := e.ebbfs("status"); r.code != 1 || !strings.Contains(r.stdout, "nothing left behind") {
		t.Errorf("status after a clean stop: %s", r)
	}
}

// TestProgressOnlyOnATerminal: fsck --verify-data shows its progress on
// a terminal (a pty from script(1)): the phases and segments done of
// all with a rate; piped, its output has no progress line.
func TestProgressOnlyOnATerminal(t *testing.T) {
	t.Parallel()
	script := needTool(t, "script")
	e := newEnv(t)
	e.init()
	p := e.mount()
	for _, n := range []string{"a", "b", "c"} {
		writeFile(t, e.path(n), randBytes(t, 1<<20))
		e.mustEbbfs("flush")
	}
	p.stop()

	piped := e.mustEbbfs("fsck", "--verify-data")
	if strings.Contains(piped.stdout+piped.stderr, "fsck: segments") || strings.Contains(piped.stdout+piped.stderr, "\r") {
		t.Fatalf("piped fsck printed progress:\n%s", piped)
	}
	typescript := filepath.Join(e.dir, "typescript")
	cmd := e.command(t.Context(), script, "-q", "-e", "-c", ebbfsBin+" fsck --verify-data -c "+e.cfg, typescript)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fsck under script: %v\n%s", err, out)
	}
	b, err := os.ReadFile(typescript)
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	for _, want := range []string{"\r\x1b[Kfsck: inodes", "fsck: segments ", "/s", "consistent"} {
		if !strings.Contains(out, want) {
			t.Errorf("fsck on a terminal lacks %q:\n%q", want, out)
		}
	}
}
