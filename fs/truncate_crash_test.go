package fs

import (
	"bytes"
	"context"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/objstore"
)

// TestShrinkThenCrashThenGrowReadsZeroes: a truncation into the middle of
// a committed extent zeroes that extent's tail in memory, for the next
// flush; a barrier whose data flush ran before the truncation but whose
// journal came after it makes the new size durable while the store still
// holds the old bytes past it. After a crash there, growing the file
// again (a truncate up, or a write past the end) must read zeroes between
// the old end and the new data, not the bytes from before the truncation.
// (Found by the chaos soak, tests/soak_test.go.)
func TestShrinkThenCrashThenGrowReadsZeroes(t *testing.T) {
	for _, grow := range []string{"truncate", "write"} {
		t.Run(grow, func(t *testing.T) {
			ctx := context.Background()
			base := objstore.NewMem()
			k, err := Init(ctx, base, "password123")
			if err != nil {
				t.Fatal(err)
			}
			open := func(s objstore.Store) *Engine {
				pid := deadPID(t)
				e, err := Open(ctx, Options{Store: s, Keys: k, CacheDir: t.TempDir(), SegmentTarget: 256 << 10,
					FlushInterval: time.Hour, tuneLSM: func(o *lsm.Options) { o.PID = pid; o.DisableAutoPublish = true }})
				if err != nil {
					t.Fatal(err)
				}
				return e
			}
			slow := objstore.NewFaulty(base)
			cut := &cutStore{Store: slow}
			e := open(cut)
			a, _ := e.Create(ctx, RootIno, "f", 0o644, 0, 0)
			old := bytes.Repeat([]byte{0xab}, extentSize)
			if _, err := e.Write(ctx, a.Ino, old, 0); err != nil {
				t.Fatal(err)
			}
			if err := e.Barrier(ctx); err != nil {
				t.Fatal(err)
			}
			// Other dirty data, so that the next barrier's flush uploads
			// (slowly) while the truncation commits.
			g, _ := e.Create(ctx, RootIno, "g", 0o644, 0, 0)
			if _, err := e.Write(ctx, g.Ino, testutil.RandBytes(1, extentSize), 0); err != nil {
				t.Fatal(err)
			}
			slow.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPut}, Prefix: "segments/", Latency: 300 * time.Millisecond})
			done := make(chan error, 1)
			go func() { done <- e.Barrier(ctx) }()
			time.Sleep(100 * time.Millisecond)
			const keep = 8 << 10
			if _, err := e.SetAttr(ctx, a.Ino, SetAttr{Valid: SetSize, Size: keep}); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			cut.cut.Store(true) // the crash: the zeroed tail never reaches the store
			e2 := open(base)
			defer e2.Close(ctx)
			if st, err := e2.GetAttr(ctx, a.Ino); err != nil || st.Size != keep {
				t.Fatalf("after the crash: size %d (%v), want %d (the barrier held the truncation)", st.Size, err, keep)
			}
			switch grow {
			case "truncate":
				if _, err := e2.SetAttr(ctx, a.Ino, SetAttr{Valid: SetSize, Size: extentSize}); err != nil {
					t.Fatal(err)
				}
			case "write":
				if _, err := e2.Write(ctx, a.Ino, []byte("new"), 3*extentSize); err != nil {
					t.Fatal(err)
				}
			}
			for _, r := range []*Engine{e2} {
				buf := make([]byte, extentSize)
				n, err := r.Read(ctx, a.Ino, buf, 0)
				if err != nil || n != extentSize {
					t.Fatalf("read: %d, %v", n, err)
				}
				if !bytes.Equal(buf[:keep], old[:keep]) {
					t.Fatal("the bytes below the truncation changed")
				}
				if i := bytes.IndexFunc(buf[keep:], func(r rune) bool { return r != 0 }); i >= 0 {
					t.Fatalf("byte %d, past the truncation, reads %#x after the file grew again: the bytes from before the truncation", keep+i, buf[keep+i])
				}
			}
			if err := e2.Barrier(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
