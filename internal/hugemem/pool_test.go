package hugemem

import (
	"bytes"
	"testing"
)

func TestPoolReusesAndReleases(t *testing.T) {
	const size = 3 << 20
	p := NewPool(size, 1, 2)
	a, b := p.Get(), p.Get()
	if len(a) != size || cap(a) != size || len(b) != size {
		t.Fatalf("buffers of %d/%d and %d bytes, want %d", len(a), cap(a), len(b), size)
	}
	if &a[0] == &b[0] {
		t.Fatal("two buffers in use share their memory")
	}
	for i := range a {
		a[i], b[i] = 0xa5, 0x5a
	}
	c := p.Get() // past max: the Go heap's
	if mapped, _, _ := p.Stats(); mapped > 2 {
		t.Fatalf("%d buffers mapped, more than the pool's max of 2", mapped)
	}
	p.Put(c)
	p.Put(a[:10:10]) // a slice of a buffer from its first byte gives it back
	p.Put(b)
	mapped, warm, cold := p.Stats()
	if mapped == 2 && (warm != 1 || cold != 1) {
		t.Fatalf("after two buffers came back: %d warm, %d cold; want 1 and 1 (keep 1)", warm, cold)
	}
	// The warm buffer comes back first, as its last user left it; then
	// the cold one, whose pages went back to the kernel: zeroes.
	w := p.Get()
	if &w[0] != &a[0] || w[size-1] != 0xa5 {
		t.Fatal("Get did not return the warm buffer, with its bytes, first")
	}
	z := p.Get()
	if &z[0] != &b[0] {
		t.Fatal("Get did not reuse the cold buffer")
	}
	if mapped == 2 && !bytes.Equal(z, make([]byte, size)) {
		t.Fatal("a cold buffer still holds the bytes of its last user")
	}
	if m, _, _ := p.Stats(); m != mapped {
		t.Fatalf("reuse mapped more buffers: %d, was %d", m, mapped)
	}
}

func TestPoolIgnoresForeignBuffers(t *testing.T) {
	p := NewPool(1<<20, 4, 4)
	p.Put(make([]byte, 1<<20)) // not the pool's: the collector's
	p.Put(make([]byte, 10))
	if _, warm, cold := p.Stats(); warm+cold != 0 {
		t.Fatalf("the pool took %d buffers it never made", warm+cold)
	}
}

func TestPoolRefusesDoublePut(t *testing.T) {
	p := NewPool(1<<20, 4, 4)
	b := p.Get()
	if mapped, _, _ := p.Stats(); mapped != 1 {
		t.Skip("the kernel refused the mapping: a heap buffer, not tracked")
	}
	p.Put(b)
	defer func() {
		if recover() == nil {
			t.Fatal("a buffer given back twice was taken")
		}
	}()
	p.Put(b)
}
