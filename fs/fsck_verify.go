package fs

import (
	"context"
	"sort"

	"ebbfs.dev/ebbfs/segment"
	"ebbfs.dev/ebbfs/segread"
)

// fsckRunBytes caps the stored bytes one verification read fetches: a
// segment's frames are checked a run at a time, with one ranged GET per
// run rather than one per frame (a filesystem of 32 KiB frames would
// otherwise cost a request per 32 KiB read).
const fsckRunBytes = 8 << 20

// verifyFrames reads and authenticates the frames refs point at (one
// segment's, any order) and returns those that fail, each with its error.
// A run that fails is read again a frame at a time, so that every bad
// frame is named and no good one is.
func verifyFrames(ctx context.Context, rd *segread.Reader, refs []fsckRef) (bad []fsckRef, errs []error) {
	refs = append([]fsckRef(nil), refs...)
	sort.Slice(refs, func(i, j int) bool { return refs[i].p.Offset < refs[j].p.Offset })
	for len(refs) > 0 {
		n := 1
		for n < len(refs) && refs[n].p.End()-uint64(refs[0].p.Offset) <= fsckRunBytes && uint64(refs[n].p.Offset) >= refs[n-1].p.End() {
			n++
		}
		run := refs[:n]
		refs = refs[n:]
		if verifyRun(ctx, rd, run) == nil {
			continue
		}
		for _, x := range run {
			if _, err := readFrame(ctx, rd, x.id, x.p); err != nil {
				bad = append(bad, x)
				errs = append(errs, err)
			}
		}
	}
	return bad, errs
}

// verifyRun reads a run of frames (offset order, not overlapping) into
// buffers of its own, which leaves the reader's caches alone.
func verifyRun(ctx context.Context, rd *segread.Reader, run []fsckRef) error {
	ids := make([]segment.FrameID, len(run))
	ps := make([]segment.Pointer, len(run))
	bufs := make([][]byte, len(run))
	for i, x := range run {
		ids[i], ps[i] = x.id, x.p
		bufs[i] = make([]byte, x.p.PlainLen)
	}
	_, err := rd.Read(ctx, &segread.Request{IDs: ids, Ptrs: ps, Bufs: bufs})
	return err
}
