package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"ebbfs.dev/ebbfs/internal/testutil"
)

const (
	kib = 1 << 10
	mib = 1 << 20
)

// e2eSeed is the seed of a test's random choices and data: EBBFS_E2E_SEED
// reproduces a run, otherwise it is fresh and logged.
func e2eSeed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("EBBFS_E2E_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			t.Fatalf("EBBFS_E2E_SEED=%q: %v", v, err)
		}
		seed = s
	}
	t.Logf("seed %d (EBBFS_E2E_SEED reproduces it)", seed)
	return seed
}

// dataSource yields reproducible incompressible bytes.
type dataSource struct{ c *rand.ChaCha8 }

func newDataSource(seed uint64) *dataSource {
	var s [32]byte
	for i := range 4 {
		for j := range 8 {
			s[i*8+j] = byte((seed + uint64(i)*0x9e3779b97f4a7c15) >> (8 * j))
		}
	}
	return &dataSource{c: rand.NewChaCha8(s)}
}

func (d *dataSource) fill(b []byte) { _, _ = d.c.Read(b) }

// writeSynced writes size random bytes to a new file in 1 MiB writes,
// fsyncs it and closes it.
func writeSynced(t testing.TB, p string, size int64, src *dataSource) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, mib)
	for left := size; left > 0; {
		n := min(left, int64(len(buf)))
		src.fill(buf[:n])
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			t.Fatalf("write %s: %v", p, err)
		}
		left -= n
	}
	if err := f.Sync(); err != nil {
		f.Close()
		t.Fatalf("fsync %s: %v", p, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close %s: %v", p, err)
	}
}

// dropPageCache makes the kernel forget the clean cached pages of a file
// on the mount, so the next read goes to ebbfs.
func dropPageCache(t testing.TB, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatalf("fadvise DONTNEED %s: %v", p, err)
	}
}

// sameContent compares a file with the expected bytes, reading it in
// chunks, and names the first differing 4 KiB block.
func sameContent(t testing.TB, p string, want []byte) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4*mib)
	off := 0
	for {
		n, err := io.ReadFull(f, buf)
		if n > 0 {
			if off+n > len(want) {
				t.Fatalf("%s is longer than the %d bytes expected", p, len(want))
			}
			if !bytes.Equal(buf[:n], want[off:off+n]) {
				for i := 0; i < n; i += 4 * kib {
					j := min(i+4*kib, n)
					if !bytes.Equal(buf[i:j], want[off+i:off+j]) {
						t.Fatalf("%s differs from the model in the 4 KiB block at offset %d", p, off+i)
					}
				}
			}
			off += n
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
	}
	if off != len(want) {
		t.Fatalf("%s holds %d bytes, want %d", p, off, len(want))
	}
}

// cycleStats is the part of `ebbfs reclaim run --json` the tests read.
type cycleStats struct {
	Counters        int      `json:"counters"`
	Dead            int      `json:"dead"`
	Deleted         int      `json:"deleted"`
	BytesFreed      int64    `json:"bytes_freed"`
	Repacks         int      `json:"repacks"`
	RepackFailed    int      `json:"repack_failed"`
	RelocatedFrames int      `json:"relocated_frames"`
	Paused          bool     `json:"paused"`
	PinnedBy        []string `json:"pinned_by"`
}

func (e *env) reclaimRun() cycleStats {
	e.t.Helper()
	r := e.mustEbbfs("reclaim", "run", "--json")
	var st cycleStats
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		e.t.Fatalf("reclaim run --json: %v\n%s", err, r)
	}
	return st
}

// spaceStats is the part of `ebbfs space --json` the tests read.
type spaceStats struct {
	LiveBytes         int64            `json:"live_bytes"`
	SegmentCount      int              `json:"segment_count"`
	SegmentBytes      int64            `json:"segment_bytes"`
	FragmentedBytes   int64            `json:"fragmented_bytes"`
	DeadSegments      int              `json:"dead_segments"`
	DeadBytes         int64            `json:"dead_bytes"`
	Pinned            map[string]int64 `json:"pinned"`
	TombstonesPending int              `json:"tombstones_pending"`
	TombstoneBytes    int64            `json:"tombstone_bytes"`
}

func (e *env) space() spaceStats {
	e.t.Helper()
	r := e.mustEbbfs("space", "--json")
	var sp spaceStats
	if err := json.Unmarshal([]byte(r.stdout), &sp); err != nil {
		e.t.Fatalf("space --json: %v\n%s", err, r)
	}
	return sp
}

func (e *env) fsckClean(args ...string) {
	e.t.Helper()
	if r := e.ebbfs("fsck", args...); r.code != 0 || !strings.Contains(r.stdout, "consistent") {
		e.t.Fatalf("fsck %v: %s", args, r)
	}
}

// settle runs reclamation cycles until the segment bytes reach goal and
// stop changing (two cycles in a row with nothing deleted or repacked and
// the same bytes), or fails after timeout. It returns the final bytes and
// the peak seen.
func (e *env) settle(t *testing.T, goal int64, timeout time.Duration) (final, peak int64, cycles int) {
	t.Helper()
	start := time.Now()
	quiet := 0
	last := int64(-1)
	for {
		st := e.reclaimRun()
		cycles++
		got, objs := segmentBytes(t, e.store)
		peak = max(peak, got)
		if st.Deleted == 0 && st.Repacks == 0 && got == last {
			quiet++
		} else {
			quiet = 0
		}
		last = got
		if got <= goal && quiet >= 2 {
			return got, peak, cycles
		}
		if time.Since(start) > timeout {
			t.Fatalf("reclamation did not settle within %s: segments/ holds %s in %d objects (goal %s), last cycle %+v\n%s",
				timeout, mibs(got), objs, mibs(goal), st, e.ebbfs("space").stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func mibs(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/mib) }

// TestDelete800MiBReclaimed: 800 MiB of small and large fsynced files,
// all deleted: with default settings (real time, the 60 s grace in full,
// no manual cycles) the bytes under segments/ fall below 5% of what was
// written within 5 minutes, and fsck finds the result consistent.
func TestDelete800MiBReclaimed(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 800 MiB and waits for real-time reclamation")
	}
	seed := e2eSeed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	src := newDataSource(seed)
	e := newEnv(t)
	e.init()
	p := e.mount()

	// Sizes: large files of 20-100 MiB and about 64 MiB of small files of
	// 4-300 KiB, shuffled together, 800 MiB in all.
	const total = 800 * mib
	var sizes []int64
	var sum int64
	for small := int64(0); small < 64*mib; {
		n := int64(4*kib + rng.IntN(296*kib+1))
		sizes = append(sizes, n)
		small += n
		sum += n
	}
	// Large files while more than 120 MiB remain; the rest (20-120 MiB)
	// is one large file, or two if it exceeds 100 MiB.
	for total-sum > 120*mib {
		n := int64(20*mib + rng.IntN(80*mib+1))
		sizes = append(sizes, n)
		sum += n
	}
	rest := int64(total) - sum
	if rest > 100*mib {
		sizes = append(sizes, rest/2, rest-rest/2)
	} else {
		sizes = append(sizes, rest)
	}
	sum = 0
	for _, n := range sizes {
		sum += n
	}
	rng.Shuffle(len(sizes), func(i, j int) { sizes[i], sizes[j] = sizes[j], sizes[i] })
	if err := os.Mkdir(e.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	wstart := time.Now()
	var names []string
	nSmall := 0
	for i, n := range sizes {
		name := e.path(fmt.Sprintf("d/f%04d", i))
		writeSynced(t, name, n, src)
		names = append(names, name)
		if n <= 300*kib {
			nSmall++
		}
	}
	wtime := time.Since(wstart)
	written, objs := segmentBytes(t, e.store)
	t.Logf("wrote %s in %d files (%d small, %d large) in %s; segments/: %s in %d objects",
		mibs(sum), len(sizes), nSmall, len(sizes)-nSmall, wtime.Round(time.Millisecond), mibs(written), objs)
	if sum != total {
		t.Fatalf("wrote %d bytes, want %d", sum, total)
	}
	if written < total {
		t.Fatalf("segments/ holds %d bytes after fsyncing %d bytes of incompressible data", written, total)
	}

	dstart := time.Now()
	for _, n := range names {
		if err := os.Remove(n); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(e.path("d")); err != nil {
		t.Fatal(err)
	}
	t.Logf("deleted %d files in %s", len(names), time.Since(dstart).Round(time.Millisecond))

	// The bound: under 5% of what was written, within 5 minutes
	// of the deletes, with nothing but the writer's own schedule.
	goal := int64(total) / 20
	deadline := dstart.Add(5 * time.Minute)
	peak := written
	var got int64
	firstDrop := time.Duration(0)
	for {
		sampled := time.Since(dstart)
		got, objs = segmentBytes(t, e.store)
		peak = max(peak, got)
		if firstDrop == 0 && got < written {
			firstDrop = sampled
		}
		// The 60 s floor: a segment the deletes made dead got its deadline
		// after dstart, so until dstart+60 s every byte of the deleted
		// (incompressible) data is still stored; only garbage that was
		// already dead before (drained small-segment repack sources) may
		// go. A second of margin covers the sample's own duration.
		if sampled < 59*time.Second && got < total {
			t.Fatalf("%s after the deletes segments/ holds %d bytes, less than the %d deleted: dead segments went before the 60 s grace", sampled, got, total)
		}
		if got < goal {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 minutes after deleting %s, segments/ still holds %s in %d objects (goal < %s; peak %s; first drop after %s)\n%s",
				mibs(total), mibs(got), objs, mibs(goal), mibs(peak), firstDrop, e.ebbfs("space").stdout)
		}
		time.Sleep(time.Second)
	}
	took := time.Since(dstart)
	t.Logf("segments/ fell from %s (peak %s) to %s in %d objects %s after the deletes (first drop after %s)",
		mibs(written), mibs(peak), mibs(got), objs, took.Round(time.Second), firstDrop.Round(time.Second))

	sp := e.space()
	if sp.LiveBytes != 0 || sp.TombstonesPending != 0 {
		t.Fatalf("space after reclamation of everything: %+v", sp)
	}
	p.stop()
	e.fsckClean()
	if after, _ := segmentBytes(t, e.store); after > got {
		t.Fatalf("segments/ grew from %d to %d bytes across the stop", got, after)
	}
}

// TestRandomOverwritesSettle: a 256 MiB file overwritten by 65536 random
// 4 KiB pwrites (fsync every 1000): once reclamation settles, segments/
// holds at most 1.25 x 256 MiB, and the content equals the model, through
// the mount and after a restart on an empty cache directory.
func TestRandomOverwritesSettle(t *testing.T) {
	t.Parallel()
	seed := e2eSeed(t)
	rng := rand.New(rand.NewPCG(seed, 2))
	src := newDataSource(seed)
	e := newEnv(t, withEnvVars("EBBFS_TEST_TIME_SCALE=200"))
	e.init()
	p := e.mount()

	const size = 256 * mib
	model := make([]byte, size)
	src.fill(model)
	name := e.path("big")
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	start := time.Now()
	for off := 0; off < size; off += 4 * mib {
		if _, err := f.WriteAt(model[off:off+4*mib], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	initial, _ := segmentBytes(t, e.store)
	t.Logf("256 MiB written and fsynced in %s; segments/ %s", time.Since(start).Round(time.Millisecond), mibs(initial))

	const writes, syncEvery = 65536, 1000
	start = time.Now()
	peak := initial
	blk := make([]byte, 4*kib)
	var inSync time.Duration
	for i := 1; i <= writes; i++ {
		off := rng.IntN(size/(4*kib)) * 4 * kib
		src.fill(blk)
		if _, err := f.WriteAt(blk, int64(off)); err != nil {
			t.Fatalf("pwrite %d at %d: %v", i, off, err)
		}
		copy(model[off:], blk)
		if i%syncEvery == 0 || i == writes {
			s := time.Now()
			err := f.Sync()
			inSync += time.Since(s)
			if err != nil {
				t.Fatalf("fsync after %d pwrites: %v", i, err)
			}
			if i%(16*syncEvery) == 0 {
				got, _ := segmentBytes(t, e.store)
				peak = max(peak, got)
			}
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	atEnd, _ := segmentBytes(t, e.store)
	peak = max(peak, atEnd)
	t.Logf("%d random 4 KiB pwrites in %s (%s of it in fsync); segments/ %s at the end (peak sampled %s)",
		writes, time.Since(start).Round(time.Millisecond), inSync.Round(time.Millisecond), mibs(atEnd), mibs(peak))

	limit := int64(size) * 5 / 4
	start = time.Now()
	final, p2, cycles := e.settle(t, limit, 3*time.Minute)
	peak = max(peak, p2)
	sp := e.space()
	t.Logf("settled after %d manual cycles in %s: segments/ %s (%.3f x 256 MiB), peak %s; space: live %s fragmented %s dead %s",
		cycles, time.Since(start).Round(time.Millisecond), mibs(final), float64(final)/size, mibs(peak),
		mibs(sp.LiveBytes), mibs(sp.FragmentedBytes), mibs(sp.DeadBytes))
	if final > limit {
		t.Fatalf("segments/ holds %d bytes after settling, more than 1.25 x %d", final, size)
	}
	if sp.LiveBytes < size {
		t.Fatalf("the counters say %d live bytes for a %d-byte incompressible file", sp.LiveBytes, size)
	}

	dropPageCache(t, name)
	sameContent(t, name, model)
	p.stop()
	e.fsckClean("--verify-data")
	if err := os.RemoveAll(e.cache); err != nil {
		t.Fatal(err)
	}
	p = e.mount()
	sameContent(t, name, model)
	p.stop()
}

// TestPersistentCheckpointHoldsSpace: while a persistent checkpoint
// exists, deleting its data frees nothing (deletion and repack pause and
// `ebbfs space` names the checkpoint); deleting the checkpoint lets the
// space come back.
func TestPersistentCheckpointHoldsSpace(t *testing.T) {
	t.Parallel()
	seed := e2eSeed(t)
	src := newDataSource(seed)
	e := newEnv(t, withEnvVars("EBBFS_TEST_TIME_SCALE=200"))
	e.init()
	p := e.mount()

	kept := make([]byte, 100*kib)
	src.fill(kept)
	writeFile(t, e.path("kept"), kept)
	fsyncFile(t, e.path("kept"))
	var doomed int64
	for i, n := range []int64{100 * kib, 200 * kib, 3 * mib, 20 * mib, 40 * mib} {
		writeSynced(t, e.path(fmt.Sprintf("f%d", i)), n, src)
		doomed += n
	}
	e.mustEbbfs("flush")
	r := e.mustEbbfs("checkpoint", "create", "--persistent", "keep")
	if !strings.Contains(r.stdout, "keep") {
		t.Fatalf("checkpoint create: %s", r)
	}
	before, objs := segmentBytes(t, e.store)
	t.Logf("%s written; segments/ %s in %d objects with checkpoint keep", mibs(doomed+int64(len(kept))), mibs(before), objs)

	for i := range 5 {
		if err := os.Remove(e.path(fmt.Sprintf("f%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	e.mustEbbfs("flush")
	// The tombstone cleaner debits the large files' counters on its own
	// schedule (it sleeps 10 s, on the scaled clock, when idle).
	var sp spaceStats
	if !testutil.Until(2*time.Minute, func() bool {
		sp = e.space()
		return sp.TombstonesPending == 0 && sp.LiveBytes <= int64(len(kept))*2
	}) {
		t.Fatalf("the deleted files are still counted live after 2 minutes: %+v", sp)
	}
	// Several manual cycles and, in between, ~1000 s of scaled time: the
	// scheduled retries (every 60 s) run too.
	for i := range 4 {
		st := e.reclaimRun()
		if !st.Paused || len(st.PinnedBy) != 1 || st.PinnedBy[0] != "keep" || st.Deleted != 0 || st.Repacks != 0 {
			t.Fatalf("cycle %d under the persistent checkpoint: %+v, want paused by keep, nothing deleted or repacked", i, st)
		}
		time.Sleep(time.Second)
		if got, n := segmentBytes(t, e.store); got < before {
			t.Fatalf("segments/ fell from %d to %d bytes (%d objects) while checkpoint keep pins them", before, got, n)
		}
	}
	sp = e.space()
	if sp.Pinned["keep"] < doomed {
		t.Fatalf("space --json: checkpoint keep pins %d bytes, want at least the %d deleted: %+v", sp.Pinned["keep"], doomed, sp)
	}
	human := e.mustEbbfs("space").stdout
	if !strings.Contains(human, "pinned by checkpoint keep") {
		t.Fatalf("ebbfs space does not name checkpoint keep:\n%s", human)
	}
	held, _ := segmentBytes(t, e.store)
	t.Logf("held by keep: segments/ %s; space pins %s:\n%s", mibs(held), mibs(sp.Pinned["keep"]), human)

	e.mustEbbfs("checkpoint", "delete", "keep")
	start := time.Now()
	// Near zero: the kept file, its frame overhead and at most a few small
	// segments (a repack selection must free at least 1 MiB, so a segment
	// holding little garbage may stay).
	final, _, cycles := e.settle(t, int64(len(kept))+mib, time.Minute)
	sp = e.space()
	t.Logf("after deleting keep: segments/ %s after %d cycles in %s; space %+v", mibs(final), cycles, time.Since(start).Round(time.Millisecond), sp)
	if sp.DeadBytes != 0 || len(sp.Pinned) != 0 {
		t.Fatalf("space after the checkpoint is gone: %+v", sp)
	}
	if got := readFile(t, e.path("kept")); !bytes.Equal(got, kept) {
		t.Fatal("the kept file changed")
	}
	p.stop()
	e.fsckClean()
	if ents, err := os.ReadDir(filepath.Join(e.store, "checkpoints")); err == nil && len(ents) != 0 {
		t.Fatalf("checkpoints/ still holds %d records", len(ents))
	}
}
