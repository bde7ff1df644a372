package fs

import (
	"bytes"
	"context"
	"testing"

	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
)

// TestReclaimHostMetadataCalls: the metadata calls reclamation makes
// through reclaim.Host read and write the engine's store: MetaPut sets and
// deletes, MetaGet and MetaScan see it, MetaGetAll reports exactly the
// keys that exist with their values, and Fenced is nil for a writer.
func TestReclaimHostMetadataCalls(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	ino := f.create("a")
	f.write(ino, testutil.RandBytes(1, 2*extentSize), 0)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	key := lsm.SystemKey("reclaim.test") // as reclamation's own records
	if err := f.e.MetaPut(key, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := f.e.MetaGet(key); err != nil || !ok || string(v) != "v1" {
		t.Fatalf("MetaGet after MetaPut: %q %v %v", v, ok, err)
	}
	want0, _, _ := f.e.db.Get(schema.ExtentKey(ino, 0))
	keys := [][]byte{schema.ExtentKey(ino, 0), schema.ExtentKey(ino, 7), key, schema.ExtentKey(ino, 1)}
	var got []int
	err := f.e.MetaGetAll(keys, func(i int, v []byte) error {
		got = append(got, i)
		if i == 0 && !bytes.Equal(v, want0) {
			t.Errorf("MetaGetAll: extent 0 value %x, want %x", v, want0)
		}
		if i == 2 && string(v) != "v1" {
			t.Errorf("MetaGetAll: %q, want v1", v)
		}
		return nil
	})
	if err != nil || len(got) != 3 || got[0] != 0 || got[1] != 2 || got[2] != 3 {
		t.Fatalf("MetaGetAll reported keys %v (err %v), want 0, 2, 3 (7 does not exist)", got, err)
	}
	n := 0
	lo, hi := schema.ExtentRange(ino, 0, 0)
	if err := f.e.MetaScan(lo, hi, func(_, _ []byte) error { n++; return nil }); err != nil || n != 2 {
		t.Fatalf("MetaScan of the file's extents: %d, %v; want 2", n, err)
	}
	if err := f.e.MetaPut(key, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := f.e.MetaGet(key); err != nil || ok {
		t.Fatalf("MetaGet after MetaPut(nil): ok %v, err %v; want deleted", ok, err)
	}
	if err := f.e.Fenced(); err != nil {
		t.Fatalf("a writer's Fenced: %v", err)
	}
}
