package nbd

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
)

var (
	_ Backend = (*memBackend)(nil)
	_ Export  = (*memHandle)(nil)
)

// memBackend is an in-memory Backend that records what it was asked to do.
type memBackend struct {
	seq atomic.Int64 // orders recorded events

	mu struct {
		sync.Mutex
		exports map[string]*memExport
	}
	flushes   atomic.Int64
	lastFlush atomic.Int64 // seq of the last completed Flush
	opens     atomic.Int64
	closes    atomic.Int64
	writeAts  atomic.Int64
	listErr   error
}

type zeroCall struct {
	off, length int64
	mayTrim     bool
	trim        bool
}

type memExport struct {
	b    *memBackend
	name string

	mu struct {
		sync.Mutex
		data      []byte
		zeroes    []zeroCall
		lastWrite int64 // seq of the last completed WriteAt
		failWith  error // returned by data operations when set
	}
	// hook, when set, runs at the start of every data operation.
	hook func(op string)
	// badRange records a data operation outside the export: the server
	// must never pass one through.
	badRange atomic.Bool
	// inFlight and maxInFlight measure concurrency of data operations.
	inFlight, maxSeen atomic.Int64
}

func newMemBackend(sizes map[string]int64) *memBackend {
	b := &memBackend{}
	b.mu.exports = make(map[string]*memExport)
	for name, size := range sizes {
		e := &memExport{b: b, name: name}
		e.mu.data = make([]byte, size)
		b.mu.exports[name] = e
	}
	return b
}

func (b *memBackend) export(name string) *memExport {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.exports[name]
}

func (b *memBackend) List(ctx context.Context) ([]ExportInfo, error) {
	if b.listErr != nil {
		return nil, b.listErr
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var l []ExportInfo
	for name, e := range b.mu.exports {
		sz, _ := e.Size()
		l = append(l, ExportInfo{Name: name, Size: sz})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].Name < l[j].Name })
	return l, nil
}

func (b *memBackend) Open(ctx context.Context, name string) (Export, error) {
	e := b.export(name)
	if e == nil {
		return nil, fmt.Errorf("open %q: %w", name, ErrNoSuchExport)
	}
	b.opens.Add(1)
	return &memHandle{e: e}, nil
}

// memHandle is one opened export; Close is counted.
type memHandle struct {
	e      *memExport
	closed atomic.Bool
}

func (h *memHandle) Size() (int64, error) { return h.e.Size() }
func (h *memHandle) ReadAt(ctx context.Context, p []byte, off int64) error {
	return h.e.ReadAt(ctx, p, off)
}
func (h *memHandle) WriteAt(ctx context.Context, p []byte, off int64) error {
	return h.e.WriteAt(ctx, p, off)
}
func (h *memHandle) Trim(ctx context.Context, off, length int64) error {
	return h.e.Trim(ctx, off, length)
}
func (h *memHandle) Zero(ctx context.Context, off, length int64, mayTrim bool) error {
	return h.e.Zero(ctx, off, length, mayTrim)
}
func (h *memHandle) Flush(ctx context.Context) error { return h.e.Flush(ctx) }
func (h *memHandle) Extents(ctx context.Context, off, length int64) ([]Extent, error) {
	return h.e.Extents(ctx, off, length)
}
func (h *memHandle) BlockSize() int { return memBlock }
func (h *memHandle) Close() error {
	if h.closed.Swap(true) {
		return fmt.Errorf("export %q closed twice", h.e.name)
	}
	h.e.b.closes.Add(1)
	return nil
}

func (e *memExport) Size() (int64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return int64(len(e.mu.data)), nil
}

func (e *memExport) resize(n int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	d := make([]byte, n)
	copy(d, e.mu.data)
	e.mu.data = d
}

func (e *memExport) setFail(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mu.failWith = err
}

func (e *memExport) bytes(off, n int64) []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]byte(nil), e.mu.data[off:off+n]...)
}

func (e *memExport) zeroCalls() []zeroCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]zeroCall(nil), e.mu.zeroes...)
}

func (e *memExport) lastWrite() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mu.lastWrite
}

// begin runs the hook and tracks concurrency; the caller defers the result.
func (e *memExport) begin(op string) func() {
	n := e.inFlight.Add(1)
	for {
		m := e.maxSeen.Load()
		if n <= m || e.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	if e.hook != nil {
		e.hook(op)
	}
	return func() { e.inFlight.Add(-1) }
}

func (e *memExport) check(off, n int64) error {
	if e.mu.failWith != nil {
		return e.mu.failWith
	}
	if off < 0 || n < 0 || off+n > int64(len(e.mu.data)) {
		e.badRange.Store(true)
		return fmt.Errorf("mem: range %d+%d outside %d", off, n, len(e.mu.data))
	}
	return nil
}

func (e *memExport) ReadAt(ctx context.Context, p []byte, off int64) error {
	defer e.begin("read")()
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.check(off, int64(len(p))); err != nil {
		return err
	}
	copy(p, e.mu.data[off:])
	return nil
}

func (e *memExport) WriteAt(ctx context.Context, p []byte, off int64) error {
	defer e.begin("write")()
	e.b.writeAts.Add(1)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.check(off, int64(len(p))); err != nil {
		return err
	}
	copy(e.mu.data[off:], p)
	e.mu.lastWrite = e.b.seq.Add(1)
	return nil
}

func (e *memExport) zero(off, n int64, mayTrim, trim bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.check(off, n); err != nil {
		return err
	}
	clear(e.mu.data[off : off+n])
	e.mu.zeroes = append(e.mu.zeroes, zeroCall{off, n, mayTrim, trim})
	e.mu.lastWrite = e.b.seq.Add(1)
	return nil
}

func (e *memExport) Trim(ctx context.Context, off, n int64) error {
	defer e.begin("trim")()
	return e.zero(off, n, true, true)
}

func (e *memExport) Zero(ctx context.Context, off, n int64, mayTrim bool) error {
	defer e.begin("zero")()
	return e.zero(off, n, mayTrim, false)
}

func (e *memExport) Flush(ctx context.Context) error {
	defer e.begin("flush")()
	e.mu.Lock()
	err := e.mu.failWith
	e.mu.Unlock()
	if err != nil {
		return err
	}
	e.b.flushes.Add(1)
	e.b.lastFlush.Store(e.b.seq.Add(1))
	return nil
}

// memBlock is the granularity of memExport.Extents: an all-zero aligned
// block of memBlock bytes is a hole.
const memBlock = 4096

// Extents reports the all-zero memBlock-aligned blocks of the range as
// holes, at most memMaxExtents extents at a time (so the server has to
// ask again for long ranges).
func (e *memExport) Extents(ctx context.Context, off, length int64) ([]Extent, error) {
	defer e.begin("extents")()
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.check(off, length); err != nil {
		return nil, err
	}
	var out []Extent
	for pos, end := off, off+length; pos < end && len(out) < memMaxExtents; {
		next := min(end, (pos/memBlock+1)*memBlock)
		hole := isZero(e.mu.data[pos/memBlock*memBlock : min(int64(len(e.mu.data)), (pos/memBlock+1)*memBlock)])
		if k := len(out) - 1; k >= 0 && out[k].Hole == hole {
			out[k].Length += next - pos
		} else {
			out = append(out, Extent{Length: next - pos, Hole: hole})
		}
		pos = next
	}
	return out, nil
}

// memMaxExtents bounds one memExport.Extents answer.
const memMaxExtents = 8
