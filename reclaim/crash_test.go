package reclaim

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/objstore"
)

// restart simulates a new writer process after a crash: the store is all
// that survives. The crashed engine stays frozen on its own clock (which
// nobody advances any more), so it does nothing further.
func (v *env) restart() *env {
	v.t.Helper()
	v.releaseLease()
	n := &env{t: v.t, ctx: v.ctx, mem: v.mem, keys: v.keys, clk: clock.NewFake(v.clk.Now()), cps: &fakeCheckpoints{}, logBuf: v.logBuf, log: v.log}
	n.faulty = objstore.NewFaulty(n.mem)
	n.count = objstore.NewCounting(n.faulty)
	n.openEngine()
	n.r = n.newReclaimer(noSweep)
	v.t.Cleanup(func() {
		n.r.Close()
		n.e.Close(n.ctx)
	})
	return n
}

// TestCrashAtEveryFailpoint stops the process at each reclamation
// failpoint (the durable state is then exactly the store), checks the
// store with fsck, restarts from the store alone, and checks that the
// following cycles and a sweep converge to a consistent filesystem with
// no garbage and unchanged file contents.
func TestCrashAtEveryFailpoint(t *testing.T) {
	points := []string{
		"cycle-after-barrier", "cycle-after-scan",
		"delete-after-verify", "delete-after-barrier", "delete-after-object-delete",
		"repack-after-upload", "repack-mid-repoint", "repack-after-repoint",
		"sweep-mid", "sweep-before-delete", "sweep-after-delete",
	}
	for _, fp := range points {
		t.Run(fp, func(t *testing.T) {
			v := newEngineEnv(t, noSweep, noCooling)
			v.r.chunkForTests = 8
			inoB, _ := v.deadSegment("b")
			v.mustCycle() // deadline for b's dead segment
			inoA, _ := v.fragmented("a")
			v.orphan(2)
			v.clk.Advance(MinGrace)
			wantA, wantB := v.readAll(inoA, 64), v.readAll(inoB, 4)
			sweep := strings.HasPrefix(fp, "sweep")
			if sweep {
				v.mustCycle()
			}

			fired, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
			armFailpoint(t, fp, func(string) {
				close(fired)
				<-release
				runtime.Goexit() // the crashed process never continues
			})
			t.Cleanup(func() { close(release) })
			go func() {
				defer close(done)
				if sweep {
					v.r.sweep(v.ctx)
				} else {
					v.r.cycle(v.ctx)
				}
			}()
			select {
			case <-fired:
			case <-done:
				t.Fatalf("failpoint %s not reached", fp)
			case <-time.After(30 * time.Second):
				t.Fatalf("failpoint %s not reached in time", fp)
			}

			v.durablyConsistent()
			n := v.restart()
			n.durablyConsistent()
			for i := 0; i < 4; i++ {
				n.mustCycle()
				n.clk.Advance(MinGrace)
			}
			if st, err := n.r.sweep(n.ctx); err != nil || !st.Complete {
				t.Fatalf("sweep after restart: %+v %v", st, err)
			}
			n.barrier()
			n.consistent()
			if !bytes.Equal(n.readAll(inoA, 64), wantA) || !bytes.Equal(n.readAll(inoB, 4), wantB) {
				t.Fatal("file contents changed")
			}
			// Garbage is gone: every object has a counter with live data.
			for id := range n.objects() {
				c, ok := n.counter(id)
				if !ok || c.live <= 0 {
					t.Fatalf("segment %016x left as garbage (counter %+v, ok %v)", id, c, ok)
				}
			}
		})
	}
}
