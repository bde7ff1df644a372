package reclaim

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"strconv"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// TestShortWritersConvergeAndLoseNothing drives one store with many short
// writer sessions on one machine (each well under the 60 s grace), every
// one of them writing, overwriting and deleting files and then stopping
// cleanly. After each restart every file must read back exactly as the
// model says (a clean stop loses nothing that was accepted). The
// remaining grace of pending deletions is carried from one writer to the
// next, so dead segments are deleted even though no writer lives for a
// whole grace; a last writer that lives past the grace brings segments/
// to the live bytes. Each session's clock starts afresh, as a new process
// would: time while no writer runs does not count.
func TestShortWritersConvergeAndLoseNothing(t *testing.T) {
	sessions := 500
	if s := os.Getenv("EBBFS_SHORT_WRITERS"); s != "" {
		sessions, _ = strconv.Atoi(s)
	}
	if testing.Short() {
		sessions = 50
	}
	ctx := context.Background()
	dir := t.TempDir()
	store, err := objstore.NewLocal(dir + "/store")
	if err != nil {
		t.Fatal(err)
	}
	k, err := fs.Init(ctx, store, "password123")
	if err != nil {
		t.Fatal(err)
	}
	cacheDir := dir + "/cache"
	var logBuf testutil.SyncBuffer
	log := slog.New(slog.NewTextHandler(io.Writer(&logBuf), &slog.HandlerOptions{Level: slog.LevelWarn}))
	noCheckpoints := CheckpointListerFunc(func(context.Context) ([]checkpoint.Record, error) { return nil, nil })

	type session struct {
		e   *fs.Engine
		r   *Reclaimer
		clk *clock.Fake
	}
	open := func(i int) session {
		clk := clock.NewFake(t0.Add(time.Duration(i) * time.Hour))
		trig := &Triggers{}
		e, err := fs.Open(ctx, fs.Options{
			Store: store, Keys: k, CacheDir: cacheDir, SegmentTarget: 1 << 20,
			FlushInterval: time.Hour, Clock: clk, Logger: log, Events: trig,
		})
		if err != nil {
			t.Fatalf("session %d: open: %v", i, err)
		}
		r, err := New(Options{Host: e, Store: store, Keys: k, Checkpoints: noCheckpoints,
			Clock: clk, Logger: log, FlushInterval: 10 * time.Second, DisableSweep: true})
		if err != nil {
			t.Fatal(err)
		}
		trig.Attach(r)
		return session{e, r, clk}
	}
	closeSession := func(s session) {
		if err := s.r.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.e.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cleanAll := func(s session) {
		for {
			_, n, _, err := s.e.CleanTombstones(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
		}
	}

	rng := rand.New(rand.NewSource(1))
	model := map[string][]byte{}
	var names []string
	check := func(s session, when string) {
		for name, want := range model {
			a, err := s.e.Lookup(ctx, fs.RootIno, name)
			if err != nil {
				t.Fatalf("%s: %s: %v", when, name, err)
			}
			got := make([]byte, len(want)+1)
			n, err := s.e.Read(ctx, a.Ino, got, 0)
			if err != nil || !bytes.Equal(got[:n], want) {
				t.Fatalf("%s: %s: read %d bytes (err %v), want %d bytes as written", when, name, n, err, len(want))
			}
		}
		ents, err := s.e.ReadDir(ctx, fs.RootIno)
		if err != nil {
			t.Fatal(err)
		}
		if files := len(ents); files != len(model) {
			t.Fatalf("%s: %d files, model has %d", when, files, len(model))
		}
	}
	next := 0
	for i := 0; i < sessions; i++ {
		s := open(i)
		check(s, fmt.Sprintf("session %d start", i))
		// Two new files, an overwrite, a delete; nothing fsynced: the
		// clean stop is the only barrier.
		for j := 0; j < 2; j++ {
			name := fmt.Sprintf("f%d", next)
			next++
			data := make([]byte, (1+rng.Intn(3))*segment.ExtentSize-rng.Intn(100))
			rng.Read(data)
			a, err := s.e.Create(ctx, fs.RootIno, name, 0o644, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.e.Write(ctx, a.Ino, data, 0); err != nil {
				t.Fatal(err)
			}
			model[name] = data
			names = append(names, name)
		}
		if len(names) > 0 {
			name := names[rng.Intn(len(names))]
			a, err := s.e.Lookup(ctx, fs.RootIno, name)
			if err != nil {
				t.Fatal(err)
			}
			patch := make([]byte, 1000)
			rng.Read(patch)
			off := rng.Intn(len(model[name]))
			if _, err := s.e.Write(ctx, a.Ino, patch, int64(off)); err != nil {
				t.Fatal(err)
			}
			m := model[name]
			if end := off + len(patch); end > len(m) {
				m = append(m, make([]byte, end-len(m))...)
			}
			copy(m[off:], patch)
			model[name] = m
		}
		if len(names) > 6 {
			x := rng.Intn(len(names))
			name := names[x]
			names = append(names[:x], names[x+1:]...)
			if err := s.e.Unlink(ctx, fs.RootIno, name); err != nil {
				t.Fatal(err)
			}
			delete(model, name)
		}
		// A short life: a cycle, 20 s, another cycle, clean stop.
		if _, err := s.r.cycle(ctx); err != nil {
			t.Fatal(err)
		}
		s.clk.Advance(20 * time.Second)
		if _, err := s.r.cycle(ctx); err != nil {
			t.Fatal(err)
		}
		closeSession(s)
	}

	// One writer that lives past the grace.
	s := open(sessions)
	check(s, "last session")
	// Before it runs a cycle: the short writers alone must have kept the
	// dead segments from piling up (without carried deadlines, every one
	// of them would still be here).
	before, err := s.r.SpaceLocal()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after %d short writers: %d segments, %d bytes, %d live bytes, %d dead segments (%d bytes)",
		sessions, before.SegmentCount, before.SegmentBytes, before.LiveBytes, before.DeadSegments, before.DeadBytes)
	if before.DeadSegments > 12 {
		t.Fatalf("%d dead segments after %d short writers: their deadlines did not carry over", before.DeadSegments, sessions)
	}
	for i := 0; i < 8; i++ {
		cleanAll(s)
		if _, err := s.r.cycle(ctx); err != nil {
			t.Fatal(err)
		}
		s.clk.Advance(MinGrace + time.Second)
	}
	check(s, "after convergence")
	rep, err := s.r.SpaceLocal()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := objstore.ListAll(ctx, store, segment.KeyPrefix)
	if err != nil {
		t.Fatal(err)
	}
	var stored int64
	for _, o := range objs {
		stored += o.Size
	}
	closeSession(s)
	t.Logf("%d sessions: %d segment objects, %d bytes stored, %d live frame bytes, %d dead segments", sessions, len(objs), stored, rep.LiveBytes, rep.DeadSegments)
	if rep.DeadSegments != 0 {
		t.Fatalf("%d dead segments left after a writer lived past the grace", rep.DeadSegments)
	}
	if limit := rep.LiveBytes + rep.LiveBytes/20 + 512<<10; stored > limit {
		t.Fatalf("segments/ holds %d bytes for %d live bytes (limit %d)", stored, rep.LiveBytes, limit)
	}
	if bytes.Contains([]byte(logBuf.String()), []byte("not in any journal")) {
		t.Fatalf("a clean stop lost batches:\n%s", logBuf.String())
	}
}
