package testutil

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	var n atomic.Int32
	if !Until(10*time.Second, func() bool { return n.Add(1) >= 3 }) {
		t.Fatal("Until gave up on a condition that holds at the third poll")
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("condition polled %d times, want 3", got)
	}
	start := time.Now()
	if Until(50*time.Millisecond, func() bool { return false }) {
		t.Fatal("Until reported a condition that never holds")
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("Until gave up after %s, before its 50ms timeout", d)
	}
}

func TestEventuallyFailsNamingWhat(t *testing.T) {
	ft := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Eventually(ft, 30*time.Millisecond, "the moon", func() bool { return false })
	}()
	<-done
	if ft.msg == "" || !ft.fatal {
		t.Fatal("Eventually did not fail the test")
	}
	if want := "waited 30ms for the moon: it did not happen"; ft.msg != want {
		t.Fatalf("message %q, want %q", ft.msg, want)
	}
}

func TestSyncBufferConcurrent(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_, _ = b.Write([]byte("ab"))
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if b.Len() != 1600 {
		t.Fatalf("%d bytes, want 1600", b.Len())
	}
}

// fakeTB records a Fatalf and ends the goroutine as testing.T would.
type fakeTB struct {
	testing.TB
	msg   string
	fatal bool
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = true
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestRandBytesRepeats(t *testing.T) {
	a, b, c := RandBytes(7, 100), RandBytes(7, 100), RandBytes(8, 100)
	if string(a) != string(b) {
		t.Fatal("same seed, different bytes")
	}
	if string(a) == string(c) {
		t.Fatal("different seeds, same bytes")
	}
}

func TestFastKDFIsCheap(t *testing.T) {
	p := FastKDF()
	if p.Time != 1 || p.MemoryKiB != 64 || p.Threads != 1 {
		t.Fatalf("FastKDF = %+v, want time 1, 64 KiB, 1 thread", p)
	}
}

func TestMountType(t *testing.T) {
	if got := MountType("/proc"); got != "proc" {
		t.Fatalf("MountType(/proc) = %q, want proc", got)
	}
	dir := t.TempDir()
	if got := MountType(dir); got != "" {
		t.Fatalf("MountType of a plain directory = %q, want none", got)
	}
	WaitMountTable(t, dir, false, time.Second)
}
