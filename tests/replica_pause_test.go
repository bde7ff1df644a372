package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/reclaim"
)

// TestReplicaPauseAndKill: a replica stopped with SIGSTOP for longer than
// its checkpoint's span and longer than the writer keeps journals, while
// the writer overwrites, deletes and creates files, publishes manifests and
// reclaims (segments the replica's state points into get deleted), resumes
// with SIGCONT and converges to the writer's state: the same process and
// mount (no remount), a move to a newer manifest, zero EIO and zero wrong
// bytes on the files it reads, and a live checkpoint record again. Then the replica is killed
// with SIGKILL: its record stays until it expires, and reclamation brings
// the store back to the live bytes (ebbfs space), and the writer's
// metadata GC then prunes the record. The test build's knobs:
// journals kept 4 s, reader checkpoint lifetime 6 s (renewed every 2 s),
// reclamation time 200 times faster.
func TestReplicaPauseAndKill(t *testing.T) {
	const retention, ttl = 4 * time.Second, 6 * time.Second
	e := newEnv(t, withEnvVars("EBBFS_TEST_TIME_SCALE=200",
		"EBBFS_TEST_JOURNAL_RETENTION="+retention.String(), "EBBFS_TEST_READER_TTL="+ttl.String()))
	e.init()
	w := e.mount()
	const files = 24
	for i := 1; i <= files; i++ {
		writeFile(t, e.path(fmt.Sprintf("f%d.0", i)), blocks(uint64(i), 0, 20+i*3, 1))
	}
	e.mustEbbfs("flush")
	publish := func(name string) { // a manifest, through a checkpoint
		e.mustEbbfs("checkpoint", "create", name, "--ttl", "1m")
		e.mustEbbfs("checkpoint", "delete", name)
	}
	publish("boot")

	r := e.sameStore()
	rp := r.mount("--read-only")
	testutil.Eventually(t, time.Minute, "replica shows the writer's files", func() bool { return sameTrees(e.mnt, r.mnt) == "" })
	// (No descriptor on the replica's mount is held across the pause:
	// every process this test starts meanwhile would close its copy at
	// exec, which waits for the stopped daemon.)
	dev := mountDev(r.mnt)
	st0 := r.replicaStatus()
	if recs := e.readerCheckpoints(); len(recs) != 1 {
		t.Fatalf("want the replica's checkpoint, have %+v", recs)
	}

	// Paused.
	pid := rp.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	cont := func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
	defer cont()
	before := e.reclaimTotals()
	for round := 2; round <= 4; round++ {
		for i := 1; i <= 12; i++ { // overwritten: their old segments die
			writeFile(t, e.path(fmt.Sprintf("f%d.0", i)), blocks(uint64(i), 0, 20+i*3+round, uint64(round)))
		}
		if round == 2 {
			for i := 13; i <= 16; i++ {
				if err := os.Remove(e.path(fmt.Sprintf("f%d.0", i))); err != nil {
					t.Fatal(err)
				}
			}
		}
		id := 100 + round
		writeFile(t, e.path(fmt.Sprintf("f%d.0", id)), blocks(uint64(id), 0, 30, 1))
		e.mustEbbfs("flush")
		time.Sleep(retention + time.Second)
		publish(fmt.Sprintf("p%d", round))
		e.reclaimRun()
	}
	for time.Since(paused) < 3*ttl+time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	e.reclaimRun()
	after := e.reclaimTotals()
	if after.deleted <= before.deleted {
		t.Fatalf("no segment was deleted while the replica was paused (%+v -> %+v)", before, after)
	}
	next := filepath.Join(e.store, "meta", "journal", fmt.Sprintf("%016x", st0.Served+1))
	if _, err := os.Stat(next); !os.IsNotExist(err) {
		t.Fatalf("journal %d, the replica's next, is still in the store (%v): the pause proves nothing", st0.Served+1, err)
	}
	// Expired, or already pruned by the writer's metadata GC (expired
	// for longer than its span).
	recs := e.readerCheckpoints()
	if len(recs) > 1 || (len(recs) == 1 && recs[0].ExpireTime.After(time.Now())) {
		t.Fatalf("the paused replica's checkpoint should have expired: %+v", recs)
	}
	pausedFor := time.Since(paused)

	// Resumed.
	cont()
	resumed := time.Now()
	var stats verifyStats
	var diff string
	for {
		stats.verifyTree(r.mnt)
		if diff = sameTrees(e.mnt, r.mnt); diff == "" {
			break
		}
		if time.Since(resumed) > 60*time.Second {
			t.Fatalf("the replica did not converge within 60 s of SIGCONT: %s\n%s", diff, tail(rp.out.String(), 40))
		}
		time.Sleep(20 * time.Millisecond)
	}
	catchUp := time.Since(resumed)
	stats.verifyTree(r.mnt)
	st1 := r.replicaStatus()
	t.Logf("paused %v (span %v, journals kept %v; %.0f segments deleted meanwhile); converged %v after SIGCONT; status %+v; replica reads: %s",
		pausedFor.Round(time.Millisecond), ttl, retention, after.deleted-before.deleted, catchUp.Round(time.Millisecond), st1, stats.String())
	if f := stats.failures(); f != "" || stats.eio > 0 {
		t.Fatalf("replica read failures after the pause (%d EIO):\n%s", stats.eio, f)
	}
	if rp.exited() || mountDev(r.mnt) != dev {
		t.Fatal("the replica was remounted or exited")
	}
	if st1.Jumps <= st0.Jumps || st1.Served <= st0.Served {
		t.Fatalf("the replica did not move to a newer manifest: %+v -> %+v", st0, st1)
	}
	testutil.Eventually(t, 3*ttl, "the replica's checkpoint live again", func() bool {
		recs := e.readerCheckpoints()
		return len(recs) == 1 && recs[0].ExpireTime.After(time.Now()) && recs[0].ManifestSeq >= st1.Manifest
	})

	// Killed: the record stays and expires; reclamation goes on.
	rp.kill()
	recs = e.readerCheckpoints()
	if len(recs) != 1 {
		t.Fatalf("the killed replica's checkpoint: %+v", recs)
	}
	testutil.Eventually(t, 2*ttl, "the killed replica's checkpoint expires", func() bool { return time.Now().After(recs[0].ExpireTime) })
	for i := 1; i <= 20; i++ {
		_ = os.Remove(e.path(fmt.Sprintf("f%d.0", i)))
	}
	e.mustEbbfs("flush")
	start := time.Now()
	var sp spaceStats
	for {
		e.reclaimRun()
		sp = e.space()
		// Back to the live bytes, or to what the repack policy leaves: a
		// selection must free at least reclaim.MinSelection.
		if sp.TombstonesPending == 0 && sp.DeadSegments == 0 &&
			(sp.SegmentBytes <= sp.LiveBytes+sp.LiveBytes/20+64<<10 || sp.FragmentedBytes < reclaim.MinSelection) {
			break
		}
		if time.Since(start) > 60*time.Second {
			t.Fatalf("the store did not come back to the live bytes with the killed replica's checkpoint expired: %+v\n%s", sp, e.ebbfs("space").stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("after the killed replica's checkpoint expired: segments %d B for %d live B in %v", sp.SegmentBytes, sp.LiveBytes, time.Since(start).Round(time.Millisecond))
	// Expired for longer than its span, the record goes (the writer's
	// metadata GC prunes it, every 9 s at this time scale).
	testutil.Eventually(t, 3*ttl+30*time.Second, "the killed replica's record pruned", func() bool { return len(e.readerCheckpoints()) == 0 })
	w.stop()
	e.fsckClean()
}
