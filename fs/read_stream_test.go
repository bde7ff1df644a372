package fs

import "testing"

// TestReadStream: reads that finish out of order stay in their stream
// (and one from the file's start is read ahead at once);
// a stream away from the file's start is read ahead from its third read
// on; a read far from the stream starts another; random reads that land
// near each other once do not start a read-ahead.
func TestReadStream(t *testing.T) {
	const M = 1 << 20
	var s readStream
	step := func(off, end int64, wantLen int64, wantAhead bool) {
		t.Helper()
		l, ahead := s.advance(off, end)
		if l != wantLen || ahead != wantAhead {
			t.Fatalf("read [%d,%d): stream of %d, ahead %v; want %d, %v", off, end, l, ahead, wantLen, wantAhead)
		}
	}
	step(M, 2*M, M, false) // finished before [0, 1 MiB)
	step(0, M, 2*M, true)  // a stream from the file's start
	step(3*M, 4*M, 4*M, true)
	step(2*M, 3*M, 4*M, true)
	if !s.random(5*M) || s.random(3*M) {
		t.Fatal("random: a read is random unless it starts where the last one to finish ended")
	}
	// Far away: a new stream, read ahead from its third read.
	step(100*M, 101*M, M, false)
	step(101*M, 102*M, 2*M, false)
	step(102*M, 103*M, 3*M, true)
	// Random reads: one near the last does not make a stream.
	step(500*M, 500*M+4096, 4096, false)
	step(502*M, 502*M+4096, 2*M+4096, false)
	step(900*M, 900*M+4096, 4096, false)
	// Reading the last read's bytes again is no step: a read nearby
	// after two such repeats is the stream's second, not its third.
	step(900*M, 900*M+4096, 4096, false)
	step(900*M, 900*M+4096, 4096, false)
	step(901*M, 901*M+4096, M+4096, false)
	step(902*M, 902*M+4096, 2*M+4096, true)
}

// TestReadAheadWindowGrows: behind a remote store a stream's window
// starts at readAheadFirst, is twice the stream from then on, and stops
// at readAheadWindow; a local store's is fixed.
func TestReadAheadWindowGrows(t *testing.T) {
	const M = 1 << 20
	e := &Engine{}
	for _, c := range []struct{ stream, window int64 }{{M, readAheadFirst}, {2 * M, readAheadFirst}, {5 * M, 10 * M}, {16 * M, readAheadWindow}, {1 << 30, readAheadWindow}} {
		w, least := e.readAheadSpan(c.stream)
		if w != c.window || least <= 0 || least > readAheadMin || least > w/2 {
			t.Fatalf("stream of %d: window %d, least %d; want window %d", c.stream, w, least, c.window)
		}
	}
	e.local = true
	if w, _ := e.readAheadSpan(M); w != readAheadLocalWindow {
		t.Fatalf("local store: window %d, want %d", w, readAheadLocalWindow)
	}
}
