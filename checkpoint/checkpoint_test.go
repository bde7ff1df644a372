package checkpoint

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// fakePublisher hands out increasing manifest sequences.
type fakePublisher struct {
	mu    sync.Mutex
	seq   uint64
	calls int
	err   error
}

func (p *fakePublisher) Publish(context.Context) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if p.err != nil {
		return 0, p.err
	}
	p.seq++
	return p.seq, nil
}

func TestValidName(t *testing.T) {
	good := []string{"a", "nightly-2030.01.02", "A_b-C.9", strings.Repeat("x", 128), "..."}
	bad := []string{"", ".", "..", "a/b", "a b", "ü", strings.Repeat("x", 129), "a\x00", "../x"}
	for _, n := range good {
		if err := ValidName(n); err != nil {
			t.Errorf("ValidName(%q) = %v, want nil", n, err)
		}
	}
	for _, n := range bad {
		if err := ValidName(n); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidName(%q) = %v, want ErrInvalidName", n, err)
		}
	}
	if Key("x") != "checkpoints/x" {
		t.Fatalf("Key = %q", Key("x"))
	}
}

func TestCreateListGetDelete(t *testing.T) {
	ctx := context.Background()
	s := objstore.NewMem()
	p := &fakePublisher{seq: 6}

	r1, err := Create(ctx, s, p, "keep", Persistent, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if r1.ManifestSeq != 7 || r1.Kind != Persistent || !r1.CreateTime.Equal(t0) || !r1.ExpireTime.IsZero() {
		t.Fatalf("persistent record = %+v", r1)
	}
	r2, err := Create(ctx, s, p, "reader-1", Ephemeral, 5*time.Minute, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if r2.ManifestSeq != 8 || r2.Span() != 5*time.Minute {
		t.Fatalf("ephemeral record = %+v", r2)
	}

	// Existing name: clear error, and no publication.
	calls := p.calls
	if _, err := Create(ctx, s, p, "keep", Ephemeral, time.Minute, t0); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate Create = %v, want ErrExists", err)
	}
	if p.calls != calls {
		t.Fatalf("duplicate Create published")
	}
	// Bad input: errors, no publication, nothing written.
	for _, c := range []struct {
		name string
		kind Kind
		ttl  time.Duration
	}{{"a/b", Persistent, 0}, {"x", "weird", 0}, {"x", Ephemeral, 0}, {"x", Ephemeral, 31 * 24 * time.Hour}} {
		if _, err := Create(ctx, s, p, c.name, c.kind, c.ttl, t0); err == nil {
			t.Errorf("Create(%q, %q, %v) succeeded", c.name, c.kind, c.ttl)
		}
	}
	if p.calls != calls {
		t.Fatalf("invalid Create published")
	}
	// A failing publication writes no record.
	p.err = errors.New("store down")
	if _, err := Create(ctx, s, p, "late", Persistent, 0, t0); err == nil {
		t.Fatal("Create with failing publisher succeeded")
	}
	p.err = nil
	if _, err := Get(ctx, s, "late"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after failed create = %v, want ErrNotFound", err)
	}

	recs, err := List(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0] != r1 || recs[1] != r2 {
		t.Fatalf("List = %+v, want [%+v %+v]", recs, r1, r2)
	}
	got, err := Get(ctx, s, "reader-1")
	if err != nil || got != r2 {
		t.Fatalf("Get = %+v, %v; want %+v", got, err, r2)
	}
	raw, _ := s.Get(ctx, "checkpoints/keep")
	if strings.Contains(string(raw), "expire_time") || !strings.Contains(string(raw), `"manifest_seq":7`) {
		t.Fatalf("persistent record JSON = %s", raw)
	}

	if err := Delete(ctx, s, "keep"); err != nil {
		t.Fatal(err)
	}
	if err := Delete(ctx, s, "keep"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Delete = %v, want ErrNotFound", err)
	}
	recs, err = List(ctx, s)
	if err != nil || len(recs) != 1 || recs[0].Name != "reader-1" {
		t.Fatalf("List after delete = %+v, %v", recs, err)
	}
}

func TestListNamesMalformedRecord(t *testing.T) {
	ctx := context.Background()
	for name, body := range map[string]string{
		"junk":     "not json",
		"unknown":  `{"format":1,"name":"unknown","kind":"persistent","manifest_seq":3,"create_time":"2030-01-01T00:00:00Z","extra":1}`,
		"format2":  `{"format":2,"name":"format2","kind":"persistent","manifest_seq":3,"create_time":"2030-01-01T00:00:00Z"}`,
		"renamed":  `{"format":1,"name":"other","kind":"persistent","manifest_seq":3,"create_time":"2030-01-01T00:00:00Z"}`,
		"kind":     `{"format":1,"name":"kind","kind":"forever","manifest_seq":3,"create_time":"2030-01-01T00:00:00Z"}`,
		"seq0":     `{"format":1,"name":"seq0","kind":"persistent","manifest_seq":0,"create_time":"2030-01-01T00:00:00Z"}`,
		"pexpires": `{"format":1,"name":"pexpires","kind":"persistent","manifest_seq":3,"create_time":"2030-01-01T00:00:00Z","expire_time":"2030-01-02T00:00:00Z"}`,
		"a b":      `{}`,
	} {
		s := objstore.NewMem()
		if _, err := Create(ctx, s, &fakePublisher{}, "fine", Persistent, 0, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(ctx, Key(name), []byte(body), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := List(ctx, s)
		if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrInvalidName) {
			t.Errorf("%s: List = %v, want a malformed-record error", name, err)
			continue
		}
		if !strings.Contains(err.Error(), Key(name)) && !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %q does not name the record", name, err)
		}
	}
}

// failGets makes Get of one key fail.
type failGets struct {
	objstore.Store
	key string
}

func (f failGets) Get(ctx context.Context, key string) ([]byte, error) {
	if key == f.key {
		return nil, errors.New("injected read failure")
	}
	return f.Store.Get(ctx, key)
}

func TestListUnreadableRecordErrors(t *testing.T) {
	ctx := context.Background()
	s := objstore.NewMem()
	p := &fakePublisher{}
	for _, n := range []string{"a", "b"} {
		if _, err := Create(ctx, s, p, n, Persistent, 0, t0); err != nil {
			t.Fatal(err)
		}
	}
	_, err := List(ctx, failGets{s, Key("b")})
	if err == nil || !strings.Contains(err.Error(), "checkpoints/b") {
		t.Fatalf("List = %v, want an error naming checkpoints/b", err)
	}
}

func TestRenewMovesExpireNotCreate(t *testing.T) {
	ctx := context.Background()
	s := objstore.NewMem()
	r, err := Create(ctx, s, &fakePublisher{}, "r", Ephemeral, time.Minute, t0)
	if err != nil {
		t.Fatal(err)
	}
	later := t0.Add(40 * time.Second)
	if err := Renew(ctx, s, "r", 2*time.Minute, later); err != nil {
		t.Fatal(err)
	}
	got, err := Get(ctx, s, "r")
	if err != nil {
		t.Fatal(err)
	}
	if !got.CreateTime.Equal(r.CreateTime) {
		t.Fatalf("CreateTime moved: %v -> %v", r.CreateTime, got.CreateTime)
	}
	if want := later.Add(2 * time.Minute); !got.ExpireTime.Equal(want) {
		t.Fatalf("ExpireTime = %v, want %v", got.ExpireTime, want)
	}
	if got.ManifestSeq != r.ManifestSeq || got.Kind != Ephemeral {
		t.Fatalf("renew changed other fields: %+v -> %+v", r, got)
	}
	// Persistent and missing records are not renewed.
	if _, err := Create(ctx, s, &fakePublisher{}, "p", Persistent, 0, t0); err != nil {
		t.Fatal(err)
	}
	if err := Renew(ctx, s, "p", time.Minute, later); err == nil {
		t.Fatal("Renew of a persistent checkpoint succeeded")
	}
	if err := Renew(ctx, s, "nope", time.Minute, later); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Renew missing = %v, want ErrNotFound", err)
	}
	// A renewal that would put expire before create is refused.
	if err := Renew(ctx, s, "r", time.Second, t0.Add(-time.Hour)); err == nil {
		t.Fatal("Renew to before create_time succeeded")
	}
}

// raceStore changes the record between Renew's read and write.
type raceStore struct {
	objstore.Store
	once sync.Once
}

func (r *raceStore) Get(ctx context.Context, key string) ([]byte, error) {
	b, err := r.Store.Get(ctx, key)
	r.once.Do(func() {
		_, _ = r.Store.Put(ctx, key, append([]byte(nil), b[:len(b)-1]...), objstore.PutOptions{})
	})
	return b, err
}

func TestRenewIsConditional(t *testing.T) {
	ctx := context.Background()
	m := objstore.NewMem()
	if _, err := Create(ctx, m, &fakePublisher{}, "r", Ephemeral, time.Minute, t0); err != nil {
		t.Fatal(err)
	}
	err := Renew(ctx, &raceStore{Store: m}, "r", time.Minute, t0.Add(time.Second))
	if !objstore.IsPreconditionFailed(err) {
		t.Fatalf("Renew over a concurrent change = %v, want precondition failed", err)
	}
}

func eph(name string, create time.Time, span time.Duration) Record {
	return Record{Name: name, Kind: Ephemeral, ManifestSeq: 1, CreateTime: create, ExpireTime: create.Add(span)}
}

func TestHorizonPersistentPauses(t *testing.T) {
	h, err := HorizonOf([]Record{
		eph("r", t0, time.Minute),
		{Name: "zeta", Kind: Persistent, ManifestSeq: 2, CreateTime: t0},
		{Name: "alpha", Kind: Persistent, ManifestSeq: 3, CreateTime: t0},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !h.Paused || len(h.PinnedBy) != 2 || h.PinnedBy[0] != "alpha" || h.PinnedBy[1] != "zeta" {
		t.Fatalf("horizon = %+v, want paused by [alpha zeta]", h)
	}
	h, err = HorizonOf([]Record{eph("r", t0, time.Minute)})
	if err != nil || h.Paused || len(h.PinnedBy) != 0 {
		t.Fatalf("ephemeral-only horizon = %+v, %v; want not paused", h, err)
	}
}

func TestHorizonGraceFloor60s(t *testing.T) {
	for _, recs := range [][]Record{nil, {eph("r", t0, 0)}, {eph("r", t0, 29*time.Second)}, {eph("r", t0, 30*time.Second)}} {
		h, err := HorizonOf(recs)
		if err != nil {
			t.Fatal(err)
		}
		if h.Grace != 60*time.Second || h.GraceBy != "" {
			t.Fatalf("HorizonOf(%+v) = grace %v by %q, want the 60s floor", recs, h.Grace, h.GraceBy)
		}
	}
}

func TestHorizonGraceSpanPlus30s(t *testing.T) {
	h, err := HorizonOf([]Record{
		eph("a", t0, 31*time.Second),
		eph("b", t0.Add(time.Hour), 10*time.Minute), // the longest span, not the latest expiry
		eph("c", t0.Add(2*time.Hour), 2*time.Minute),
		{Name: "p", Kind: Persistent, ManifestSeq: 1, CreateTime: t0.Add(-90 * 24 * time.Hour)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if h.Grace != 10*time.Minute+30*time.Second {
		t.Fatalf("Grace = %v, want 10m30s", h.Grace)
	}
	if want := t0.Add(time.Hour + 10*time.Minute); h.GraceBy != "b" || !h.GraceByExpires.Equal(want) {
		t.Fatalf("grace set by %q expiring %v, want b expiring %v", h.GraceBy, h.GraceByExpires, want)
	}
	h, _ = HorizonOf([]Record{eph("a", t0, 31*time.Second)})
	if h.Grace != 61*time.Second {
		t.Fatalf("Grace = %v, want 61s", h.Grace)
	}
}

func TestHorizonInvalidSpanErrors(t *testing.T) {
	cases := map[string]Record{
		"expire before create": {Name: "x", Kind: Ephemeral, ManifestSeq: 1, CreateTime: t0, ExpireTime: t0.Add(-time.Second)},
		"zero create":          {Name: "x", Kind: Ephemeral, ManifestSeq: 1, ExpireTime: t0},
		"zero expire":          {Name: "x", Kind: Ephemeral, ManifestSeq: 1, CreateTime: t0},
		"absurd":               eph("x", t0, 30*24*time.Hour+time.Second),
		"unknown kind":         {Name: "x", Kind: "forever", ManifestSeq: 1, CreateTime: t0},
	}
	for what, r := range cases {
		if _, err := HorizonOf([]Record{eph("ok", t0, time.Minute), r}); err == nil {
			t.Errorf("%s: HorizonOf succeeded", what)
		} else if !strings.Contains(err.Error(), `"x"`) {
			t.Errorf("%s: error %q does not name the record", what, err)
		}
	}
	if _, err := HorizonOf([]Record{eph("max", t0, MaxSpan)}); err != nil {
		t.Fatalf("a 30-day span is valid: %v", err)
	}
}

func TestExpiredAndPrune(t *testing.T) {
	ctx := context.Background()
	s := objstore.NewMem()
	p := &fakePublisher{}
	mk := func(name string, kind Kind, ttl time.Duration, at time.Time) {
		t.Helper()
		if _, err := Create(ctx, s, p, name, kind, ttl, at); err != nil {
			t.Fatal(err)
		}
	}
	mk("old", Ephemeral, time.Minute, t0)                     // expires t0+1m; prunable after t0+2m
	mk("recent", Ephemeral, time.Minute, t0.Add(time.Minute)) // expires t0+2m; prunable after t0+3m
	mk("keep", Persistent, 0, t0)
	now := t0.Add(2*time.Minute + time.Second)

	recs, err := List(ctx, s)
	if err != nil || len(recs) != 3 {
		t.Fatalf("List = %v, %v", recs, err)
	}
	exp := map[string]bool{}
	for _, r := range recs {
		exp[r.Name] = Expired(r, now)
	}
	if !exp["old"] || !exp["recent"] || exp["keep"] {
		t.Fatalf("Expired = %v, want old and recent expired, keep not", exp)
	}
	if Expired(recs[2], t0) { // "recent" at t0: not yet
		t.Fatalf("%s expired at t0", recs[2].Name)
	}

	// A malformed record is reported, never deleted, and does not stop
	// pruning of the others.
	if _, err := s.Put(ctx, Key("junk"), []byte("{"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	pruned, err := Prune(ctx, s, now)
	if err == nil || !strings.Contains(err.Error(), "checkpoints/junk") {
		t.Fatalf("Prune error = %v, want one naming checkpoints/junk", err)
	}
	if len(pruned) != 1 || pruned[0] != "old" {
		t.Fatalf("Prune = %v, want [old]", pruned)
	}
	if _, err := s.Head(ctx, Key("junk")); err != nil {
		t.Fatalf("malformed record deleted: %v", err)
	}
	for _, n := range []string{"recent", "keep"} {
		if _, err := Get(ctx, s, n); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
	}
	if _, err := Get(ctx, s, "old"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("old still present: %v", err)
	}
}

func TestRenewerRenewsRepinsAndRemoves(t *testing.T) {
	ctx := context.Background()
	s := objstore.NewMem()
	clk := clock.NewFake(t0)
	var mu sync.Mutex
	seq := uint64(5)
	r, err := NewRenewer(RenewerOptions{Store: s, Name: "reader-h1", TTL: 3 * time.Minute, Clock: clk,
		ManifestSeq: func() uint64 { mu.Lock(); defer mu.Unlock(); return seq }})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := Get(ctx, s, "reader-h1")
	if err != nil || got.ManifestSeq != 5 || got.Kind != Ephemeral || got.Span() != 3*time.Minute {
		t.Fatalf("record after Start = %+v, %v", got, err)
	}

	// One renewal per TTL/3: expire moves, create stays.
	for i := 1; i <= 3; i++ {
		n := i
		testutil.Eventually(t, time.Minute, "renewal", func() bool {
			if r.Renewals() >= n {
				return true
			}
			clk.Advance(time.Minute / 10)
			return false
		})
	}
	got, _ = Get(ctx, s, "reader-h1")
	if !got.CreateTime.Equal(t0) || !got.ExpireTime.After(t0.Add(3*time.Minute)) {
		t.Fatalf("after renewals: %+v", got)
	}

	// The replica moved to a newer manifest: the record is re-pinned.
	mu.Lock()
	seq = 9
	mu.Unlock()
	n := r.Renewals()
	testutil.Eventually(t, time.Minute, "re-pin", func() bool {
		if r.Renewals() > n {
			return true
		}
		clk.Advance(time.Minute / 10)
		return false
	})
	got, _ = Get(ctx, s, "reader-h1")
	if got.ManifestSeq != 9 || got.Span() != 3*time.Minute || !got.CreateTime.After(t0) {
		t.Fatalf("after re-pin: %+v", got)
	}

	// Pruned behind its back: recreated at the next renewal.
	if err := s.Delete(ctx, Key("reader-h1")); err != nil {
		t.Fatal(err)
	}
	n = r.Renewals()
	testutil.Eventually(t, time.Minute, "re-create", func() bool {
		if r.Renewals() > n {
			return true
		}
		clk.Advance(time.Minute / 10)
		return false
	})
	if _, err := Get(ctx, s, "reader-h1"); err != nil {
		t.Fatalf("record not re-created: %v", err)
	}

	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Get(ctx, s, "reader-h1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("record after Close = %v, want removed", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestRenewerRefusesPersistentName(t *testing.T) {
	ctx := context.Background()
	s := objstore.NewMem()
	if _, err := Create(ctx, s, &fakePublisher{}, "taken", Persistent, 0, t0); err != nil {
		t.Fatal(err)
	}
	r, err := NewRenewer(RenewerOptions{Store: s, Name: "taken", ManifestSeq: func() uint64 { return 1 }})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err == nil {
		t.Fatal("Renewer took over a persistent checkpoint")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := Get(ctx, s, "taken"); err != nil || got.Kind != Persistent {
		t.Fatalf("persistent record = %+v, %v", got, err)
	}
	if _, err := NewRenewer(RenewerOptions{Store: s, Name: "../x", ManifestSeq: func() uint64 { return 1 }}); err == nil {
		t.Fatal("NewRenewer accepted a bad name")
	}
}

func FuzzDecodeRecord(f *testing.F) {
	b, _ := encodeRecord(eph("n", t0, time.Minute))
	f.Add(string(b))
	f.Add(`{"format":1}`)
	f.Fuzz(func(t *testing.T, body string) {
		r, err := decodeRecord(Key("n"), []byte(body))
		if err != nil {
			return
		}
		b, err := encodeRecord(r)
		if err != nil {
			t.Fatalf("decoded record does not re-encode: %+v: %v", r, err)
		}
		r2, err := decodeRecord(Key("n"), b)
		if err != nil || !r2.CreateTime.Equal(r.CreateTime) || r2.ManifestSeq != r.ManifestSeq {
			t.Fatalf("round trip: %+v -> %+v, %v", r, r2, err)
		}
	})
}

// racingPublisher writes a record of the same name while publishing, as a
// concurrent Create would.
type racingPublisher struct {
	s    objstore.Store
	name string
}

func (p racingPublisher) Publish(ctx context.Context) (uint64, error) {
	_, err := Create(ctx, p.s, &fakePublisher{seq: 40}, p.name, Persistent, 0, t0)
	return 50, err
}

func TestCreateLosesRaceCleanly(t *testing.T) {
	ctx := context.Background()
	s := objstore.NewMem()
	_, err := Create(ctx, s, racingPublisher{s, "n"}, "n", Ephemeral, time.Minute, t0)
	if !errors.Is(err, ErrExists) {
		t.Fatalf("Create = %v, want ErrExists", err)
	}
	got, err := Get(ctx, s, "n")
	if err != nil || got.Kind != Persistent || got.ManifestSeq != 41 {
		t.Fatalf("winner's record = %+v, %v; want it untouched", got, err)
	}
}
