package tests

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
)

// restoreFiles is the size of the restore test's tree: 2,000 files in
// make test, EBBFS_RESTORE_FILES (10000 for the figure) otherwise.
func restoreFiles(t *testing.T) int {
	if s := os.Getenv("EBBFS_RESTORE_FILES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 100 {
			t.Fatalf("EBBFS_RESTORE_FILES=%q: want a number of files, at least 100", s)
		}
		return n
	}
	return 2000
}

// restoreContent is file i's content in version v: mostly small files, one
// in 50 of 200-400 KiB (over ten extents: its unlink leaves a tombstone).
func restoreContent(i, v int) []byte {
	n := 200 + (i*7919)%6000
	if i%50 == 0 {
		n = 200<<10 + (i*104729)%(200<<10)
	}
	b := make([]byte, n)
	rng := rand.New(rand.NewPCG(uint64(i), uint64(v)))
	for j := 0; j+8 <= n; j += 8 {
		binary.LittleEndian.PutUint64(b[j:], rng.Uint64())
	}
	return b
}

func restorePath(i int) string { return fmt.Sprintf("d%02d/f%05d", i%100, i) }

// writeTree writes files [from, to) in version v under root.
func writeTree(t *testing.T, root string, from, to, v int) {
	t.Helper()
	for i := from; i < to; i++ {
		p := filepath.Join(root, restorePath(i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, restoreContent(i, v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// restoreReply is the part of `checkpoint restore --json` the tests read.
type restoreReply struct {
	Checkpoint    string  `json:"checkpoint"`
	PreRestore    string  `json:"pre_restore_checkpoint"`
	Writer        string  `json:"writer"`
	Seconds       float64 `json:"duration_seconds"`
	InodesAdded   int     `json:"inodes_added"`
	InodesRemoved int     `json:"inodes_removed"`
	SegmentsDead  int     `json:"segments_dead"`
}

func (e *env) restore(name string) restoreReply {
	e.t.Helper()
	r := e.mustEbbfs("checkpoint", "restore", name, "--json")
	checkJSONSchema(e.t.(*testing.T), "checkpoint restore --json", r.stdout,
		schemaFor(e.t.(*testing.T), jsonSchemas(e.t.(*testing.T)), "`ebbfs checkpoint restore --json`"))
	var rep restoreReply
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		e.t.Fatalf("checkpoint restore --json: %v\n%s", err, r)
	}
	if rep.Checkpoint != name || !strings.HasPrefix(rep.PreRestore, "pre-restore-") {
		e.t.Fatalf("checkpoint restore --json: %+v", rep)
	}
	return rep
}

// treeOf is the content of every file under dir, or the test fails.
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	m, err := treeContent(dir)
	if err != nil {
		t.Fatalf("reading the tree under %s: %v", dir, err)
	}
	return m
}

// TestRestoreTree is issue 38's restore: a tree, a persistent checkpoint,
// rm -rf of half of it and new writes, then checkpoint restore through the
// running writer. The tree is back byte for byte on the writer and on a
// replica attached throughout (no EIO; the replica's and the writer's open
// files of the replaced state, removed or changed by the restore, read
// ESTALE; one it left as it was reads on); the pre-restore checkpoint
// holds the other state (run --checkpoint); once both checkpoints are
// deleted reclamation brings the store to the live bytes, and fsck is
// exact.
func TestRestoreTree(t *testing.T) {
	t.Parallel()
	n := restoreFiles(t)
	e := newEnv(t, withEnvVars("EBBFS_TEST_TIME_SCALE=600"))
	e.init()
	p := e.mount()
	r := e.sameStore()
	rp := r.mount("--read-only")
	writeTree(t, e.mnt, 0, n, 0)
	e.mustEbbfs("flush")
	want := treeOf(t, e.mnt)
	e.mustEbbfs("checkpoint", "create", "base", "--persistent")

	// The other state: half the directories removed, new files, some
	// rewritten.
	for d := 0; d < 50; d++ {
		if err := os.RemoveAll(e.path(fmt.Sprintf("d%02d", d))); err != nil {
			t.Fatal(err)
		}
	}
	writeTree(t, filepath.Join(e.mnt, "new"), 0, n/10, 1)
	for i := 50; i < n; i += 100 {
		writeFile(t, e.path(restorePath(i)), restoreContent(i, 2))
	}
	e.mustEbbfs("flush")
	other := treeOf(t, e.mnt)
	testutil.Eventually(t, time.Minute, "the replica follows the other state", func() bool { return sameTrees(e.mnt, r.mnt) == "" })
	heldW, err := os.Open(e.path("new/" + restorePath(1)))
	if err != nil {
		t.Fatal(err)
	}
	defer heldW.Close()
	heldR, err := os.Open(r.path("new/" + restorePath(1)))
	if err != nil {
		t.Fatal(err)
	}
	defer heldR.Close()
	// Open on both: a file the restore changes back (stale) and one it
	// leaves as it is (reads on).
	var held []*os.File
	for _, m := range []*env{e, r} {
		for _, i := range []int{50, 51} {
			flag := os.O_RDONLY
			if m == e {
				flag = os.O_RDWR
			}
			f, err := os.OpenFile(m.path(restorePath(i)), flag, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			held = append(held, f)
		}
	}
	before, objs := segmentBytes(t, e.store)

	start := time.Now()
	rep := e.restore("base")
	took := time.Since(start)
	if rep.Writer != "running" || rep.InodesAdded == 0 || rep.InodesRemoved == 0 {
		t.Fatalf("restore: %+v", rep)
	}
	// Open files of the replaced state read ESTALE: the one the restore
	// removed and the one it changed back, on the writer and on the
	// replica. Nothing reads the changed file through a new open before
	// (the kernel's page cache is the inode's: pages a new open reads in
	// would serve the old handle too); the kernel drops the pages it had
	// after the restore, on the replica once it has followed it, hence
	// the wait.
	buf := make([]byte, 100)
	stale := []*os.File{heldW, held[0], heldR, held[2]}
	testutil.Eventually(t, time.Minute, "every open file of the replaced state to read ESTALE", func() bool {
		for _, h := range stale {
			if _, err := h.ReadAt(buf, 0); !errors.Is(err, syscall.ESTALE) {
				return false
			}
		}
		return true
	})
	// A file the restore left as it was (the same inode, record and
	// bytes in both states) is a file of both: its handles go on.
	for _, h := range []*os.File{held[1], held[3]} {
		w := restoreContent(51, 0)
		got := make([]byte, len(w)+1)
		if k, err := h.ReadAt(got, 0); k != len(w) || string(got[:k]) != string(w) {
			t.Errorf("%s, unchanged by the restore, open across it: read %d bytes (%v), want its %d", h.Name(), k, err, len(w))
		}
	}
	// Writes, truncates and allocations through a writer's handle of the
	// replaced state fail too; through the unchanged file's they work.
	w50 := int64(len(restoreContent(50, 0)))
	if _, err := held[0].WriteAt([]byte("x"), w50); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("%s: a write through a handle from before the restore gives %v, want ESTALE", held[0].Name(), err)
	}
	if err := held[0].Truncate(1); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("%s: ftruncate through a handle from before the restore gives %v, want ESTALE", held[0].Name(), err)
	}
	if err := syscall.Fallocate(int(held[0].Fd()), 0, 0, 4096); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("%s: fallocate through a handle from before the restore gives %v, want ESTALE", held[0].Name(), err)
	}
	if _, err := held[1].WriteAt([]byte("x"), int64(len(restoreContent(51, 0)))); err != nil {
		t.Errorf("%s: a write through a handle of an unchanged file: %v", held[1].Name(), err)
	}
	if err := held[1].Truncate(int64(len(restoreContent(51, 0)))); err != nil {
		t.Errorf("%s: ftruncate through a handle of an unchanged file: %v", held[1].Name(), err)
	}
	// A new open of the changed file reads the restored contents.
	if got, err := os.ReadFile(e.path(restorePath(50))); err != nil || string(got) != string(restoreContent(50, 0)) {
		t.Errorf("%s opened after the restore: %d bytes (%v), want the restored %d", restorePath(50), len(got), err, w50)
	}
	if d := diffTrees(treeOf(t, e.mnt), want); d != "" {
		t.Fatalf("after the restore the writer's tree differs from the checkpoint's: %s", d)
	}
	for _, h := range held {
		h.Close()
	}
	testutil.Eventually(t, time.Minute, "the replica follows the restore", func() bool { return sameTrees(e.mnt, r.mnt) == "" })
	if d := diffTrees(treeOf(t, r.mnt), want); d != "" {
		t.Fatalf("the replica's tree differs from the checkpoint's: %s", d)
	}

	// The state replaced, served by its checkpoint.
	c := e.sameStore()
	cp := c.mount("--checkpoint", rep.PreRestore)
	if d := diffTrees(treeOf(t, c.mnt), other); d != "" {
		t.Fatalf("checkpoint %s does not hold the replaced state: %s", rep.PreRestore, d)
	}
	cp.stop()

	// Both checkpoints go; reclamation frees what only they referenced.
	e.mustEbbfs("checkpoint", "delete", "base")
	e.mustEbbfs("checkpoint", "delete", rep.PreRestore)
	live := e.space().LiveBytes
	final, _, cycles := e.settle(t, live+live/20+(2<<20), 3*time.Minute)
	sp := e.space()
	t.Logf("restore of %d files (%d inodes back, %d removed) took %s (reply %.2f s); segments/ before %s in %d objects, after reclamation %s (%d cycles), live %s",
		n, rep.InodesAdded, rep.InodesRemoved, took.Round(time.Millisecond), rep.Seconds, mibs(before), objs, mibs(final), cycles, mibs(sp.LiveBytes))
	if d := diffTrees(treeOf(t, r.mnt), want); d != "" {
		t.Fatalf("after reclamation the replica's tree differs: %s", d)
	}
	heldW.Close()
	heldR.Close()
	rp.stop()
	p.stop()
	e.fsckClean("--verify-data")
	p = e.mount()
	if d := diffTrees(treeOf(t, e.mnt), want); d != "" {
		t.Fatalf("after a restart the tree differs: %s", d)
	}
	p.stop()
}

// restoreStart mounts a new filesystem with a tree of 300 files, made
// durable, and checkpoint "base" of it (args: its kind); it returns the
// writer and the tree.
func restoreStart(t *testing.T, kind ...string) (*env, *proc, map[string]string) {
	e := newEnv(t)
	e.init()
	p := e.mount()
	writeTree(t, e.mnt, 0, 300, 0)
	e.mustEbbfs("flush")
	want := treeOf(t, e.mnt)
	e.mustEbbfs("checkpoint", append([]string{"create", "base"}, kind...)...)
	return e, p, want
}

// TestRestoreOffline restores with no writer running, and guards: an
// unknown name and a replica are refused with a clear message.
func TestRestoreOffline(t *testing.T) {
	t.Parallel()
	e, p, want := restoreStart(t, "--ttl", "1h")
	if err := os.RemoveAll(e.path("d07")); err != nil {
		t.Fatal(err)
	}
	writeTree(t, e.mnt, 300, 400, 0)
	e.mustEbbfs("flush")
	other := treeOf(t, e.mnt)
	if res := e.ebbfs("checkpoint", "restore", "nosuch"); res.code == 0 || !strings.Contains(res.stderr, `"nosuch"`) {
		t.Fatalf("restore of an unknown checkpoint: %s", res)
	}
	r := e.sameStore()
	rp := r.mount("--read-only")
	if res := r.ebbfs("checkpoint", "restore", "base"); res.code == 0 || !strings.Contains(res.stderr, "read-only") {
		t.Fatalf("restore through a replica: %s", res)
	}
	rp.stop()
	p.stop()

	rep := e.restore("base")
	if rep.Writer != "none" {
		t.Fatalf("restore with no writer: %+v", rep)
	}
	e.fsckClean()
	p = e.mount()
	if d := diffTrees(treeOf(t, e.mnt), want); d != "" {
		t.Fatalf("after an offline restore: %s", d)
	}
	// Undone by restoring the pre-restore checkpoint, through the writer.
	e.restore(rep.PreRestore)
	if d := diffTrees(treeOf(t, e.mnt), other); d != "" {
		t.Fatalf("after undoing the restore: %s", d)
	}
	p.stop()
	e.fsckClean()
}

// TestRestoreCrash kills the writer (a failpoint exits at once, as kill -9
// would) before the restore's batch, between its commit and its journal,
// and after the journal, and with kill -9 as soon as the pre-restore
// checkpoint exists: the restarted writer serves the old state or the
// restored one, whole, and fsck is clean.
func TestRestoreCrash(t *testing.T) {
	t.Parallel()
	for _, fp := range []string{"restore-before-commit", "restore-before-journal", "restore-after-journal", "kill-9"} {
		t.Run(fp, func(t *testing.T) {
			e, p, want := restoreStart(t, "--persistent")
			for d := 0; d < 50; d++ {
				os.RemoveAll(e.path(fmt.Sprintf("d%02d", d)))
			}
			writeTree(t, e.mnt, 300, 400, 1)
			e.mustEbbfs("flush")
			other := treeOf(t, e.mnt)
			if fp == "kill-9" {
				restoreKilled(t, e, p)
			} else {
				p.stop()
				restoreFailpoint(t, e, fp)
			}
			e.forceUnmount()
			e.fsckClean()
			p = e.mount()
			got := treeOf(t, e.mnt)
			dOld, dNew := diffTrees(got, other), diffTrees(got, want)
			if dOld != "" && dNew != "" {
				t.Fatalf("after a crash at %s the tree is neither state: vs old %s; vs restored %s", fp, dOld, dNew)
			}
			t.Logf("crash at %s: restored %v", fp, dNew == "")
			p.stop()
			e.fsckClean()
		})
	}
}

// restoreFailpoint starts a writer that exits at failpoint fp and runs a
// restore into it.
func restoreFailpoint(t *testing.T, e *env, fp string) {
	saved := e.extraEnv
	e.extraEnv = append(append([]string(nil), saved...), "EBBFS_FAILPOINT="+fp)
	p := e.mount()
	e.extraEnv = saved
	if res := e.ebbfs("checkpoint", "restore", "base"); res.code == 0 {
		t.Fatalf("restore with the writer dying at %s succeeded: %s", fp, res)
	}
	if code := p.wait(); code != 97 {
		t.Fatalf("the writer exited %d, want the failpoint's 97", code)
	}
}

// restoreKilled runs a restore in writer p and kills p (SIGKILL) once the
// pre-restore checkpoint is in the store.
func restoreKilled(t *testing.T, e *env, p *proc) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := e.command(ctx, ebbfsBin, "checkpoint", "-c", e.cfg, "restore", "base")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the pre-restore checkpoint", func() bool {
		m, _ := filepath.Glob(filepath.Join(e.store, "checkpoints", "pre-restore-*"))
		return len(m) > 0
	})
	p.kill()
	_ = cmd.Wait() // done or failed: either is right
}
