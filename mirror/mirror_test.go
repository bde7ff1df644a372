package mirror

import (
	"context"
	"errors"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment/segtest"
)

func newTestMirror(t *testing.T, src, dst objstore.Store, k *keys.Keys, clk clock.Clock) *Mirror {
	t.Helper()
	ctx := context.Background()
	if _, err := src.Put(ctx, keys.DescriptorKey, []byte(`{"format":4}`), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	m, err := Open(ctx, Options{Source: src, Dest: dst, Keys: k, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A second mirror process into the same store loses its first save and
// reports ErrOtherMirror; a mirror of another filesystem is refused.
func TestSecondMirrorRefused(t *testing.T) {
	ctx := context.Background()
	src, dst := objstore.NewMem(), objstore.NewMem()
	k := segtest.Keys(t)
	clk := clock.NewFake(time.Unix(1e9, 0))
	a := newTestMirror(t, src, dst, k, clk)
	b := newTestMirror(t, src, dst, k, clk)
	if _, err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pass(ctx); !errors.Is(err, ErrOtherMirror) {
		t.Fatalf("the second mirror's pass: %v, want ErrOtherMirror", err)
	}
	if _, err := Open(ctx, Options{Source: src, Dest: dst, Keys: segtest.Keys(t), Clock: clk}); err == nil {
		t.Fatal("a mirror of another filesystem into the same store was accepted")
	}
}

// The limiter lets a second's worth through at once and spreads the rest.
func TestLimiterPaces(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	l := newLimiter(clk, 100)
	if d := l.reserve(100); d > 0 {
		t.Fatalf("the first second's bytes wait %s", d)
	}
	if d := l.reserve(200); d != 2*time.Second {
		t.Fatalf("200 bytes past the burst at 100 B/s wait %s, want 2s", d)
	}
	clk.Advance(10 * time.Second)
	if d := l.reserve(50); d > 0 {
		t.Fatalf("after an idle while, 50 bytes wait %s", d)
	}
	if d := newLimiter(clk, 0).reserve(1 << 30); d != 0 {
		t.Fatalf("unbounded waits %s", d)
	}
}
