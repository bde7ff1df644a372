package tests

import (
	"bytes"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/s3test"
)

// outageLength is how long the store is away in the outage tests.
const outageLength = 60 * time.Second

// TestStoreOutage: during a workload of file writes, reads, fsyncs,
// renames and directory operations through the mount and NBD writes,
// reads and flushes through qemu-io, the real S3 server (a separate
// process) goes away for a minute in three ways, each in its own
// environment, run in parallel:
//   - stop: SIGSTOP, then SIGCONT (requests hang without an answer);
//   - restart: SIGKILL, then a new server on the same address and data
//     directory (connections refused meanwhile);
//   - link: the server in its own network namespace and the link to it
//     taken down, then up again (packets dropped, no route).
//
// Asserted for each: zero errors in the applications (fsync and NBD FLUSH
// may block during the outage and must then succeed); `ebbfs status` says
// STORE UNREACHABLE and ebbfs_store_unreachable_seconds is above 0 during
// the outage, and neither once it is over; the same writer process and
// mount throughout (no remount); every file, directory and NBD region
// holds what was last written, on the mount after the outage and after a
// restart of the writer that recovers from the store alone (an empty
// cache directory).
func TestStoreOutage(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"stop", "restart", "link"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			testStoreOutage(t, kind)
		})
	}
}

func testStoreOutage(t *testing.T, kind string) {
	need(t, "qemu-io", "truncate")
	if noRun != "" {
		t.Skipf("end-to-end tests need: %s", noRun)
	}
	var srv *s3test.Server
	var h *netnsHost
	if kind == "link" {
		h = newNetnsHost(t)
		srv = s3test.StartWrapped(t, h.peerIP, h.nsexecPrefix()...)
	} else {
		srv = s3test.Start(t)
	}
	e := newEnv(t, withS3(srv.Endpoint, srv.Region, srv.Bucket, "outage-"+kind, srv.AccessKey, srv.SecretKey))
	e.init()
	p := e.mount()
	pid, dev := p.cmd.Process.Pid, mountDev(e.mnt)

	w := newWorkload(e)
	w.start(3)
	time.Sleep(5 * time.Second) // some state before the outage
	if errs := w.errs.list(); len(errs) > 0 {
		t.Fatalf("errors before the outage: %q", errs)
	}

	cyclesBefore := e.scrapeUnix().sum("ebbfs_reclaim_cycles_total", `result="ok"`)

	// The outage.
	t.Logf("%s: the store goes away for %s", kind, outageLength)
	began := time.Now()
	var back func()
	switch kind {
	case "stop":
		if err := syscall.Kill(srv.Pid(), syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		cont := func() { _ = syscall.Kill(srv.Pid(), syscall.SIGCONT) }
		t.Cleanup(cont)
		back = cont
	case "restart":
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		back = func() {
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
		}
	case "link":
		h.setLink(t, false)
		back = func() { h.setLink(t, true) }
	}
	opsBefore, cachedBefore := w.opCount(), w.cachedCount()
	time.Sleep(2 * time.Second)
	waitDuring := w.duringOutage(4 * time.Minute)
	var sawStatus, sawMetric, slowestStatus, slowestScrape time.Duration
	var statusOut string
	var unreachable float64
	for time.Since(began) < outageLength {
		if sawStatus == 0 {
			t0 := time.Now()
			ok, out := e.statusSays("STORE UNREACHABLE since")
			slowestStatus = max(slowestStatus, time.Since(t0))
			if ok {
				sawStatus, statusOut = time.Since(began), out
			}
		}
		if sawMetric == 0 {
			t0 := time.Now()
			v := e.scrapeUnix().sum("ebbfs_store_unreachable_seconds")
			slowestScrape = max(slowestScrape, time.Since(t0))
			if v > 0 {
				sawMetric, unreachable = time.Since(began), v
			}
		}
		time.Sleep(time.Second)
	}
	opsDuring, cachedDuring := w.opCount()-opsBefore, w.cachedCount()-cachedBefore
	var stuck string
	if cachedDuring < 20 {
		// Taken before the store comes back, while it still waits.
		stuck = w.cachedStuck() + "; the writer's goroutines:\n" + e.goroutines()
	}
	backAt := time.Now()
	back()
	ended := time.Now()
	t.Logf("%s: during the outage the slowest ebbfs status took %s, the slowest /metrics scrape %s",
		kind, slowestStatus.Round(time.Millisecond), slowestScrape.Round(time.Millisecond))
	if slowestStatus > 10*time.Second || slowestScrape > 10*time.Second {
		// A listing of the store under the sampler's lock used to hold
		// them until its 20 s timeout.
		t.Errorf("status or /metrics waited for the store during the outage (slowest %s, %s)", slowestStatus, slowestScrape)
	}
	t.Logf("%s: the store is back after %s; %d application operations completed meanwhile, %d of them reads of cached files and metadata operations",
		kind, ended.Sub(began).Round(time.Millisecond), opsDuring, cachedDuring)
	if sawStatus == 0 {
		t.Errorf("ebbfs status never said STORE UNREACHABLE during the outage")
	} else {
		t.Logf("%s: ebbfs status said it %s into the outage:\n%s", kind, sawStatus.Round(time.Second), statusOut)
	}
	if sawMetric == 0 {
		t.Errorf("ebbfs_store_unreachable_seconds stayed 0 during the outage")
	} else {
		t.Logf("%s: ebbfs_store_unreachable_seconds = %.1f %s into the outage", kind, unreachable, sawMetric.Round(time.Second))
	}
	if cachedDuring < 20 {
		t.Errorf("only %d reads of cached files and metadata operations completed during the outage; they must keep working. The worker is %s", cachedDuring, stuck)
	}

	dr := waitDuring()
	fsyncErr, flushErr, fsyncDone, flushDone := dr.fsyncErr, dr.flushErr, dr.fsyncDone, dr.flushDone
	if fsyncErr != nil || flushErr != nil {
		t.Errorf("an fsync and an NBD FLUSH started 2 s into the outage: fsync %v, FLUSH %v", fsyncErr, flushErr)
	}
	t.Logf("%s: an fsync and an NBD write and FLUSH started 2 s into the outage returned success %s and %s after the store came back",
		kind, fsyncDone.Sub(backAt).Round(time.Millisecond), flushDone.Sub(backAt).Round(time.Millisecond))
	if fsyncDone.Before(backAt) || flushDone.Before(backAt) {
		t.Errorf("the fsync or the NBD FLUSH returned success %s / %s before the store came back: it cannot have reached it",
			backAt.Sub(fsyncDone).Round(time.Millisecond), backAt.Sub(flushDone).Round(time.Millisecond))
	}

	// The workload goes on for a while, then stops; everything it started
	// must finish.
	time.Sleep(10 * time.Second)
	w.stop(4 * time.Minute)
	stopped := time.Now()
	w.fsyncAll()
	e.mustEbbfs("flush")
	t.Logf("%s: workload stopped %s after the store came back; final fsync of every file and ebbfs flush took %s",
		kind, stopped.Sub(ended).Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond))
	if errs := w.errs.list(); len(errs) > 0 {
		t.Errorf("%d application errors:", len(errs))
		for i, s := range errs {
			if i == 20 {
				t.Errorf("...")
				break
			}
			t.Errorf("  %s", s)
		}
	}
	w.mu.Lock()
	var spanning, longest = 0, time.Duration(0)
	for _, f := range w.fsyncs {
		if f.start.Before(ended) && f.start.Add(f.took).After(began) {
			spanning++
		}
		longest = max(longest, f.took)
	}
	t.Logf("%s: %d file operations and %d NBD runs (write, read, flush) succeeded; %d fsyncs, %d of them during the outage, the longest %s",
		kind, w.ops, w.nbdOps, len(w.fsyncs), spanning, longest.Round(time.Millisecond))
	w.mu.Unlock()
	if ok, out := e.statusSays("STORE UNREACHABLE"); ok {
		t.Errorf("ebbfs status still says the store is unreachable after the outage:\n%s", out)
	}
	if v := e.scrapeUnix().sum("ebbfs_store_unreachable_seconds"); v != 0 {
		t.Errorf("ebbfs_store_unreachable_seconds = %v after the outage", v)
	}
	if p.exited() || p.cmd.Process.Pid != pid || mountDev(e.mnt) != dev {
		t.Fatalf("the writer or its mount did not stay: exited %v, mount %q (was %q)", p.exited(), mountDev(e.mnt), dev)
	}
	w.verify(kind + ", after the outage, same mount")
	// Reclamation resumed by itself: a cycle completed since the outage
	// began (a failed one runs again 60 s later).
	var cycles float64
	resumed := time.Now()
	for time.Since(resumed) < 2*time.Minute {
		if cycles = e.scrapeUnix().sum("ebbfs_reclaim_cycles_total", `result="ok"`); cycles > cyclesBefore {
			break
		}
		time.Sleep(time.Second)
	}
	if cycles <= cyclesBefore {
		t.Errorf("no reclamation cycle completed in the 2 minutes after the outage (%v before it, %v now)", cyclesBefore, cycles)
	} else {
		t.Logf("%s: reclamation cycles completed: %v before the outage, %v %s after the checks began", kind, cyclesBefore, cycles, time.Since(resumed).Round(time.Second))
	}

	// From the store alone.
	p.stop()
	if err := os.RemoveAll(e.cache); err != nil {
		t.Fatal(err)
	}
	p = e.mount()
	w.verify(kind + ", after a restart with an empty cache directory")
	if r := e.ebbfs("fsck"); r.code != 0 {
		t.Errorf("fsck after the outage: %s", r)
	}
	p.stop()
}

// TestTakeOverPartitionedWriter: two network namespaces as two hosts. The
// writer on host 1 is cut off from the store (its link down) with a write
// whose fsync is waiting (its status says STORE UNREACHABLE);
// `ebbfs run --take-over` on host 2 takes the
// lease at once. While partitioned the old writer's fsync keeps waiting
// (it cannot know it was replaced, and an fsync that could still succeed
// must not fail); once the link is back it finds itself fenced and the
// fsync fails, as does every later one and `ebbfs flush`. Nothing the old
// writer wrote after the partition is in the new writer's state, before or
// after a restart of the new writer; everything fsynced before it is.
func TestTakeOverPartitionedWriter(t *testing.T) {
	t.Parallel()
	if noRun != "" {
		t.Skipf("end-to-end tests need: %s", noRun)
	}
	h1, h2 := newNetnsHost(t), newNetnsHost(t)
	srv := s3test.StartOn(t, h1.hostIP)
	// Host 2 reaches the server's address through its own link.
	ipCmd(t, "-n", h2.name, "route", "add", h1.hostIP+"/32", "via", h2.hostIP)
	endpoint := strings.TrimPrefix(srv.Endpoint, "http://")
	if !h1.reaches(endpoint) || !h2.reaches(endpoint) {
		t.Fatalf("the hosts do not both reach the S3 server at %s", endpoint)
	}
	e := newEnv(t, withS3(srv.Endpoint, srv.Region, srv.Bucket, "takeover", srv.AccessKey, srv.SecretKey))
	e.init()
	old := e.startIn(h1)
	writeFile(t, e.path("before"), blocks(1, 0, 16, 1))
	fsyncFile(t, e.path("before"))

	// Host 1 is partitioned, with an fsync in flight.
	h1.setLink(t, false)
	if h1.reaches(endpoint) {
		t.Fatal("host 1 still reaches the store with its link down")
	}
	if !h2.reaches(endpoint) {
		t.Fatal("host 2 lost the store when host 1's link went down")
	}
	writeFile(t, e.path("zombie"), blocks(2, 0, 8, 1))
	zombie := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(e.path("zombie"), os.O_RDWR, 0)
		if err == nil {
			err = f.Sync()
			f.Close()
		}
		zombie <- err
	}()
	partitioned := time.Now()
	// The old writer sees the outage (its fsync waits 15 s without an
	// answer).
	var says bool
	var out string
	for wait := time.Now(); !says && time.Since(wait) < time.Minute; time.Sleep(time.Second) {
		says, out = e.statusSays("STORE UNREACHABLE since")
	}
	if !says {
		t.Errorf("the partitioned writer's status never said STORE UNREACHABLE:\n%s", out)
	}

	n := e.sameStore()
	start := time.Now()
	np := n.startIn(h2, "--take-over")
	t.Logf("--take-over on host 2 mounted %s after it started", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(np.out.String(), "TAKING OVER the lease") {
		t.Fatalf("no take-over warning:\n%s", np.out.String())
	}
	writeFile(t, n.path("after"), blocks(3, 0, 8, 1))
	fsyncFile(t, n.path("after"))
	if got := readFile(t, n.path("before")); !bytes.Equal(got, blocks(1, 0, 16, 1)) {
		t.Fatal("the new writer does not hold what was fsynced before the partition")
	}
	if !gone(n.path("zombie")) {
		t.Fatal("the partitioned writer's unacknowledged file is in the new writer's state")
	}
	select {
	case err := <-zombie:
		t.Fatalf("the partitioned writer's fsync returned (%v) while it could not reach the store", err)
	case <-time.After(5 * time.Second):
	}

	// The partition heals: the old writer finds itself fenced.
	h1.setLink(t, true)
	healed := time.Now()
	select {
	case err := <-zombie:
		if err == nil {
			t.Fatal("the fenced writer's fsync succeeded")
		}
		t.Logf("the old writer's fsync waited %s while partitioned, then failed %s after the link came back: %v",
			healed.Sub(partitioned).Round(time.Millisecond), time.Since(healed).Round(time.Millisecond), err)
	case <-time.After(4 * time.Minute):
		t.Fatal("the old writer's fsync did not return within 4 minutes of the link coming back")
	}
	// Later writes: the fenced writer may refuse them at once; what it must
	// not do is acknowledge one.
	err := os.WriteFile(e.path("zombie2"), []byte("after the fencing"), 0o644)
	if err == nil {
		var f *os.File
		if f, err = os.OpenFile(e.path("zombie2"), os.O_RDWR, 0); err == nil {
			err = f.Sync()
			f.Close()
		}
	}
	if err == nil {
		t.Fatal("a later write and fsync of the fenced writer succeeded")
	}
	t.Logf("a later write and fsync on the fenced writer: %v", err)
	if r := e.ebbfs("flush"); r.code == 0 {
		t.Fatalf("ebbfs flush on the fenced writer succeeded: %s", r)
	}
	for _, name := range []string{"zombie", "zombie2"} {
		if !gone(n.path(name)) {
			t.Fatalf("the fenced writer's %s is in the new writer's state", name)
		}
	}
	old.kill()

	// The new writer's state, from the store, after a restart.
	np.stop()
	np = n.mount()
	for _, name := range []string{"zombie", "zombie2"} {
		if !gone(n.path(name)) {
			t.Fatalf("the fenced writer's %s appeared after a restart", name)
		}
	}
	if got := readFile(t, n.path("before")); !bytes.Equal(got, blocks(1, 0, 16, 1)) {
		t.Fatal("after a restart the new writer does not hold what was fsynced before the partition")
	}
	if got := readFile(t, n.path("after")); !bytes.Equal(got, blocks(3, 0, 8, 1)) {
		t.Fatal("after a restart the new writer lost its own fsynced file")
	}
	if r := n.ebbfs("fsck"); r.code != 0 {
		t.Errorf("fsck: %s", r)
	}
	np.stop()
}
