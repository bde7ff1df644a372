package lsm

import (
	"errors"
	"testing"

	"ebbfs.dev/ebbfs/objstore"
)

// A snapshot reads the state it was taken of, whatever is committed
// after, and fails with ErrSnapshotGone (no crash) once its DB closed.
func TestSnapshotKeepsItsState(t *testing.T) {
	db := mustOpen(t, testOpts(t, objstore.NewMem(), testKeys(t)))
	set(t, db, "a", "1", "b", "1")
	s, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	set(t, db, "a", "2", "c", "2")
	if v, ok, err := s.Get([]byte("a")); err != nil || !ok || string(v) != "1" {
		t.Fatalf("snapshot a = %q %v %v, want 1", v, ok, err)
	}
	var keys []string
	if err := s.Scan(nil, nil, func(k, _ []byte) error { keys = append(keys, string(k)); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k == "c" {
			t.Fatalf("snapshot scan found %q, committed after it: %v", k, keys)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get([]byte("a")); !errors.Is(err, ErrSnapshotGone) {
		t.Fatalf("read of a snapshot of a closed DB: %v, want ErrSnapshotGone", err)
	}
	s.Close()
	s.Close()
}
