package fuse

import (
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"

	"ebbfs.dev/ebbfs/internal/stats"
)

// statusFS answers every write with st.
type statusFS struct {
	fuse.RawFileSystem
	st fuse.Status
}

func (s *statusFS) Write(<-chan struct{}, *fuse.WriteIn, []byte) (uint32, fuse.Status) {
	return 0, s.st
}

// TestOpErrorsLeaveOutAnswersAndInterrupts: the error tally counts
// failures, not answers (ENOENT, ENODATA) and not interrupted calls
// (EINTR, which changed nothing and which the caller retries).
func TestOpErrorsLeaveOutAnswersAndInterrupts(t *testing.T) {
	for _, c := range []struct {
		st     fuse.Status
		counts bool
	}{
		{fuse.OK, false}, {fuse.ENOENT, false}, {fuse.ENOATTR, false}, {fuse.EINTR, false},
		{fuse.EIO, true}, {fuse.Status(28), true}, // ENOSPC
		{fuse.EPERM, true},
	} {
		ops := stats.NewOps()
		raw := &statusFS{RawFileSystem: fuse.NewDefaultRawFileSystem(), st: c.st}
		tf := newTimedFS(raw, ops)
		if _, st := tf.Write(nil, &fuse.WriteIn{}, []byte("x")); st != c.st {
			t.Fatalf("status %v passed on as %v", c.st, st)
		}
		snap := ops.Snapshot()["write"]
		if snap.Count != 1 || (snap.Errors == 1) != c.counts {
			t.Errorf("status %v: count %d, errors %d; counted as an error: want %v", c.st, snap.Count, snap.Errors, c.counts)
		}
	}
}
