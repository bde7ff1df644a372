package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
)

// churner changes the writer's files: creates, appends, overwrites,
// truncates, renames and deletes, always in whole self-checking blocks.
type churner struct {
	t    *testing.T
	dir  string // the writer's mount
	rng  *rand.Rand
	next uint64            // next file id
	ver  uint64            // version stamped into written blocks
	live map[string]uint64 // name -> id, as far as this churner knows
	gen  map[uint64]int    // id -> rename count
	ops  map[string]int
}

func newChurner(t *testing.T, dir string, seed uint64) *churner {
	return &churner{t: t, dir: dir, rng: rand.New(rand.NewPCG(seed, 7)), next: 1,
		live: map[string]uint64{}, gen: map[uint64]int{}, ops: map[string]int{}}
}

// resync takes the list of files from the writer's mount (after a crash
// the last writes may be gone).
func (c *churner) resync() {
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		c.t.Fatal(err)
	}
	c.live = map[string]uint64{}
	for _, d := range ents {
		if id, ok := fileID(d.Name()); ok {
			c.live[d.Name()] = id
			c.next = max(c.next, id+1)
		}
	}
}

func (c *churner) names() []string {
	out := make([]string, 0, len(c.live))
	for n := range c.live {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// size picks a file size in blocks: mostly small (deleted in the unlink
// transaction), sometimes over 320 KiB (through the tombstone cleaner).
func (c *churner) size() int {
	if c.rng.IntN(5) == 0 {
		return 81 + c.rng.IntN(300)
	}
	return 1 + c.rng.IntN(60)
}

// step runs one random change and returns its name.
func (c *churner) step() string {
	c.ver++
	names := c.names()
	op := "create"
	if len(names) >= 8 {
		switch r := c.rng.IntN(100); {
		case r < 15:
			op = "create"
		case r < 35:
			op = "append"
		case r < 60:
			op = "overwrite"
		case r < 72:
			op = "truncate"
		case r < 84:
			op = "rename"
		default:
			op = "delete"
		}
		if len(names) > 60 && op == "create" {
			op = "delete"
		}
	}
	var name string
	var id uint64
	if op != "create" {
		name = names[c.rng.IntN(len(names))]
		id = c.live[name]
	}
	p := c.dir + "/" + name
	var err error
	switch op {
	case "create":
		id = c.next
		c.next++
		name = fmt.Sprintf("f%d.0", id)
		err = os.WriteFile(c.dir+"/"+name, blocks(id, 0, c.size(), c.ver), 0o644)
		if err == nil {
			c.live[name] = id
		}
	case "append", "overwrite", "truncate":
		var fi os.FileInfo
		if fi, err = os.Stat(p); err != nil {
			break
		}
		n := int(fi.Size() / blockSize)
		var f *os.File
		if f, err = os.OpenFile(p, os.O_RDWR, 0); err != nil {
			break
		}
		switch op {
		case "append":
			k := 1 + c.rng.IntN(40)
			_, err = f.WriteAt(blocks(id, uint64(n), k, c.ver), int64(n)*blockSize)
		case "overwrite":
			if n == 0 {
				n = 1
			}
			at := c.rng.IntN(n)
			k := 1 + c.rng.IntN(min(n-at, 64))
			_, err = f.WriteAt(blocks(id, uint64(at), k, c.ver), int64(at)*blockSize)
		case "truncate":
			err = f.Truncate(int64(c.rng.IntN(n+1)) * blockSize)
		}
		if err == nil && c.rng.IntN(4) == 0 {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	case "rename":
		c.gen[id]++
		to := fmt.Sprintf("f%d.%d", id, c.gen[id])
		if err = os.Rename(p, c.dir+"/"+to); err == nil {
			delete(c.live, name)
			c.live[to] = id
		}
	case "delete":
		if err = os.Remove(p); err == nil {
			delete(c.live, name)
		}
	}
	if err != nil {
		c.t.Errorf("writer %s %s: %v", op, name, err)
	}
	c.ops[op]++
	return op
}

// reclaimTotals are the reclamation counters of one writer process.
type reclaimTotals struct{ repacks, deleted, relocated float64 }

func (e *env) reclaimTotals() reclaimTotals {
	e.t.Helper()
	m := e.scrapeUnix()
	return reclaimTotals{
		repacks:   m.sum("ebbfs_reclaim_repacks_total", `result="ok"`),
		deleted:   m.sum("ebbfs_reclaim_segments_deleted_total"),
		relocated: m.sum("ebbfs_reclaim_relocated_frames_total"),
	}
}

// TestReplicaChurn: while the writer churns its files (creates, appends,
// overwrites, truncates, renames, deletes) and reclamation runs on its own
// schedule (the test build's time scale makes its 60 s floor pass in
// 0.3 s, so segments a replica a poll behind still reads get repacked and
// deleted under it), a replica reads every file continuously and checks
// each block. The writer is restarted cleanly a third of the way in and
// killed with SIGKILL (a new writer takes over) two thirds in; the replica
// keeps serving throughout and shows each new writer's changes. Asserted:
// repacks and deletions happened; zero EIO, zero wrong bytes, no other
// read error on the replica; it reads while no writer runs; at the end it
// holds exactly the writer's files. 2 minutes; 10 with make soak-replica.
func TestReplicaChurn(t *testing.T) {
	t.Parallel()
	dur := 2 * time.Minute
	if soakReplica() {
		dur = 10 * time.Minute
	}
	// Reclamation runs 200 times faster, so that repacks and deletions
	// happen within the test. The replica's checkpoint lives 40 minutes,
	// which makes the writer's grace (the span plus 30 s, also 200 times
	// faster) about 12 s: longer, as in production, than the 10 s for
	// which a replica answers reads past a recent truncation with the
	// bytes from before it (fs/shrink.go). With the default 3 minutes it
	// would be about 1 s, and those frames could be deleted before the
	// kernel asks. (A read that finds its segment gone is tested in fs.)
	e := newEnv(t, withEnvVars("EBBFS_TEST_TIME_SCALE=200", "EBBFS_TEST_READER_TTL=40m"))
	e.init()
	w := e.mount()
	r := e.sameStore()
	rp := r.mount("--read-only")
	// The churn starts once the replica's reader checkpoint pins a
	// manifest: until then the writer keeps nothing for it beyond the
	// 60 s floor, 0.3 s here, and the bytes past a shrink that the
	// replica's first catch-up keeps (fs/shrink.go) could be deleted
	// before the kernel asks for them (as in production a replica whose
	// checkpoint lapsed for a minute would see).
	testutil.Eventually(t, time.Minute, "the replica's reader checkpoint pins a manifest", func() bool {
		writeFile(t, e.path("pin"), []byte("pin"))
		e.mustEbbfs("flush")
		for _, c := range e.readerCheckpoints() {
			if c.ManifestSeq > 0 {
				return true
			}
		}
		time.Sleep(200 * time.Millisecond)
		return false
	})

	var stats verifyStats
	var readerStop atomic.Bool
	var passes atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !readerStop.Load() {
			stats.verifyTree(r.mnt)
			passes.Add(1)
		}
	}()
	defer func() { readerStop.Store(true); wg.Wait() }()

	c := newChurner(t, e.mnt, e2eSeed(t))
	var totals reclaimTotals
	addTotals := func() {
		got := e.reclaimTotals()
		totals.repacks += got.repacks
		totals.deleted += got.deleted
		totals.relocated += got.relocated
	}
	// While no writer runs, the replica must go on reading. A replica
	// that stops answering fails here, with what it was doing, rather
	// than hanging the test until the package's timeout.
	downReads := func(what string, restart func()) {
		before := passes.Load()
		restart()
		start := time.Now()
		for passes.Load() < before+2 {
			if time.Since(start) > 3*time.Minute {
				t.Fatalf("%s: the replica finished %d passes over its files in 3 minutes, want 2; replica status %+v\nreplica log:\n%s\nreplica goroutines:\n%s",
					what, passes.Load()-before, r.replicaStatus(), tail(rp.out.String(), 60), r.goroutines())
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("%s: the replica verified files through the writer's absence", what)
	}
	// The new writer's change must show on the replica.
	showsNewWriter := func(what string) {
		c.resync()
		marker := fmt.Sprintf("f%d.0", c.next)
		data := blocks(c.next, 0, 3, 1)
		c.live[marker] = c.next
		c.next++
		writeFile(t, e.path(marker), data)
		fsyncFile(t, e.path(marker))
		start := time.Now()
		for !fileIs(r.path(marker), data) {
			if time.Since(start) > 30*time.Second {
				// Say whether the replica applied the change and cannot
				// read it, or never applied it.
				_, serr := os.Stat(r.path(marker))
				got, rerr := os.ReadFile(r.path(marker))
				_, wserr := os.Stat(e.path(marker))
				// The newest journal in the store, beside the replica's
				// served journal: a replica behind it stalled following.
				newest := "none"
				if js, err := os.ReadDir(filepath.Join(e.store, "meta", "journal")); err != nil {
					newest = err.Error()
				} else if len(js) > 0 {
					newest = js[len(js)-1].Name()
				}
				t.Fatalf("%s: the new writer's file %s not on the replica within 30s: replica stat %v, read %d bytes (want %d) %v; on the writer: stat %v; newest journal in the store %s; replica status %+v\nreplica log:\n%s\nreplica goroutines:\n%s",
					what, marker, serr, len(got), len(data), rerr, wserr, newest, r.replicaStatus(), tail(rp.out.String(), 60), r.goroutines())
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("%s: the replica shows the new writer's change after %v", what, time.Since(start).Round(time.Millisecond))
	}

	start := time.Now()
	restarted, killed := false, false
	for time.Since(start) < dur && !t.Failed() {
		c.step()
		time.Sleep(time.Duration(5+c.rng.IntN(20)) * time.Millisecond)
		switch el := time.Since(start); {
		case !restarted && el > dur/3:
			restarted = true
			addTotals()
			downReads("clean restart", func() {
				w.stop()
				time.Sleep(500 * time.Millisecond)
			})
			w = e.mount()
			showsNewWriter("clean restart")
		case !killed && el > 2*dur/3:
			killed = true
			addTotals()
			downReads("SIGKILL", func() {
				w.kill()
				time.Sleep(500 * time.Millisecond)
			})
			w = e.mount()
			showsNewWriter("SIGKILL and takeover")
		}
	}
	if t.Failed() {
		return
	}
	e.mustEbbfs("flush")
	addTotals()
	readerStop.Store(true)
	wg.Wait()
	out := rp.out.String()
	t.Logf("churn for %v: ops %v; reclamation: %.0f repacks (%.0f frames relocated), %.0f segments deleted; replica: %d passes, %s; %d reads found their segment gone and read again from the newer state, %d failed so; %d reads past a recent truncation got the bytes from before it",
		dur, c.ops, totals.repacks, totals.relocated, totals.deleted, passes.Load(), stats.String(),
		strings.Count(out, "a segment was gone; read again"), strings.Count(out, "replica: a segment is gone"),
		strings.Count(out, "a read past a recent truncation"))
	if n := strings.Count(out, "replica: a segment is gone"); n > 0 {
		t.Errorf("%d replica reads failed on a segment that was gone", n)
	}
	if f := stats.failures(); f != "" || stats.eio > 0 {
		t.Fatalf("replica read failures (%d EIO):\n%s\nreplica log:\n%s", stats.eio, f, tail(rp.out.String(), 40))
	}
	if totals.repacks == 0 || totals.deleted == 0 {
		t.Fatalf("reclamation did not both repack (%.0f) and delete (%.0f) during the churn", totals.repacks, totals.deleted)
	}
	if stats.files < 100 {
		t.Fatalf("the replica verified only %d files", stats.files)
	}
	// The replica converges to exactly the writer's files.
	var diff string
	testutil.Eventually(t, 30*time.Second, "replica equal to the writer", func() bool {
		diff = sameTrees(e.mnt, r.mnt)
		return diff == ""
	})
	if diff != "" {
		t.Fatal(diff)
	}
	rp.stop()
	w.stop()
	e.fsckClean()
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := 0
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			lines++
			if lines > n {
				return s[i+1:]
			}
		}
	}
	return s
}
