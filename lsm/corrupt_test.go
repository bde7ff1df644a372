package lsm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/objstore"
)

// buildStore leaves a store with a manifest, tables and two journals.
func buildStore(t *testing.T) (*objstore.Mem, Options, uint64) {
	s := objstore.NewMem()
	k := testKeys(t)
	o := testOpts(t, s, k)
	o.PID = deadPID(t)
	db := mustOpen(t, o)
	for i := range 500 {
		set(t, db, fmt.Sprintf("i%04d", i), strings.Repeat("v", 50))
	}
	seq, err := db.Publish(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	set(t, db, "after", "1")
	barrier(t, db)
	set(t, db, "after2", "2")
	barrier(t, db)
	crash(db)
	o.PID = 0
	o.Dir = t.TempDir()
	return s, o, seq
}

func wantCorrupt(t *testing.T, o Options, object string) {
	t.Helper()
	o.Dir = t.TempDir()
	db, err := Open(context.Background(), o)
	if err == nil {
		db.Close()
		t.Fatalf("Open succeeded over corrupt %s", object)
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), object) {
		t.Fatalf("Open error %q does not name %s as corrupt", err, object)
	}
}

func TestTamperedJournal(t *testing.T) {
	s, o, _ := buildStore(t)
	js := keysUnder(t, s, journalPrefix)
	if len(js) == 0 {
		t.Fatal("no journals")
	}
	tamper(t, s, js[0], -3)
	wantCorrupt(t, o, js[0])
	// Nothing was deleted on doubt.
	if got := keysUnder(t, s, journalPrefix); len(got) != len(js) {
		t.Fatalf("journals %v after failed open, want %v", got, js)
	}
}

func TestJournalUnderWrongSeq(t *testing.T) {
	s, o, _ := buildStore(t)
	js := keysUnder(t, s, journalPrefix)
	ctx := context.Background()
	b, _ := s.Get(ctx, js[0])
	// Swap two journals' contents: AAD binding must catch it.
	b2, _ := s.Get(ctx, js[1])
	_, _ = s.Put(ctx, js[0], b2, objstore.PutOptions{})
	_, _ = s.Put(ctx, js[1], b, objstore.PutOptions{})
	wantCorrupt(t, o, js[0])
}

func TestTamperedManifest(t *testing.T) {
	s, o, seq := buildStore(t)
	tamper(t, s, manifestKey(seq), 40)
	wantCorrupt(t, o, manifestKey(seq))
}

func TestTamperedSST(t *testing.T) {
	s, o, _ := buildStore(t)
	ssts := keysUnder(t, s, sstPrefix)
	if len(ssts) == 0 {
		t.Fatal("no ssts")
	}
	tamper(t, s, ssts[0], sstHeaderLen+100)
	wantCorrupt(t, o, ssts[0])
}

func TestTruncatedSST(t *testing.T) {
	s, o, _ := buildStore(t)
	ssts := keysUnder(t, s, sstPrefix)
	ctx := context.Background()
	b, _ := s.Get(ctx, ssts[0])
	_, _ = s.Put(ctx, ssts[0], b[:len(b)-10], objstore.PutOptions{})
	wantCorrupt(t, o, ssts[0])
}

func TestMissingSSTNamed(t *testing.T) {
	s, o, _ := buildStore(t)
	ssts := keysUnder(t, s, sstPrefix)
	_ = s.Delete(context.Background(), ssts[0])
	o.Dir = t.TempDir()
	_, err := Open(context.Background(), o)
	if err == nil || !objstore.IsNotFound(err) || !strings.Contains(err.Error(), ssts[0]) {
		t.Fatalf("missing table: %v", err)
	}
}

func TestJournalGapRefusedForWriter(t *testing.T) {
	s, o, seq := buildStore(t)
	// Make a gap: a journal far ahead of the run.
	ctx := context.Background()
	js := keysUnder(t, s, journalPrefix)
	b, _ := s.Get(ctx, js[len(js)-1])
	_, _ = s.Put(ctx, journalKey(seq+10), b, objstore.PutOptions{})
	o.Dir = t.TempDir()
	_, err := Open(context.Background(), o)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "gap") {
		t.Fatalf("writer open over journal gap: %v", err)
	}
}

func TestSSTChunking(t *testing.T) {
	k := testKeys(t)
	for _, n := range []int{0, 1, 4095, 4096, 4097, 3*4096 + 5} {
		plain := make([]byte, n)
		for i := range plain {
			plain[i] = byte(i * 7)
		}
		obj := "meta/sst/x.sst"
		sealed := sealSST(k, obj, plain, 4096)
		got, err := openSST(k, obj, sealed)
		if err != nil || string(got) != string(plain) {
			t.Fatalf("n=%d: round trip failed: %v", n, err)
		}
		if _, err := openSST(k, "meta/sst/y.sst", sealed); err == nil {
			t.Fatalf("n=%d: opened under another name", n)
		}
		if n > 4096 {
			// Drop the last chunk and fix up the header length: the new
			// last chunk was sealed as non-final.
			cut := append([]byte(nil), sealed[:len(sealed)-(n%4096)-24]...)
			cut[8] = byte((n / 4096 * 4096))
			cut[9] = byte((n / 4096 * 4096) >> 8)
			if _, err := openSST(k, obj, cut); err == nil {
				t.Fatalf("n=%d: truncation at a chunk boundary accepted", n)
			}
		}
	}
}

func TestBarrierWaitsOutStoreOutage(t *testing.T) {
	os := &outageStore{Store: objstore.NewMem()}
	k := testKeys(t)
	o := testOpts(t, os, k)
	db := mustOpen(t, o)
	defer db.Close()
	set(t, db, "ia", "1")
	os.down.Store(true)
	go func() {
		time.Sleep(2 * time.Second)
		os.down.Store(false)
	}()
	start := time.Now()
	barrier(t, db)
	if el := time.Since(start); el < 1900*time.Millisecond {
		t.Fatalf("barrier returned after %v, during the outage", el)
	}
	if os.fails.Load() == 0 {
		t.Fatal("outage never hit")
	}
	if db.Pending() != 0 {
		t.Fatalf("pending %d after barrier", db.Pending())
	}

	// A barrier whose context ends during an outage fails and keeps the batch.
	set(t, db, "ib", "2")
	os.down.Store(true)
	ctx, cancel := withTimeout(300 * time.Millisecond)
	err := db.Barrier(ctx)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "stay queued") {
		t.Fatalf("barrier during outage: %v", err)
	}
	if db.Pending() != 1 {
		t.Fatalf("pending %d after failed barrier, want 1", db.Pending())
	}
	os.down.Store(false)
	barrier(t, db)
	crash(db)

	o2 := testOpts(t, os, k)
	o2.Host = "other"
	o2.Clock = &offsetClock{d: time.Minute}
	db2 := mustOpen(t, o2)
	defer db2.Close()
	wantVal(t, db2, "ia", "1")
	wantVal(t, db2, "ib", "2")
}

// Fault loop: fail the i-th store request of a publish+barrier sequence,
// for every i, and check the store always recovers consistently.
func TestFaultLoopPublish(t *testing.T) {
	for i := 1; ; i++ {
		fs := &failNth{Store: objstore.NewMem(), n: -1}
		k := testKeys(t)
		o := testOpts(t, fs, k)
		o.PID = deadPID(t)
		db := mustOpen(t, o)
		for j := range 100 {
			set(t, db, fmt.Sprintf("i%03d", j), "v")
		}
		barrier(t, db)
		fs.arm(i)
		set(t, db, "late", "x")
		ctx, cancel := withTimeout(time.Minute) // the fault fires once and is retried; the bound only catches a hang
		_, perr := db.Publish(ctx)
		cancel()
		fired := fs.fired()
		fs.arm(-1)
		crash(db)
		o.PID = 0
		o.Dir = t.TempDir()
		db2, err := Open(context.Background(), o)
		if err != nil {
			t.Fatalf("fault at request %d (publish err %v): reopen: %v", i, perr, err)
		}
		wantVal(t, db2, "i099", "v")
		if perr == nil {
			wantVal(t, db2, "late", "x")
		}
		db2.Close()
		if !fired {
			if i < 5 {
				t.Fatalf("publish made only %d store requests", i-1)
			}
			t.Logf("publish survived a fault at each of its %d store requests", i-1)
			return
		}
	}
}

type failNth struct {
	objstore.Store
	mu    sync.Mutex
	n     int
	count int
	hit   bool
}

func (f *failNth) arm(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n, f.count = n, 0
}

func (f *failNth) fired() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hit
}

func (f *failNth) step(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n < 0 {
		return nil
	}
	f.count++
	if f.count == f.n {
		f.hit = true
		return fmt.Errorf("%s: %w", op, errOutage)
	}
	return nil
}

func (f *failNth) Put(ctx context.Context, key string, data []byte, opts objstore.PutOptions) (string, error) {
	if err := f.step("put " + key); err != nil {
		return "", err
	}
	return f.Store.Put(ctx, key, data, opts)
}

func (f *failNth) Get(ctx context.Context, key string) ([]byte, error) {
	if err := f.step("get " + key); err != nil {
		return nil, err
	}
	return f.Store.Get(ctx, key)
}

func (f *failNth) List(ctx context.Context, prefix, after string, limit int) (objstore.ListPage, error) {
	if err := f.step("list " + prefix); err != nil {
		return objstore.ListPage{}, err
	}
	return f.Store.List(ctx, prefix, after, limit)
}

func (f *failNth) DeleteMany(ctx context.Context, keys []string) error {
	if err := f.step("delete"); err != nil {
		return err
	}
	return f.Store.DeleteMany(ctx, keys)
}
