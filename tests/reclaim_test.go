package tests

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// segmentBytes sums the stored bytes under segments/ of a local store.
func segmentBytes(t *testing.T, store string) (int64, int) {
	t.Helper()
	var sum int64
	n := 0
	err := filepath.Walk(filepath.Join(store, "segments"), func(p string, fi os.FileInfo, err error) error {
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			sum += fi.Size()
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sum, n
}

// TestGarbageReclaimed: after deletes and overwrites stop, the bytes under
// segments/ return to within a few percent of the live bytes, and what is
// still live reads back intact (invariants 1 and 4). The reclamation clock
// runs 200x faster (test build only), so the 60 s grace is 0.3 s here.
func TestGarbageReclaimed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withEnvVars("EBBFS_TEST_TIME_SCALE=200"))
	e.init()
	p := e.mount()
	keep := randBytes(t, 2<<20)
	writeFile(t, e.path("keep"), keep)
	writeFile(t, e.path("gone1"), randBytes(t, 2<<20)) // shares a segment with keep: repack
	e.mustEbbfs("flush")
	writeFile(t, e.path("gone2"), randBytes(t, 3<<20)) // a segment of its own: deleted whole
	writeFile(t, e.path("small"), randBytes(t, 100<<10))
	e.mustEbbfs("flush")
	over := randBytes(t, 1<<20)
	writeFile(t, e.path("over"), randBytes(t, 1<<20))
	e.mustEbbfs("flush")
	writeFile(t, e.path("over"), over) // overwrite: the first version is garbage
	e.mustEbbfs("flush")
	before, _ := segmentBytes(t, e.store)
	for _, n := range []string{"gone1", "gone2", "small"} {
		if err := os.Remove(e.path(n)); err != nil {
			t.Fatal(err)
		}
	}
	e.mustEbbfs("flush")
	live := int64(len(keep) + len(over))

	deadline := time.Now().Add(90 * time.Second)
	var got int64
	var objs int
	for {
		got, objs = segmentBytes(t, e.store)
		if float64(got) <= float64(live)*1.05 {
			break
		}
		if time.Now().After(deadline) {
			r := e.ebbfs("space")
			t.Fatalf("segments/ still holds %d bytes in %d objects (was %d) for %d live bytes after 90 s\n%s", got, objs, before, live, r.stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("segments/: %d bytes before the deletes, %d in %d objects after, %d live", before, got, objs, live)
	if got < live {
		t.Fatalf("segments/ holds %d bytes, less than the %d live bytes", got, live)
	}
	r := e.mustEbbfs("space", "--json")
	var sp struct {
		LiveBytes int64 `json:"live_bytes"`
		DeadBytes int64 `json:"dead_bytes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &sp); err != nil {
		t.Fatal(err)
	}
	if sp.LiveBytes < live || sp.DeadBytes != 0 {
		t.Fatalf("space after reclamation: %+v", sp)
	}
	if !bytes.Equal(readFile(t, e.path("keep")), keep) || !bytes.Equal(readFile(t, e.path("over")), over) {
		t.Fatal("live data changed during reclamation")
	}
	p.stop()
	if r := e.ebbfs("fsck", "--verify-data"); r.code != 0 || !strings.Contains(r.stdout, "consistent") {
		t.Fatalf("fsck --verify-data after reclamation: %s", r)
	}
	p = e.mount()
	if !bytes.Equal(readFile(t, e.path("keep")), keep) || !bytes.Equal(readFile(t, e.path("over")), over) {
		t.Fatal("live data changed across a restart after reclamation")
	}
	p.stop()
}
