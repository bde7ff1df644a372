package tests

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestCleanStopsLoseNothing runs many short writers on one store, each
// writing, overwriting and deleting without any fsync and then stopped
// cleanly, in turn by SIGTERM, SIGINT and umount. After every restart
// every file must be exactly as the model says, and no writer may log
// that it lost a batch.
func TestCleanStopsLoseNothing(t *testing.T) {
	t.Parallel()
	need(t, "umount")
	e := newEnv(t)
	e.init()
	model := map[string][]byte{}
	const cycles = 24
	for i := 0; i < cycles; i++ {
		p := e.mount()
		for name, want := range model {
			if got := readFile(t, e.path(name)); !bytes.Equal(got, want) {
				t.Fatalf("cycle %d: %s differs after a clean stop (%d bytes, want %d)", i, name, len(got), len(want))
			}
		}
		ents, err := os.ReadDir(e.mnt)
		if err != nil {
			t.Fatal(err)
		}
		var files int
		for _, d := range ents {
			if !strings.HasPrefix(d.Name(), ".") {
				files++
			}
		}
		if files != len(model) {
			t.Fatalf("cycle %d: %d files, want %d", i, files, len(model))
		}
		// New, overwritten (large: a tombstone for the cleaner) and
		// deleted files, all left to the stop's final barrier.
		name := fmt.Sprintf("f%02d", i)
		data := randBytes(t, 4096+i*50000)
		writeFile(t, e.path(name), data)
		model[name] = data
		if i > 0 {
			prev := fmt.Sprintf("f%02d", i-1)
			over := randBytes(t, 500<<10)
			writeFile(t, e.path(prev), over)
			model[prev] = over
		}
		if i > 1 && i%3 == 0 {
			gone := fmt.Sprintf("f%02d", i-2)
			if err := os.Remove(e.path(gone)); err != nil {
				t.Fatal(err)
			}
			delete(model, gone)
		}
		switch i % 3 {
		case 0:
			p.stop() // SIGTERM
		case 1:
			if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(); code != 0 {
				t.Fatalf("cycle %d: exit %d after SIGINT:\n%s", i, code, p.out.String())
			}
		case 2:
			if r := e.run("umount", e.mnt); r.code != 0 {
				t.Fatalf("umount: %s", r)
			}
			if code := p.wait(); code != 0 {
				t.Fatalf("cycle %d: exit %d after umount:\n%s", i, code, p.out.String())
			}
		}
		if out := p.out.String(); strings.Contains(out, "not in any journal") || !strings.Contains(out, "final barrier done") {
			t.Fatalf("cycle %d: the clean stop did not journal everything:\n%s", i, out)
		}
	}
	if r := e.mustEbbfs("fsck", "--verify-data"); !strings.Contains(r.stdout, "consistent") {
		t.Fatalf("fsck: %s", r)
	}
}
