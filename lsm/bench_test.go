package lsm

import (
	"context"
	"fmt"
	"os"
	"testing"

	"ebbfs.dev/ebbfs/objstore"
)

// BenchmarkCommitBarrier measures one small commit followed by a barrier
// (one journal object) against the in-memory store.
func BenchmarkCommitBarrier(b *testing.B) {
	db := mustOpen(b, testOpts(b, objstore.NewMem(), testKeys(b)))
	defer db.Close()
	ctx := context.Background()
	val := make([]byte, 64)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		bt := db.NewBatch()
		_ = bt.Set([]byte(fmt.Sprintf("i%012d", i)), val)
		_ = bt.AddCounter([]byte("c1"), 1, 1, 1)
		if err := db.Commit(bt); err != nil {
			b.Fatal(err)
		}
		if err := db.Barrier(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecovery100k measures a full recovery from the store alone of
// 100k keys: half in a manifest, half in 50 journal objects.
func BenchmarkRecovery100k(b *testing.B) {
	s := objstore.NewMem()
	k := testKeys(b)
	o := testOpts(b, s, k)
	o.PID = deadPID(b)
	db := mustOpen(b, o)
	ctx := context.Background()
	val := make([]byte, 100)
	for i := range 100_000 {
		bt := db.NewBatch()
		_ = bt.Set([]byte(fmt.Sprintf("e%08d", i)), val)
		if err := db.Commit(bt); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 {
			if err := db.Barrier(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if i == 49_999 {
			if _, err := db.Publish(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	crash(db)
	o.PID = deadPID(b)
	for b.Loop() {
		o.Dir = b.TempDir()
		db2, err := Open(ctx, o)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if _, ok, _ := db2.Get([]byte("e00099999")); !ok {
			b.Fatal("last key missing")
		}
		crash(db2)
		_ = os.RemoveAll(o.Dir)
		b.StartTimer()
	}
}
