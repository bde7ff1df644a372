package segread

import (
	"context"
	"fmt"

	"ebbfs.dev/ebbfs/segment"
)

// A Request names frames to read and says what to read of them and where
// it goes. Read does not keep it.
type Request struct {
	// The frames: a run of one segment in offset order (IDs[i] sealed the
	// frame Ptrs[i] points at), or, with Ptrs nil, the one frame Ptr,
	// sealed for ID.
	IDs  []segment.FrameID
	Ptrs []segment.Pointer
	ID   segment.FrameID
	Ptr  segment.Pointer

	// Want is what to read of them: plaintexts (the zero value), the
	// caches filled, sealed frames, or sealed bytes ahead of a stream.
	Want Want

	// From and To (To > 0) ask for plaintext bytes [From, To) of the one
	// frame only, 0 <= From < To <= Ptr.PlainLen; a pieced frame that the
	// memory cache does not hold is then read piece-wise where that reads
	// less (from the disk cache, or a store without one).
	From, To int

	// Buf (one frame: To-From bytes, or Ptr.PlainLen without a range) or
	// Bufs (a run: Bufs[i] of Ptrs[i].PlainLen bytes) receive the
	// plaintexts, decrypted into them where they are read from the store
	// or the disk cache; a run read so caches nothing. Without them, the
	// plaintexts are returned in Result, shared with the memory cache:
	// they must not be modified.
	Buf  []byte
	Bufs [][]byte

	// Lend (runs of plaintexts) has the plaintexts the memory cache holds
	// lent (Result.Loan) rather than copied into Bufs or handed out for
	// good: the caller reads them until it releases the loan, and their
	// buffers then serve other runs. With Bufs, Result.Frames[i] is the
	// lent plaintext of frame i, or nil where it was written into Bufs[i].
	Lend bool
}

// Want is what a Request reads.
type Want uint8

const (
	// Plain reads plaintexts: from the memory cache, the disk cache, or
	// the store with one coalesced ranged GET per run (gaps up to
	// MaxRunGap read through) authenticated on every core, and caches
	// what it fetched (but see Request.Bufs).
	Plain Want = iota
	// Fill reads a run as Plain does, into the caches only.
	Fill
	// Sealed returns a run's frames as stored, for repack to copy
	// verbatim, with one ranged GET per run; the caches are neither
	// consulted nor filled, and the frames are not authenticated.
	Sealed
	// Verified is Sealed with every frame authenticated for its ID
	// (without decompressing), so repack never copies a damaged frame.
	Verified
	// FillPieces (one frame, with From and To) fetches only the pieces of
	// a pieced frame that hold [From, To), into a small cache of their
	// own that the next Plain request of that range is served from
	// (piececache.go), unless a cache can serve that request already.
	FillPieces
	// Ahead reads a run's sealed bytes for the reads to come, but not
	// frames that read-ahead spans already cover, and returns when they
	// are read; errors are left to those reads. With a disk cache, it
	// reads only a run the cache holds whole, from the cache;
	// Result.Started says whether it did (any other run is for Fill).
	Ahead
)

// Result is what Read returns.
type Result struct {
	// Frame is the one frame's plaintext (or range of it), when the
	// Request had no Buf.
	Frame []byte
	// Frames are a run's frames (plaintexts or sealed) in the order of
	// Ptrs, when the Request had no Bufs; with Bufs and Lend, the lent
	// ones.
	Frames [][]byte
	// Loan holds Frames, with Lend, until released. Releasing a nil Loan
	// does nothing.
	Loan *Loan
	// Started: an Ahead request read the run's sealed bytes.
	Started bool
}

// Read serves req. Corruption is an error wrapping segment.ErrCorrupt
// that names the object; a missing object wraps objstore.ErrNotFound.
func (r *Reader) Read(ctx context.Context, req *Request) (Result, error) {
	if req.Ptrs == nil {
		return r.readOne(ctx, req)
	}
	if req.Want != Ahead && req.Want != Sealed && len(req.IDs) != len(req.Ptrs) {
		return Result{}, fmt.Errorf("segment run: %d ids for %d pointers", len(req.IDs), len(req.Ptrs))
	}
	var res Result
	var err error
	switch req.Want {
	case Plain:
		if req.Bufs != nil {
			res.Frames, res.Loan, err = r.readRunTo(ctx, req.IDs, req.Ptrs, req.Bufs, req.Lend)
			if !req.Lend {
				res.Loan.Release()
				res.Loan = nil
			}
		} else if req.Lend {
			res.Frames, res.Loan, err = r.readRunLent(ctx, req.IDs, req.Ptrs)
		} else {
			res.Frames, err = r.readRun(ctx, req.IDs, req.Ptrs, nil)
		}
	case Fill:
		err = r.fetch(ctx, req.IDs, req.Ptrs)
	case Sealed:
		res.Frames, err = r.readSealedRun(ctx, req.Ptrs)
	case Verified:
		res.Frames, err = r.readVerifiedRun(ctx, req.IDs, req.Ptrs)
	case Ahead:
		res.Started = r.readAhead(ctx, req.Ptrs)
	default:
		err = fmt.Errorf("segment run: unknown request kind %d", req.Want)
	}
	if err != nil {
		return Result{}, err
	}
	return res, nil
}

// readOne serves a request for the one frame req.Ptr.
func (r *Reader) readOne(ctx context.Context, req *Request) (Result, error) {
	if req.Want == FillPieces {
		return Result{}, r.fillPieces(ctx, req.ID, req.Ptr, req.From, req.To)
	}
	if req.Want != Plain {
		return Result{}, fmt.Errorf("segment %s: request kind %d for one frame", segment.Key(req.Ptr.Segment), req.Want)
	}
	from, to := req.From, req.To
	if to == 0 {
		if req.Buf == nil {
			b, err := r.readFrame(ctx, req.ID, req.Ptr)
			return Result{Frame: b}, err
		}
		to = int(req.Ptr.PlainLen)
	}
	if req.Buf != nil && len(req.Buf) != to-from {
		return Result{}, fmt.Errorf("segment %s: a buffer of %d bytes for [%d,%d)", segment.Key(req.Ptr.Segment), len(req.Buf), from, to)
	}
	b, err := r.readPart(ctx, req.ID, req.Ptr, from, to, req.Buf)
	if err != nil || req.Buf != nil {
		return Result{}, err
	}
	return Result{Frame: b}, nil
}
