package fs

import "sync"

// A sequential reader's stream, as its reads show it. The kernel sends a
// stream's requests a few at a time (its own readahead and the next
// request) and they are served concurrently, so they need not finish in
// order: a read belongs to the stream when it starts within streamSlack
// of the furthest end the stream has reached, not only exactly there.
// Before, a read counted as sequential only if it began where the last
// read to finish had ended: two requests finishing out of order broke the
// stream, and read-ahead stopped (for the first 20 MiB of a 64 MiB file
// read in pairs of 1 MiB requests, fs TestStoreColdStreamFetchesOnce)
// until one happened to line up again.
//
// Behind a remote store the read-ahead window grows with the stream
// (readAheadSpan): a reader that stops early has not had 32 MiB fetched
// for it, and one that goes on reaches the full window after 16 MiB.

// streamSlack is how far from the stream's furthest end a read may start
// and still belong to it: two of the kernel's 1 MiB requests either side,
// with room for its 2 MiB readahead window (fs/fuse).
const streamSlack = 4 << 20

// streamReads is how many reads a stream that does not start at the
// beginning of the file needs before it is read ahead: random reads that
// happen to land near each other once do not start a read-ahead.
const streamReads = 3

// readStream tracks an inode's sequential reader.
type readStream struct {
	mu    sync.Mutex
	first int64 // where the last read to finish started
	last  int64 // where the last read to finish ended
	end   int64 // the furthest end of the stream's reads
	start int64 // where the stream started
	reads int   // reads in the stream

	missBlock int64 // 1 + the neighbourhood of the last random miss (read_locality.go); 0: none
	nearMiss  bool  // that miss was near the one before it
}

// random reports whether a read at off does not continue the last read
// to finish exactly (such a read's partial extents are read piece-wise).
func (s *readStream) random(off int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return off != s.last
}

// advance records a read of [off, end) and reports whether it continues
// a stream to read ahead of, and how long the stream is (from its start
// to its furthest end).
func (s *readStream) advance(off, end int64) (length int64, ahead bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reads > 0 && off >= s.first && end <= s.last {
		// A read again of (part of) the last one's bytes is no step
		// forward: two such reads and a third nearby made a "stream"
		// of random reads and fetched 2 MiB ahead of them.
		return s.end - s.start, false
	}
	s.first, s.last = off, end
	// An inode's first stream is one from the file's start.
	if s.reads == 0 && off != 0 || s.reads > 0 && (off < s.end-streamSlack || off > s.end+streamSlack) {
		s.start, s.end, s.reads = off, end, 1
		return end - off, false
	}
	s.start, s.end = min(s.start, off), max(s.end, end)
	s.reads++
	return s.end - s.start, s.start == 0 || s.reads >= streamReads
}

// readAheadSpan returns how far past a stream's read ending at end to
// read ahead and the least worth starting a read-ahead for, given the
// stream's length. On a local store both are fixed. Behind a remote
// store the window starts at readAheadFirst and is twice the stream's
// length from then on, up to readAheadWindow.
func (e *Engine) readAheadSpan(length int64) (window, least int64) {
	if e.local {
		return readAheadLocalWindow, readAheadLocalMin
	}
	window = min(max(readAheadFirst, 2*length), readAheadWindow)
	return window, min(readAheadMin, window/4)
}

// widen records a random read's miss at off, in neighbourhood b, and
// reports whether to fetch the whole neighbourhood (read_locality.go):
// when the file fits the disk cache, or when the last two random misses
// were each in the neighbourhood of the one before or next to it. One
// near miss is not enough: among the 256 neighbourhoods of a 512 MiB
// file, one random miss in 85 lands next to the one before by chance,
// and each such coincidence cost 2 MiB (random 4 KiB reads of a file ten
// times the disk cache fetched 25 KiB a read, 6x their pieces). A read
// that continues the last one is a stream's, which read-ahead serves.
func (s *readStream) widen(off, b int64, fits bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if off == s.last {
		return false
	}
	near := s.missBlock > 0 && s.missBlock-1 >= b-1 && s.missBlock-1 <= b+1
	twice := near && s.nearMiss
	s.missBlock, s.nearMiss = b+1, near
	return fits || twice
}
