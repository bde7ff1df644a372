package objstore_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
)

// Local.Close (through objstore.Close, under a decorator) stops the
// worker that closes idle kept files, which would otherwise run as long
// as a file is kept; the store still serves reads afterwards.
func TestLocalCloseLeavesNoGoroutine(t *testing.T) {
	leaks := testutil.SnapshotGoroutines()
	ctx := context.Background()
	l, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := objstore.NewCounting(l)
	key := "segments/07/0000000000000007"
	data := bytes.Repeat([]byte("kept"), 1024)
	if _, err := st.Put(ctx, key, data, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	read := func() {
		t.Helper()
		got := make([]byte, 16)
		if err := l.ReadRange(ctx, key, 4, got); err != nil || !bytes.Equal(got, data[4:20]) {
			t.Fatalf("small read: %q, %v", got, err)
		}
	}
	read() // kept open: the sweeper starts
	if len(leaks.Leftover()) == 0 {
		t.Fatal("no sweeper runs while a file is kept; the test checks nothing")
	}
	if err := objstore.Close(st); err != nil {
		t.Fatal(err)
	}
	leaks.Check(t, 10*time.Second)
	read() // after Close, each read opens its own file
	leaks.Check(t, 10*time.Second)
}
