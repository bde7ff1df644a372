package lsm

import (
	"bytes"
	"testing"

	"ebbfs.dev/ebbfs/objstore"
)

// TestUnjournaled: a committed key counts until a barrier has put it in a
// journal; a range deletion counts for every key.
func TestUnjournaled(t *testing.T) {
	db := mustOpen(t, testOpts(t, objstore.NewMem(), testKeys(t)))
	defer db.Close()
	is := func(k string) func([]byte) bool { return func(b []byte) bool { return bytes.Equal(b, []byte(k)) } }
	if db.Unjournaled(is("a")) {
		t.Fatal("an empty queue touches a")
	}
	set(t, db, "a", "1", "b", "2")
	if !db.Unjournaled(is("a")) || !db.Unjournaled(is("b")) {
		t.Fatal("committed keys not seen")
	}
	if db.Unjournaled(is("c")) {
		t.Fatal("c seen in the queue")
	}
	barrier(t, db)
	if db.Unjournaled(is("a")) {
		t.Fatal("a still unjournaled after a barrier")
	}
	b := db.NewBatch()
	if err := b.DeleteRange([]byte("x"), []byte("y")); err != nil {
		t.Fatal(err)
	}
	if err := db.Commit(b); err != nil {
		t.Fatal(err)
	}
	if !db.Unjournaled(is("a")) {
		t.Fatal("a range deletion does not count")
	}
	barrier(t, db)
	if db.Unjournaled(is("a")) {
		t.Fatal("queue not empty after a barrier")
	}
}
