package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// A crash case runs a workload in the real binary with one failpoint
// armed, so that the writer dies there (exit 97, like kill -9 at that
// instant); then it restarts the writer and checks invariants 2, 4 and 5:
// every fsynced byte is intact, fsck --verify-data is clean, and the
// garbage the crash left (orphan segments, stale counters, drained repack
// sources) is reclaimed.
//
// Phases, each its own process: an unarmed setup that builds durable
// state (ended cleanly, or with SIGKILL for the recovery points), an
// optional earlier crash at another failpoint (to leave an orphan segment
// or a stale counter behind), then the armed run.
type crashCase struct {
	fp        string // failpoint spec: "name" or "name=N" (fire at the N-th hit)
	setup     func(*crashRun)
	setupKill bool                   // end the setup with SIGKILL instead of a clean stop
	between   func(*testing.T, *env) // after the setup, with no writer running
	pre       string                 // failpoint of an earlier crash
	preWork   func(*crashRun)
	work      func(*crashRun)
	// unreachable says why no end-to-end workload can reach the point.
	unreachable string
	// coveredBy names the end-to-end test (in this package, run by make
	// test) that crashes at the point with a workload of its own.
	coveredBy string
	env       []string // more environment for every process of the case
}

func fpName(spec string) string {
	name, _, _ := strings.Cut(spec, "=")
	return name
}

// crashCases maps every failpoint in the source to a workload that
// reaches it.
func crashCases() []crashCase {
	var cases []crashCase
	add := func(c crashCase, specs ...string) {
		for _, s := range specs {
			c.fp = s
			cases = append(cases, c)
		}
	}
	// The write path and the namespace: creates, overwrites, renames,
	// unlinks (inline delete, orphan at last close), truncates.
	add(crashCase{setup: setupBase, work: workWrite},
		"flush-after-snapshot", "segment-before-upload", "segment-after-upload",
		"segment-after-inode-commit", "segment-after-commit",
		"barrier-before-journal", "lsm.barrier.journal-written", "barrier-after-journal",
		"ns-create-after-commit", "ns-rename-after-commit", "ns-unlink-after-commit",
		"unlink-inline-delete", "truncate-after-commit",
		"unlink-orphaned", "orphan-last-close")
	// A large file's unlink: tombstone and cleaner (more than 1000 extents).
	add(crashCase{setup: setupLarge, work: workLargeUnlink},
		"unlink-tombstone-written", "cleaner-mid-batch", "cleaner-before-commit", "cleaner-after-commit")
	// A large truncate: a range tombstone, worked off by the cleaner.
	add(crashCase{setup: setupLarge, work: workLargeTruncate},
		"truncate-range-tombstone", "cleaner-range-before-commit")
	// Overwrites and deletes, then reclamation cycles: dead-segment
	// deletion and repack (more than 1000 frames moved by one job). The
	// cycle points fire at their third hit, in a cycle with work to do.
	add(crashCase{setup: setupReclaim, work: workReclaim},
		"barrier-before-cutoff=3", "cycle-after-barrier=3", "cycle-after-checkpoint-list=3", "cycle-after-scan=3", "cycle-after-deadlines=3",
		"delete-after-directory-read", "delete-after-verify", "delete-after-barrier", "delete-after-object-delete", "delete-after-counter-removed",
		"repack-after-gather", "repack-before-upload", "repack-after-upload",
		"repack-after-repoint", "repack-after-jobs")
	// A repoint in several chunks needs one job of more than RepointChunk
	// frames: reclamation is held while the overwrites land, so that no
	// cycle repacks a part of them early.
	add(crashCase{setup: setupReclaim, work: workReclaimHeld}, "repack-mid-repoint")
	// A crash between DELETE and the counter's removal leaves a stale
	// counter; the next writer's cycle drops it.
	add(crashCase{setup: setupReclaim, pre: "delete-after-object-delete", preWork: workReclaim, work: workCycles},
		"delete-after-stale-drop")
	add(crashCase{unreachable: "needs a counter that under-counts its live pointers, which no crash produces (counters and pointers change in one batch); reclaim.TestUnderCountRepaired covers the repair in-process"},
		"delete-after-repair")
	// A crash between a segment's upload and its commit leaves an orphan;
	// the orphan sweep judges and deletes it.
	add(crashCase{setup: setupBase, pre: "segment-after-upload", preWork: workOrphanSegment, work: workSweep},
		"sweep-after-list-shard", "sweep-mid", "sweep-after-directory-read",
		"sweep-before-delete", "sweep-after-delete", "sweep-after-record-time")
	// Metadata object GC over superseded manifests and compacted tables.
	add(crashCase{setup: setupManifests, between: func(t *testing.T, e *env) { crashBackdateMeta(t, e) }, work: workMetaGC},
		"metagc-after-listing", "metagc-mid", "metagc-between-manifests-and-ssts")
	// Checkpoint creation (a manifest publication, then the record).
	add(crashCase{setup: setupBase, work: workCheckpoint},
		"checkpoint-after-publish", "checkpoint-after-record",
		"lsm.publish.checkpointed", "lsm.publish.table-uploaded", "lsm.publish.tables-shipped")
	// Automatic publication after 64 journal objects (many barriers).
	add(crashCase{setup: setupBase, work: workManyBarriers},
		"lsm.publish.manifest-written", "lsm.publish.journals-deleted")
	// Patched extents: 4 KiB writes into extents of a file are
	// committed as patches; at eight patches (mergePatches) an extent is
	// merged (a whole dirty buffer), and the next flush commits it as one
	// frame.
	add(crashCase{setup: setupBase, work: workPatch},
		"patch-before-commit", "patch-after-commit=3", "merge-after-install",
		"merge-before-commit", "merge-after-commit")
	// A checkpoint restore: its own test crashes at each point and checks
	// that the tree is the old state or the restored one, whole.
	add(crashCase{coveredBy: "TestRestoreCrash"},
		"restore-before-commit", "restore-before-journal", "restore-after-journal")
	// Recovery after a kill -9: lease takeover, manifest + journal replay,
	// and an orphan (unlinked while open) finished at startup.
	add(crashCase{setup: setupKilledWithOrphan, setupKill: true},
		"lsm.lease.taken-over", "lsm.recover.manifest-loaded", "lsm.recover.journals-replayed", "orphan-startup")
	return cases
}

// ---- setups (unarmed, every step must succeed) ----

func setupBase(r *crashRun) {
	r.write("base1", randBytes(r.t, 1<<20))
	r.write("base2", randBytes(r.t, 300<<10))
	if err := os.Mkdir(r.e.path("dir"), 0o755); err != nil {
		r.t.Fatal(err)
	}
	r.write("dir/base3", randBytes(r.t, 64<<10))
	r.flush()
}

func setupLarge(r *crashRun) {
	setupBase(r)
	r.write("big", crashCompressible(r.t, 1100, 512)) // 1100 extents
	r.flush()
}

func setupReclaim(r *crashRun) {
	setupBase(r)
	r.write("keep", randBytes(r.t, 2<<20))
	r.write("gone1", randBytes(r.t, 2<<20)) // shares keep's segment: repack
	r.flush()
	r.write("gone2", randBytes(r.t, 3<<20)) // a segment of its own: deleted whole
	r.flush()
	r.write("over", randBytes(r.t, 1<<20))
	r.flush()
	// 2048 extents in two segments of 1024 frames of about 2 KiB each: a
	// repack job over both moves more than RepointChunk (1000) frames.
	r.write("frag", crashCompressible(r.t, 2048, 2048))
	r.flush()
}

func setupManifests(r *crashRun) {
	setupBase(r)
	for i := 0; i < 5; i++ {
		n := "m" + strconv.Itoa(i)
		r.write(n, randBytes(r.t, 100<<10))
		r.flush()
		r.cli("checkpoint", "create", "--ttl", "1m", "g"+strconv.Itoa(i)) // publishes a manifest
		r.cli("checkpoint", "delete", "g"+strconv.Itoa(i))                // and unpins it again
	}
}

func setupKilledWithOrphan(r *crashRun) {
	setupBase(r)
	r.cli("checkpoint", "create", "--ttl", "1m", "s") // a manifest, then journals after it
	r.write("held", randBytes(r.t, 400<<10))
	r.flush()
	r.hold("held")
	r.remove("held") // open: an orphan until the last close, which never comes
	r.flush()
	r.write("after", randBytes(r.t, 10<<10))
	r.flush()
}

// ---- workloads (armed) ----

func workWrite(r *crashRun) {
	r.write("a", randBytes(r.t, 1<<20))
	r.write("b", randBytes(r.t, 200<<10))
	r.flush()
	r.write("base1", randBytes(r.t, 1<<20)) // O_TRUNC, then new data
	r.flush()
	r.rename("b", "dir/b2")
	r.flush()
	r.remove("base2") // 10 extents: deleted inline
	r.flush()
	r.truncate("a", 100<<10+5)
	r.flush()
	r.write("o", randBytes(r.t, 200<<10))
	r.flush()
	r.hold("o")
	r.remove("o") // open: an orphan
	r.flush()
	r.release("o") // last close deletes it
	r.flush()
}

func workLargeUnlink(r *crashRun) {
	r.remove("big")
	r.flush()
	r.waitExit(30 * time.Second) // the cleaner runs in the background (slow on a loaded machine)
	r.flush()
}

func workLargeTruncate(r *crashRun) {
	r.truncate("big", 5) // 1099 extents: more than a truncate drops inline
	r.flush()
	r.waitExit(30 * time.Second) // the cleaner runs in the background
	r.flush()
}

func workReclaim(r *crashRun) {
	var offs []int64
	var datas [][]byte
	for i := 0; i < 2048; i += 8 {
		offs = append(offs, int64(i)<<15)
		datas = append(datas, crashCompressible(r.t, 1, 2048))
	}
	r.pwrites("frag", offs, datas) // 12.5 % of each segment dead
	r.write("over", randBytes(r.t, 1<<20))
	r.remove("gone1")
	r.remove("gone2")
	r.flush()
	r.cycles(5)
}

// workReclaimHeld is workReclaim with reclamation paused by a persistent
// checkpoint until every overwrite is durable.
func workReclaimHeld(r *crashRun) {
	r.cli("checkpoint", "create", "--persistent", "hold")
	var offs []int64
	var datas [][]byte
	for i := 0; i < 2048; i += 8 {
		offs = append(offs, int64(i)<<15)
		datas = append(datas, crashCompressible(r.t, 1, 2048))
	}
	r.pwrites("frag", offs, datas)
	r.flush()
	r.cli("checkpoint", "delete", "hold")
	r.cycles(5)
}

func workCycles(r *crashRun) { r.cycles(5) }

// workPatch writes 4 KiB into each of base1's first 16 extents (a patch
// each, below the end of the file), a flush after each round, at a new
// place every round: at the eighth the extents want a merge, and the
// flushes after it commit the merged frames (or whole extents, when a
// round writes into a merged buffer).
func workPatch(r *crashRun) {
	for round := int64(0); round < 8 && r.alive(); round++ {
		var offs []int64
		var datas [][]byte
		for ext := int64(0); ext < 16; ext++ {
			offs = append(offs, ext<<15+round<<12)
			datas = append(datas, randBytes(r.t, 4<<10))
		}
		r.pwrites("base1", offs, datas)
		r.flush()
	}
	for i := 0; i < 20 && r.alive(); i++ {
		r.waitExit(200 * time.Millisecond) // the merger runs in the background
		r.flush()
	}
}

func workOrphanSegment(r *crashRun) {
	r.write("lost", randBytes(r.t, 500<<10))
	r.flush()
}

func workSweep(r *crashRun) {
	r.cli("reclaim", "sweep")
}

func workMetaGC(r *crashRun) {
	// A new manifest moves the horizon; the next pass (every 1.8 s at
	// this time scale) judges the hour-old ones.
	r.write("mx", randBytes(r.t, 100<<10))
	r.flush()
	r.cli("checkpoint", "create", "--ttl", "1m", "gx")
	r.cli("checkpoint", "delete", "gx")
	r.waitExit(30 * time.Second)
}

func workCheckpoint(r *crashRun) {
	r.write("c1", randBytes(r.t, 500<<10))
	r.flush()
	r.cli("checkpoint", "create", "--ttl", "1m", "cp1")
	r.write("c2", randBytes(r.t, 100<<10))
	r.flush()
	r.cli("checkpoint", "create", "--ttl", "1m", "cp2")
}

func workManyBarriers(r *crashRun) {
	r.write("j", randBytes(r.t, 4<<10))
	for i := 0; i < 80 && r.alive(); i++ {
		r.pwrites("j", []int64{int64(i) << 12}, [][]byte{randBytes(r.t, 4<<10)})
		r.fsync("j") // one journal object each
	}
	r.waitExit(30 * time.Second) // publication runs in the background
}

// ---- the matrix ----

// TestCrashAtFailpoints: for every failpoint, a writer that dies there
// leaves a store from which a new writer recovers everything that was
// made durable, fsck finds it consistent, and reclamation removes the
// garbage (invariants 2, 4 and 5). Cases run crashParallel at a time
// (EBBFS_CRASH_PARALLEL, default 4): each has its own directories, store
// and ports.
func TestCrashAtFailpoints(t *testing.T) {
	t.Parallel()
	if noRun != "" {
		t.Skipf("end-to-end tests need: %s", noRun)
	}
	par := 4
	if v, err := strconv.Atoi(os.Getenv("EBBFS_CRASH_PARALLEL")); err == nil && v > 0 {
		par = v
	}
	start := time.Now()
	var mu sync.Mutex
	fired := map[string]bool{}
	var missed []string
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for _, c := range crashCases() {
		name := fpName(c.fp)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			t.Run(name, func(t *testing.T) {
				if c.unreachable != "" {
					t.Skipf("not reachable end to end: %s", c.unreachable)
				}
				if c.coveredBy != "" {
					t.Logf("the crash at this point is run by %s", c.coveredBy)
					return
				}
				ok := runCrashCase(t, c)
				mu.Lock()
				defer mu.Unlock()
				if ok {
					fired[name] = true
				} else {
					missed = append(missed, name)
				}
			})
		}()
	}
	wg.Wait()
	sort.Strings(missed)
	t.Logf("failpoints fired %d/%d in %s; not fired: %v", len(fired), len(crashCases()), time.Since(start).Round(time.Second), missed)
}

// runCrashCase runs one case and reports whether its failpoint fired.
func runCrashCase(t *testing.T, c crashCase) bool {
	e := newEnv(t, withEnvVars(append([]string{"EBBFS_TEST_TIME_SCALE=1000"}, c.env...)...))
	e.init()
	m := newCrashModel()
	if c.setup != nil {
		r := &crashRun{t: t, e: e, m: m, strict: true, open: map[string]*os.File{}}
		r.p = e.mount()
		c.setup(r)
		if c.setupKill {
			r.p.kill()
			r.releaseAll()
			e.forceUnmount()
		} else {
			r.releaseAll()
			r.p.stop()
			m.barrierOK()
		}
	}
	if c.between != nil {
		c.between(t, e)
	}
	if c.pre != "" && !crashPhase(t, e, m, c.pre, c.preWork) {
		t.Fatalf("the earlier crash at %s did not happen", c.pre)
	}
	fired := crashPhase(t, e, m, c.fp, c.work)
	if !fired {
		t.Errorf("failpoint %s was not reached by its workload", c.fp)
	}
	crashVerify(t, e, m)
	return fired
}

// crashPhase runs work in a writer armed with spec. It reports whether
// the failpoint fired (and then requires exit 97 and its message).
func crashPhase(t *testing.T, e *env, m *crashModel, spec string, work func(*crashRun)) bool {
	t.Helper()
	name := fpName(spec)
	base := e.extraEnv
	e.extraEnv = append(append([]string(nil), base...), "EBBFS_FAILPOINT="+spec)
	p := e.start()
	e.extraEnv = base
	r := &crashRun{t: t, e: e, p: p, m: m, open: map[string]*os.File{}}
	// The workload starts only after "ebbfs running" (or the writer's
	// exit): while go-fuse's mount check holds a file open on the mount, a
	// process that exits deadlocks in the kernel's FLUSH to itself, and the
	// tombstone cleaner already runs then.
	if p.waitUp(mountTimeout, true) && work != nil {
		work(r)
	}
	r.waitExit(10 * time.Second)
	r.releaseAll()
	if !p.exited() {
		p.stop()
		m.barrierOK()
		return false
	}
	code := p.wait()
	if !crashExitedAt(p, name) {
		t.Fatalf("writer exited %d, want %d at failpoint %s:\n%s", code, failpointExit, name, p.out.String())
	}
	e.forceUnmount()
	return true
}

// crashVerify restarts without failpoints and checks data, reclamation
// and fsck.
func crashVerify(t *testing.T, e *env, m *crashModel) {
	t.Helper()
	p := e.mount()
	crashCheckModel(t, e, m, "after recovery")
	// The recovered writer works.
	writeFile(t, e.path("post-recovery"), []byte("ok"))
	fsyncFile(t, e.path("post-recovery"))
	m.durable["post-recovery"] = []byte("ok")
	crashReclaimGarbage(t, e)
	crashCheckModel(t, e, m, "after reclamation")
	p.stop()
	if r := e.ebbfs("fsck", "--verify-data"); r.code != 0 {
		t.Errorf("fsck --verify-data after recovery: %s", r)
	}
}

// testDefined reports whether a _test.go file of this package defines
// the function name.
func testDefined(t *testing.T, name string) bool {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "\nfunc "+name+"(") {
			return true
		}
	}
	return false
}

// TestFailpointMatrixComplete: every failpoint in the source has a crash
// case, and every case names a failpoint that exists.
func TestFailpointMatrixComplete(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`failpoint\.Hit\("([^"]+)"\)`)
	inSource := map[string]string{}
	// Every package of the module, so that a failpoint in a package added
	// later is not missed.
	err := filepath.WalkDir("..", func(f string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && f != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "tests" || d.Name() == "run") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(f, ".go") || strings.HasSuffix(f, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		for _, sm := range re.FindAllStringSubmatch(string(b), -1) {
			inSource[sm[1]] = f
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cased := map[string]bool{}
	for _, c := range crashCases() {
		n := fpName(c.fp)
		if cased[n] {
			t.Errorf("failpoint %s has two crash cases", n)
		}
		cased[n] = true
		if _, ok := inSource[n]; !ok {
			t.Errorf("crash case %s names no failpoint in the source", n)
		}
		if c.coveredBy != "" && !testDefined(t, c.coveredBy) {
			t.Errorf("crash case %s is covered by %s, which this package does not define", n, c.coveredBy)
		}
	}
	for n, f := range inSource {
		if !cased[n] {
			t.Errorf("failpoint %s (%s) has no crash case", n, f)
		}
	}
	if len(inSource) < 40 {
		t.Errorf("only %d failpoints in the source, want at least 40", len(inSource))
	}
}
