package nbd

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// watchBackend wraps a memBackend: its exports count Size calls and record
// the context each changing operation ran with, and can hold an operation
// until released.
type watchBackend struct {
	*memBackend
	sizes atomic.Int64

	mu      sync.Mutex
	ctxs    map[string]context.Context
	holdOp  string
	entered chan struct{}
	release chan struct{}
}

type watchExport struct {
	Export
	w *watchBackend
}

func (w *watchBackend) Open(ctx context.Context, name string) (Export, error) {
	x, err := w.memBackend.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	return &watchExport{Export: x, w: w}, nil
}

func (x *watchExport) Size() (int64, error) {
	x.w.sizes.Add(1)
	return x.Export.Size()
}

// saw records ctx for op and holds the call when op is the held one.
func (x *watchExport) saw(ctx context.Context, op string) {
	w := x.w
	w.mu.Lock()
	w.ctxs[op] = ctx
	hold := w.holdOp == op
	w.mu.Unlock()
	if hold {
		close(w.entered)
		<-w.release
	}
}

func (x *watchExport) ReadAt(ctx context.Context, p []byte, off int64) error {
	x.saw(ctx, "read")
	return x.Export.ReadAt(ctx, p, off)
}
func (x *watchExport) WriteAt(ctx context.Context, p []byte, off int64) error {
	x.saw(ctx, "write")
	return x.Export.WriteAt(ctx, p, off)
}
func (x *watchExport) Trim(ctx context.Context, off, n int64) error {
	x.saw(ctx, "trim")
	return x.Export.Trim(ctx, off, n)
}
func (x *watchExport) Zero(ctx context.Context, off, n int64, mayTrim bool) error {
	x.saw(ctx, "zero")
	return x.Export.Zero(ctx, off, n, mayTrim)
}
func (x *watchExport) Flush(ctx context.Context) error {
	x.saw(ctx, "flush")
	// A barrier that gives up when its context ends would fail here.
	if err := ctx.Err(); err != nil {
		return err
	}
	return x.Export.Flush(ctx)
}

func newWatchBackend() *watchBackend {
	return &watchBackend{memBackend: twoExports(), ctxs: map[string]context.Context{}}
}

// TestSizeReadOncePerRequest: the server reads the export's size once per
// data request and the range checks use that value.
func TestSizeReadOncePerRequest(t *testing.T) {
	w := newWatchBackend()
	_, addr := startServer(t, w, Options{})
	c, _ := connect(t, addr, "disk")
	for _, r := range []struct {
		typ, flags uint16
		payload    []byte
		want       int64
	}{
		{cmdRead, 0, nil, 1},
		{cmdWrite, 0, []byte("abcd"), 1},
		{cmdWrite, cmdFlagFUA, []byte("abcd"), 1},
		{cmdTrim, 0, nil, 1},
		{cmdWriteZeroes, 0, nil, 1},
		{cmdWriteZeroes, cmdFlagNoHole, nil, 1},
		{cmdFlush, 0, nil, 0},
	} {
		before := w.sizes.Load()
		length := uint32(4)
		if r.typ == cmdFlush {
			length = 0
		}
		if errno, _ := c.cmd(r.typ, r.flags, 4096, length, r.payload); errno != 0 {
			t.Fatalf("%s: errno %d", cmdName(r.typ), errno)
		}
		if got := w.sizes.Load() - before; got != r.want {
			t.Errorf("%s (flags %#x) read the size %d times, want %d", cmdName(r.typ), r.flags, got, r.want)
		}
	}
}

// TestDurabilityRequestsRunToTheirEnd: FLUSH, FUA writes, WRITE, TRIM and
// WRITE_ZEROES run on a context nothing cancels, and a FLUSH in flight when
// the client hangs up and the server shuts down still runs to its end.
func TestDurabilityRequestsRunToTheirEnd(t *testing.T) {
	w := newWatchBackend()
	_, addr := startServer(t, w, Options{})
	c, _ := connect(t, addr, "disk")
	for _, r := range []struct {
		typ, flags uint16
		payload    []byte
	}{
		{cmdWrite, cmdFlagFUA, []byte("abcd")},
		{cmdTrim, 0, nil},
		{cmdWriteZeroes, cmdFlagNoHole, nil},
	} {
		if errno, _ := c.cmd(r.typ, r.flags, 0, 4, r.payload); errno != 0 {
			t.Fatalf("%s: errno %d", cmdName(r.typ), errno)
		}
	}
	w.mu.Lock()
	for _, op := range []string{"write", "trim", "zero", "flush"} {
		ctx := w.ctxs[op]
		if ctx == nil {
			t.Errorf("%s: not called", op)
		} else if ctx.Done() != nil {
			t.Errorf("%s ran on a cancellable context", op)
		}
	}
	w.mu.Unlock()

	// A FLUSH held in the backend while the client disconnects and the
	// server closes: it completes, and Close waits for it.
	w2 := newWatchBackend()
	w2.holdOp, w2.entered, w2.release = "flush", make(chan struct{}), make(chan struct{})
	s, addr2 := startServer(t, w2, Options{})
	c2, _ := connect(t, addr2, "disk")
	if err := c2.send(cmdFlush, 0, 1, 0, 0, nil); err != nil {
		t.Fatal(err)
	}
	<-w2.entered
	c2.nc.Close()
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned with a FLUSH in flight")
	case <-time.After(100 * time.Millisecond):
	}
	close(w2.release)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after the FLUSH finished")
	}
	if n := w2.flushes.Load(); n != 1 {
		t.Fatalf("%d flushes completed, want 1 (the barrier was abandoned)", n)
	}
}
