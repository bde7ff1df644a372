package lsm

import (
	"context"
	"sort"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/objstore"
)

// TestFollowJournalByJournal: a replica applies each journal with one GET
// and learns the keys it changed; an idle probe is one GET and nothing
// else; journals covered by a manifest stay for the retention, so the
// replica needs no LIST while it keeps up.
func TestFollowJournalByJournal(t *testing.T) {
	mem := objstore.NewMem()
	cs := objstore.NewCounting(mem)
	k := testKeys(t)
	wo := testOpts(t, mem, k)
	wo.JournalRetention = time.Hour
	w := mustOpen(t, wo)
	defer w.Close()
	set(t, w, "ia", "1")
	barrier(t, w)
	ro := testOpts(t, cs, k)
	ro.ReadOnly = true
	ro.JournalRetention = time.Hour
	r := mustOpen(t, ro)
	defer r.Close()
	wantVal(t, r, "ia", "1")
	ctx := context.Background()

	before := cs.Snapshot()
	if _, ok, err := r.FollowNext(ctx); err != nil || ok {
		t.Fatalf("idle FollowNext = %v, %v", ok, err)
	}
	if d := cs.Snapshot().Sub(before); d.Get != 1 || d.List != 0 || d.Put != 0 {
		t.Fatalf("an idle probe sent %+v; want one GET", d)
	}

	set(t, w, "ib", "2", "ic", "3")
	barrier(t, w)
	b := w.NewBatch()
	_ = b.Delete([]byte("ia"))
	if err := w.Commit(b); err != nil {
		t.Fatal(err)
	}
	barrier(t, w)
	var got []string
	for {
		keys, ok, err := r.FollowNext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		for _, k := range keys {
			if k[0] == 'i' {
				got = append(got, string(k))
			}
		}
	}
	sort.Strings(got)
	if want := []string{"ia", "ib", "ic"}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("changed keys %q, want %q", got, want)
	}
	wantVal(t, r, "ib", "2")
	if _, ok, _ := r.Get([]byte("ia")); ok {
		t.Fatal("deleted key still on the replica")
	}

	// A manifest covers the journals, but they are younger than the
	// retention: still there, and CatchUp does not jump.
	set(t, w, "id", "4")
	barrier(t, w)
	if _, err := w.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	if jumped, err := r.CatchUp(ctx); err != nil || jumped {
		t.Fatalf("CatchUp = %v, %v; want no jump (journals retained)", jumped, err)
	}
	if _, ok, err := r.FollowNext(ctx); err != nil || !ok {
		t.Fatalf("retained journal not followed: %v, %v", ok, err)
	}
	wantVal(t, r, "id", "4")
}

// TestFollowerLearnsNewerManifest: each journal object names the newest
// manifest its writer had published, so a follower's LatestManifest moves
// past the manifest it started from as it applies journals (its reader
// checkpoint then pins the newer one), with no LIST.
func TestFollowerLearnsNewerManifest(t *testing.T) {
	mem := objstore.NewMem()
	cs := objstore.NewCounting(mem)
	k := testKeys(t)
	wo := testOpts(t, mem, k)
	wo.JournalRetention = time.Hour
	w := mustOpen(t, wo)
	defer w.Close()
	ctx := context.Background()
	set(t, w, "ia", "1")
	first, err := w.Publish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ro := testOpts(t, cs, k)
	ro.ReadOnly = true
	ro.JournalRetention = time.Hour
	r := mustOpen(t, ro)
	defer r.Close()
	if r.LatestManifest() != first {
		t.Fatalf("replica starts at manifest %d, want %d", r.LatestManifest(), first)
	}
	set(t, w, "ib", "2")
	second, err := w.Publish(ctx)
	if err != nil || second <= first {
		t.Fatalf("second manifest %d (%v) after %d", second, err, first)
	}
	set(t, w, "ic", "3")
	barrier(t, w) // the first journal after the second manifest names it
	before := cs.Snapshot()
	for {
		_, ok, err := r.FollowNext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
	}
	if d := cs.Snapshot().Sub(before); d.List != 0 {
		t.Fatalf("following sent %d LISTs", d.List)
	}
	wantVal(t, r, "ic", "3")
	if r.LatestManifest() != second {
		t.Fatalf("replica's LatestManifest %d after following, want %d", r.LatestManifest(), second)
	}
}
