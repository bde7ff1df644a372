package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/reclaim"
)

// metaObjects counts the objects under the local store's meta/, by kind
// (journal, manifest, sst).
func metaObjects(t *testing.T, e *env) map[string]int {
	t.Helper()
	out := map[string]int{}
	root := filepath.Join(e.store, "meta")
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		kind, _, _ := strings.Cut(rel, string(filepath.Separator))
		if strings.HasPrefix(filepath.Base(p), ".tmp-") {
			kind = "temporary"
		}
		out[kind]++
		out["all"]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// metaSeqs returns the sequences of the local store's meta/journal/ or
// meta/manifest/ objects (kind "journal" or "manifest"), ascending.
func metaSeqs(t *testing.T, e *env, kind string) []uint64 {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(e.store, "meta", kind))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []uint64
	for _, d := range ents {
		if v, err := strconv.ParseUint(d.Name(), 16, 64); err == nil && len(d.Name()) == 16 {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// newestManifest returns the local store's newest manifest sequence, 0
// if none.
func newestManifest(t *testing.T, e *env) uint64 {
	t.Helper()
	m := metaSeqs(t, e, "manifest")
	if len(m) == 0 {
		return 0
	}
	return m[len(m)-1]
}

// checkJournalsLeft fails unless every journal in the store is covered by
// the newest manifest and was written by the writer that started after
// manifest before (its predecessors' are deleted).
func checkJournalsLeft(t *testing.T, e *env, before uint64, when string) {
	t.Helper()
	newest := newestManifest(t, e)
	for _, j := range metaSeqs(t, e, "journal") {
		if j <= before || j > newest {
			t.Fatalf("%s: journal %d left; want only the last writer's (after manifest %d), all covered by manifest %d", when, j, before, newest)
		}
	}
}

// manifestReferences opens the store's metadata read-only and returns how
// many objects its newest manifest references (itself and its tables);
// 0 if none is published yet.
func manifestReferences(t *testing.T, st objstore.Store, k *keys.Keys) int {
	t.Helper()
	ctx := context.Background()
	db, err := lsm.Open(ctx, lsm.Options{Dir: t.TempDir(), Store: st, Keys: k, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	seq := db.LatestManifest()
	if seq == 0 {
		return 0 // none published yet
	}
	objs, err := db.ManifestObjects(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	return len(objs)
}

// TestMetaGCUnderShortWriters: short-lived writers (mount, write and
// fsync a file, stop), then one writer that lives past the metadata GC
// interval. Each clean stop publishes a manifest covering its journals
// (lsm), which lets the next writer delete them, and a writer's start or
// stop runs a metadata GC pass once the newest manifest is
// reclaim.MetaGCDueJournals journals past the last pass's: the number of
// meta/ objects stays bounded however many writers come and go, the
// long writer brings it down to at most twice what the newest manifest
// references, and a writer on a fresh machine (no cache) reads every file
// back from the store alone. 60 short writers by default (a writer's
// start and stop take about a second); EBBFS_SHORT_MOUNTS=500 runs the
// issue's 500.
//
// Every meta/ object is backdated by an hour after each short writer:
// the writers stand for ones started a minute or more apart, which is
// what the metadata GC's age margin (a minute of wall time, which the
// test clock does not shorten) and the journals' retention need to let
// anything go.
func TestMetaGCUnderShortWriters(t *testing.T) {
	t.Parallel()
	mounts := 60
	if v := os.Getenv("EBBFS_SHORT_MOUNTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("EBBFS_SHORT_MOUNTS=%q", v)
		}
		mounts = n
	}
	// The long writer's clock runs 600 times faster: the 30-minute
	// interval is 3 s.
	e := newEnv(t, withEnvVars("EBBFS_TEST_TIME_SCALE=600"))
	e.init()
	st, err := objstore.NewLocal(e.store)
	if err != nil {
		t.Fatal(err)
	}
	k, err := fs.Unlock(context.Background(), st, testPassword)
	if err != nil {
		t.Fatal(err)
	}
	// Between two passes the short writers add a manifest and a table or
	// two each, and each writes at least one journal (its epoch start):
	// at most 2 objects per journal sequence, plus the newest manifest's
	// own and the last writer's journals.
	bound := 2*reclaim.MetaGCDueJournals + 24
	want := map[string][]byte{}
	start := time.Now()
	most := map[string]int{}
	for i := range mounts {
		before := newestManifest(t, e)
		p := e.mount()
		name := "f" + strconv.Itoa(i%20)
		data := randBytes(t, 4096)
		writeFile(t, e.path(name), data)
		fsyncFile(t, e.path(name))
		want[name] = data
		p.stop()
		now := metaObjects(t, e)
		if now["all"] > most["all"] {
			most = now
		}
		if now["all"] > bound {
			t.Fatalf("after %d short writers meta/ holds %v, more than %d", i+1, now, bound)
		}
		checkJournalsLeft(t, e, before, fmt.Sprintf("after %d short writers", i+1))
		crashBackdateMeta(t, e)
	}
	piled := metaObjects(t, e)
	piledRefs := manifestReferences(t, st, k)
	t.Logf("after %d short writers (%s): meta/ holds %v, at most %v; the newest manifest references %d objects",
		mounts, time.Since(start).Round(time.Second), piled, most, piledRefs)

	before := newestManifest(t, e)
	p := e.mount()
	var now map[string]int
	refs := 0
	testutil.Eventually(t, 2*time.Minute, "metadata objects down to twice the manifest's", func() bool {
		now = metaObjects(t, e)
		refs = manifestReferences(t, st, k)
		return refs > 0 && now["all"] <= 2*refs
	})
	p.stop()
	t.Logf("the long writer brought meta/ from %v down to %v; the newest manifest references %d objects", piled, now, refs)
	// Its stop published once more: the manifest and tables it
	// superseded are young, and its own journals are kept for replicas
	// (5 minutes), all covered.
	after := metaObjects(t, e)
	refsAfter := manifestReferences(t, st, k)
	t.Logf("after the long writer stopped: meta/ holds %v; the newest manifest references %d objects", after, refsAfter)
	if after["all"]-after["journal"] > refs+refsAfter {
		t.Fatalf("after the long writer stopped: meta/ holds %v for %d referenced before its stop and %d after", after, refs, refsAfter)
	}
	checkJournalsLeft(t, e, before, "after the long writer stopped")

	// A writer on a fresh machine: the store alone.
	if err := os.RemoveAll(e.cache); err != nil {
		t.Fatal(err)
	}
	p = e.mount()
	for name, data := range want {
		got, err := os.ReadFile(e.path(name))
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s on a fresh writer: %d bytes, err %v; want the %d last written", name, len(got), err, len(data))
		}
	}
	p.stop()
}
