package daemon

import (
	"context"
	"time"

	"ebbfs.dev/ebbfs/internal/stats"
	"ebbfs.dev/ebbfs/nbd"
)

// nbdOps are the NBD commands /metrics and the monitor break down;
// block_status counts the export's extent-map lookups (BLOCK_STATUS, and
// large structured READs asking where the holes are).
var nbdOps = []string{"read", "write", "trim", "write_zeroes", "flush", "block_status"}

// timedBackend records every NBD command's count, failures, bytes and
// latency by command, around the engine's backend.
type timedBackend struct {
	nbd.Backend
	ops *stats.Ops
}

func (b timedBackend) Open(ctx context.Context, name string) (nbd.Export, error) {
	x, err := b.Backend.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	return &timedExport{Export: x, read: b.ops.Get("read"), write: b.ops.Get("write"),
		trim: b.ops.Get("trim"), zero: b.ops.Get("write_zeroes"), flush: b.ops.Get("flush"),
		extents: b.ops.Get("block_status")}, nil
}

type timedExport struct {
	nbd.Export
	read, write, trim, zero, flush, extents *stats.Op
}

func (x *timedExport) ReadAt(ctx context.Context, p []byte, off int64) error {
	s := time.Now()
	err := x.Export.ReadAt(ctx, p, off)
	x.read.Done(s, okBytes(len(p), err), err != nil)
	return err
}

func (x *timedExport) WriteAt(ctx context.Context, p []byte, off int64) error {
	s := time.Now()
	err := x.Export.WriteAt(ctx, p, off)
	x.write.Done(s, okBytes(len(p), err), err != nil)
	return err
}

func (x *timedExport) Trim(ctx context.Context, off, length int64) error {
	s := time.Now()
	err := x.Export.Trim(ctx, off, length)
	x.trim.Done(s, 0, err != nil)
	return err
}

func (x *timedExport) Zero(ctx context.Context, off, length int64, mayTrim bool) error {
	s := time.Now()
	err := x.Export.Zero(ctx, off, length, mayTrim)
	x.zero.Done(s, 0, err != nil)
	return err
}

func (x *timedExport) Flush(ctx context.Context) error {
	s := time.Now()
	err := x.Export.Flush(ctx)
	x.flush.Done(s, 0, err != nil)
	return err
}

func (x *timedExport) Extents(ctx context.Context, off, length int64) ([]nbd.Extent, error) {
	s := time.Now()
	ext, err := x.Export.Extents(ctx, off, length)
	x.extents.Done(s, 0, err != nil)
	return ext, err
}

func okBytes(n int, err error) int {
	if err != nil {
		return 0
	}
	return n
}
