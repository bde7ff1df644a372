package lsm

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/objstore"
)

func testKeys(t testing.TB) *keys.Keys {
	t.Helper()
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	a, err := keys.NewAEAD(k)
	if err != nil {
		t.Fatal(err)
	}
	ks := &keys.Keys{Meta: a, Data: a}
	_, _ = rand.Read(ks.UUID[:])
	return ks
}

func testOpts(t testing.TB, s objstore.Store, k *keys.Keys) Options {
	return Options{
		Dir:                filepath.Join(t.TempDir(), "lsm"),
		Store:              s,
		Keys:               k,
		Host:               "testhost",
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
		DisableAutoPublish: true,
		LeaseTTL:           20 * time.Second,
		JournalRetention:   -1, // covered journals go at once, as the tests expect
	}
}

// deadPID returns the pid of a process that has exited.
func deadPID(t testing.TB) int {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Skip("cannot run true:", err)
	}
	return c.Process.Pid
}

func mustOpen(t testing.TB, o Options) *DB {
	t.Helper()
	db, err := Open(context.Background(), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return db
}

// crash stops db as kill -9 would: no marker, no lease release.
func crash(db *DB) {
	db.closeOnce.Do(func() {
		db.bgCancel()
		db.unwatchReserve()
		db.waitLoops()
		db.closeMu.Lock()
		db.closed = true
		_ = db.pdb.Close()
		db.closeMu.Unlock()
	})
}

func set(t testing.TB, db *DB, kv ...string) {
	t.Helper()
	b := db.NewBatch()
	for i := 0; i+1 < len(kv); i += 2 {
		if err := b.Set([]byte(kv[i]), []byte(kv[i+1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Commit(b); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func barrier(t testing.TB, db *DB) {
	t.Helper()
	if err := db.Barrier(context.Background()); err != nil {
		t.Fatalf("Barrier: %v", err)
	}
}

func wantVal(t testing.TB, db *DB, key, val string) {
	t.Helper()
	v, ok, err := db.Get([]byte(key))
	if err != nil {
		t.Fatalf("Get %q: %v", key, err)
	}
	if val == "" {
		if ok {
			t.Fatalf("Get %q = %q, want absent", key, v)
		}
		return
	}
	if !ok || string(v) != val {
		t.Fatalf("Get %q = %q (found %v), want %q", key, v, ok, val)
	}
}

func keysUnder(t testing.TB, s objstore.Store, prefix string) []string {
	t.Helper()
	objs, err := objstore.ListAll(context.Background(), s, prefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

// tamper flips one byte of an object.
func tamper(t testing.TB, s objstore.Store, key string, off int) {
	t.Helper()
	ctx := context.Background()
	b, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if off < 0 {
		off += len(b)
	}
	b[off] ^= 0x40
	if _, err := s.Put(ctx, key, b, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// countingStore counts Gets by key prefix.
type countingStore struct {
	objstore.Store
	mu   sync.Mutex
	gets map[string]int
}

func newCounting(s objstore.Store) *countingStore {
	return &countingStore{Store: s, gets: map[string]int{}}
}

func (c *countingStore) Get(ctx context.Context, key string) ([]byte, error) {
	c.mu.Lock()
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		c.gets[key[:i+1]]++
	} else {
		c.gets[key]++
	}
	c.mu.Unlock()
	return c.Store.Get(ctx, key)
}

func (c *countingStore) count(prefix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gets[prefix]
}

var errOutage = errors.New("injected store outage")

// outageStore fails every request while down is set.
type outageStore struct {
	objstore.Store
	down  atomic.Bool
	fails atomic.Int64
}

func (o *outageStore) check(op, key string) error {
	if o.down.Load() {
		o.fails.Add(1)
		return fmt.Errorf("%s %s: %w", op, key, errOutage)
	}
	return nil
}

func (o *outageStore) Put(ctx context.Context, key string, data []byte, opts objstore.PutOptions) (string, error) {
	if err := o.check("put", key); err != nil {
		return "", err
	}
	return o.Store.Put(ctx, key, data, opts)
}

func (o *outageStore) Get(ctx context.Context, key string) ([]byte, error) {
	if err := o.check("get", key); err != nil {
		return nil, err
	}
	return o.Store.Get(ctx, key)
}

func (o *outageStore) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if err := o.check("head", key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return o.Store.Head(ctx, key)
}

func (o *outageStore) List(ctx context.Context, prefix, after string, limit int) (objstore.ListPage, error) {
	if err := o.check("list", prefix); err != nil {
		return objstore.ListPage{}, err
	}
	return o.Store.List(ctx, prefix, after, limit)
}

// hookStore runs beforePut ahead of each Put.
type hookStore struct {
	objstore.Store
	beforePut func(key string)
}

func (h *hookStore) Put(ctx context.Context, key string, data []byte, opts objstore.PutOptions) (string, error) {
	if h.beforePut != nil {
		h.beforePut(key)
	}
	return h.Store.Put(ctx, key, data, opts)
}

func withTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
