package fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/objstore"
)

// cutStore fails every request once cut: the process it served "crashed".
type cutStore struct {
	objstore.Store
	cut atomic.Bool
}

var errCut = errors.New("store cut off: simulated crash")

func (c *cutStore) check() error {
	if c.cut.Load() {
		return errCut
	}
	return nil
}
func (c *cutStore) Put(ctx context.Context, k string, d []byte, o objstore.PutOptions) (string, error) {
	if err := c.check(); err != nil {
		return "", err
	}
	return c.Store.Put(ctx, k, d, o)
}
func (c *cutStore) Get(ctx context.Context, k string) ([]byte, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	return c.Store.Get(ctx, k)
}
func (c *cutStore) GetRange(ctx context.Context, k string, off, n int64) ([]byte, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	return c.Store.GetRange(ctx, k, off, n)
}
func (c *cutStore) Delete(ctx context.Context, k string) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.Store.Delete(ctx, k)
}

func deadPID(t *testing.T) int {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// TestRandomModelCrash runs random operations against the engine and an
// in-memory model; at random points the engine "crashes" (its store is cut
// off and its cache directory abandoned) and a new engine recovers from the
// store alone. The files must then match the model as of the last barrier,
// and fsck must be clean. Reproduce a failure with EBBFS_MODEL_SEED.
func TestRandomModelCrash(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("EBBFS_MODEL_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed %d (set EBBFS_MODEL_SEED to reproduce)", seed)
	rng := rand.New(rand.NewSource(seed))
	ctx := context.Background()
	base := objstore.NewMem()
	k, err := Init(ctx, base, "password123")
	if err != nil {
		t.Fatal(err)
	}
	var cur *cutStore
	var e *Engine
	open := func() {
		cur = &cutStore{Store: base}
		pid := deadPID(t)
		e, err = Open(ctx, Options{Store: cur, Keys: k, CacheDir: t.TempDir(), SegmentTarget: 256 << 10,
			FlushInterval: time.Hour, tuneLSM: func(o *lsm.Options) {
				o.PID = pid
				o.DisableAutoPublish = true
			}})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
	}
	open()
	// Files have extent sizes from 4 KiB to 32 KiB: set on the root
	// directory (inherited) or on a file just created.
	sizes := []uint64{4096, 8192, 16384, 32768}
	rootES := sizes[rng.Intn(len(sizes))]
	if err := e.SetXattr(ctx, RootIno, XattrExtentSize, []byte(strconv.FormatUint(rootES, 10)), 0); err != nil {
		t.Fatal(err)
	}
	if err := e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("root extent size %d", rootES)
	live := map[string]*modelFile{}   // current state
	durable := map[string]modelFile{} // state at the last barrier
	names := []string{"a", "b", "c", "d", "e", "f"}
	var opened []*modelFile
	snapshot := func() {
		durable = map[string]modelFile{}
		for n, f := range live {
			durable[n] = modelFile{es: f.es, data: append([]byte(nil), f.data...)}
		}
	}
	trace := os.Getenv("EBBFS_MODEL_TRACE") != ""
	for step := 0; step < 600; step++ {
		name := names[rng.Intn(len(names))]
		f := live[name]
		op := rng.Intn(100)
		if trace {
			size := -1
			if f != nil {
				size = len(f.data)
			}
			t.Logf("step %d op %d file %s size %d", step, op, name, size)
		}
		switch {
		case op < 10 && f == nil:
			a, err := e.Create(ctx, RootIno, name, 0o644, 0, 0)
			if err != nil {
				t.Fatalf("step %d create: %v", step, err)
			}
			es := rootES
			if rng.Intn(2) == 0 {
				es = sizes[rng.Intn(len(sizes))]
				if err := e.SetXattr(ctx, a.Ino, XattrExtentSize, []byte(strconv.FormatUint(es, 10)), 0); err != nil {
					t.Fatalf("step %d set extent size: %v", step, err)
				}
			}
			live[name] = &modelFile{ino: a.Ino, es: es}
		case op < 55 && f != nil:
			off := rng.Intn(300 << 10)
			n := 1 + rng.Intn(80<<10)
			if rng.Intn(4) == 0 {
				n = 1 + rng.Intn(100)
			}
			data := make([]byte, n)
			rng.Read(data)
			if rng.Intn(5) == 0 {
				clear(data)
			}
			if _, err := e.Write(ctx, f.ino, data, int64(off)); err != nil {
				t.Fatalf("step %d write: %v", step, err)
			}
			if end := off + n; end > len(f.data) {
				f.data = append(f.data, make([]byte, end-len(f.data))...)
			}
			copy(f.data[off:], data)
		case op < 65 && f != nil:
			size := rng.Intn(len(f.data) + 40000)
			if _, err := e.SetAttr(ctx, f.ino, SetAttr{Valid: SetSize, Size: uint64(size)}); err != nil {
				t.Fatalf("step %d truncate: %v", step, err)
			}
			if size < len(f.data) {
				f.data = f.data[:size]
			} else {
				f.data = append(f.data, make([]byte, size-len(f.data))...)
			}
		case op < 70 && f != nil && len(f.data) > 0:
			off := rng.Intn(len(f.data))
			n := 1 + rng.Intn(len(f.data)-off)
			if err := e.Punch(ctx, f.ino, int64(off), int64(n)); err != nil {
				t.Fatalf("step %d punch: %v", step, err)
			}
			clear(f.data[off : off+n])
		case op < 76 && f != nil:
			if rng.Intn(2) == 0 {
				if err := e.Open(ctx, f.ino); err != nil {
					t.Fatal(err)
				}
				opened = append(opened, f)
			}
			if err := e.Unlink(ctx, RootIno, name); err != nil {
				t.Fatalf("step %d unlink: %v", step, err)
			}
			delete(live, name)
		case op < 80 && len(opened) > 0:
			o := opened[0]
			opened = opened[1:]
			buf := make([]byte, len(o.data))
			if n, err := e.Read(ctx, o.ino, buf, 0); err != nil || !bytes.Equal(buf[:n], o.data) {
				t.Fatalf("step %d: unlinked open file unreadable (%v)", step, err)
			}
			if err := e.Release(ctx, o.ino); err != nil {
				t.Fatal(err)
			}
		case op < 88:
			if err := e.Barrier(ctx); err != nil {
				t.Fatalf("step %d barrier: %v", step, err)
			}
			snapshot()
		case op < 91:
			if _, _, _, err := e.CleanTombstones(ctx); err != nil {
				t.Fatal(err)
			}
		case op < 94:
			// Crash: cut the store, abandon the engine, recover from the store alone.
			cur.cut.Store(true)
			old := e
			open()
			cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			old.Close(cctx)
			cancel()
			opened = nil
			live = map[string]*modelFile{}
			for n, d := range durable {
				a, err := e.Lookup(ctx, RootIno, n)
				if err != nil {
					t.Fatalf("step %d: after crash %s: %v", step, n, err)
				}
				live[n] = &modelFile{ino: a.Ino, es: d.es, data: append([]byte(nil), d.data...)}
			}
			checkModel(t, e, live, fmt.Sprintf("step %d after crash", step))
			r, err := Fsck(ctx, base, k, FsckOptions{})
			if err != nil || !r.OK() {
				t.Fatalf("step %d: fsck after crash: %v\n%s", step, err, r)
			}
		}
		if step%50 == 0 {
			checkModel(t, e, live, fmt.Sprintf("step %d", step))
		}
	}
	if err := e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	checkModel(t, e, live, "end")
	r, err := Fsck(ctx, base, k, FsckOptions{VerifyData: true})
	if err != nil || !r.OK() {
		t.Fatalf("final fsck: %v\n%s", err, r)
	}
	e.Close(ctx)
}

type modelFile struct {
	ino  uint64
	es   uint64 // extent size
	data []byte
}

func checkModel(t *testing.T, e *Engine, live map[string]*modelFile, when string) {
	t.Helper()
	ctx := context.Background()
	ents, err := e.ReadDir(ctx, RootIno)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != len(live) {
		t.Fatalf("%s: %d entries, model has %d", when, len(ents), len(live))
	}
	for name, f := range live {
		a, err := e.Lookup(ctx, RootIno, name)
		if err != nil {
			t.Fatalf("%s: lookup %s: %v", when, name, err)
		}
		if a.Size != uint64(len(f.data)) {
			t.Fatalf("%s: %s has size %d, model %d", when, name, a.Size, len(f.data))
		}
		if v, err := e.GetXattr(ctx, a.Ino, XattrExtentSize); err != nil || string(v) != strconv.FormatUint(f.es, 10) {
			t.Fatalf("%s: %s has extent size %q (%v), model %d", when, name, v, err, f.es)
		}
		buf := make([]byte, len(f.data)+1)
		n, err := e.Read(ctx, a.Ino, buf, 0)
		if err != nil {
			t.Fatalf("%s: read %s: %v", when, name, err)
		}
		if !bytes.Equal(buf[:n], f.data) {
			for i := range f.data {
				if i >= n || buf[i] != f.data[i] {
					t.Fatalf("%s: %s differs from the model at byte %d (extent %d of %d bytes)", when, name, i, uint64(i)/f.es, f.es)
				}
			}
			t.Fatalf("%s: %s differs from the model", when, name)
		}
	}
}
