package tests

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/s3test"
	"ebbfs.dev/ebbfs/internal/testport"
	"ebbfs.dev/ebbfs/internal/testutil"
)

// netnsHost is a second "host": a network namespace joined to this one by
// a veth pair, hostIP on this side, peerIP inside.
type netnsHost struct {
	name           string
	hostIP, peerIP string
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newNetnsHost makes the namespace and the veth pair and removes both in
// t.Cleanup.
func newNetnsHost(t *testing.T) *netnsHost {
	t.Helper()
	need(t, "ip", "nsenter")
	// The number names the namespace and its subnet: claimed across
	// processes, since make test runs several test binaries at once.
	n, release, err := testport.Number("netns", 250)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	id := fmt.Sprintf("%d%03d", os.Getpid()%10000, n)
	h := &netnsHost{name: "ebbfs-e2e-" + id, hostIP: fmt.Sprintf("10.231.%d.1", n), peerIP: fmt.Sprintf("10.231.%d.2", n)}
	vh, vp := "ebh"+id, "ebp"+id
	ipCmd(t, "netns", "add", h.name)
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", h.name).Run()
		_ = exec.Command("ip", "link", "del", vh).Run()
	})
	ipCmd(t, "link", "add", vh, "type", "veth", "peer", "name", vp)
	ipCmd(t, "link", "set", vp, "netns", h.name)
	ipCmd(t, "addr", "add", h.hostIP+"/30", "dev", vh)
	ipCmd(t, "link", "set", vh, "up")
	ipCmd(t, "-n", h.name, "addr", "add", h.peerIP+"/30", "dev", vp)
	ipCmd(t, "-n", h.name, "link", "set", vp, "up")
	ipCmd(t, "-n", h.name, "link", "set", "lo", "up")
	return h
}

// reaches reports whether a TCP connection to addr succeeds from inside
// the namespace.
func (h *netnsHost) reaches(addr string) bool {
	host, port, _ := net.SplitHostPort(addr)
	return exec.Command("nsenter", "--net=/run/netns/"+h.name, "bash", "-c",
		fmt.Sprintf("exec 3<>/dev/tcp/%s/%s", host, port)).Run() == nil
}

// startIn is env.start for "ebbfs run" inside the network namespace.
// nsenter enters only the network namespace and executes ebbfs itself, so
// the process is ebbfs and the FUSE mount it makes is in this mount
// namespace (ip netns exec would also give it a mount namespace of its
// own, where the test could not see the mount).
func (e *env) startIn(h *netnsHost, args ...string) *proc {
	e.t.Helper()
	cmd := e.command(context.Background(), "nsenter", append([]string{"--net=/run/netns/" + h.name, ebbfsBin, "run", "-c", e.cfg}, args...)...)
	out := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	p := &proc{e: e, cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	e.t.Cleanup(func() {
		p.kill()
		e.forceUnmount()
		if e.t.Failed() {
			e.t.Logf("ebbfs run (netns %s) %v output:\n%s", h.name, args, tail(out.String(), 60))
		}
	})
	p.waitMounted()
	return p
}

// TestReplicaOnAnotherHostIdleRequests: the S3 server listens only on one
// end of a veth pair; one replica runs in its own network namespace (a
// second host: it reaches the store only through the veth address, and
// not this host's loopback) and two more on this host, each with its own
// cache directory, all following one writer. Asserted: all three show the
// writer's changes; the writer sees three reader checkpoints; over an idle
// window (30 s; 5 min with make soak-replica) each replica sends at most
// one journal GET per poll interval plus checkpoint renewals, no LIST and
// nothing to segments/; over its whole life a replica has written (PUT,
// DELETE) nothing but its checkpoint record and run no reclamation; the
// three records are gone once the replicas stop.
func TestReplicaOnAnotherHostIdleRequests(t *testing.T) {
	h := newNetnsHost(t)
	srv := s3test.StartOn(t, h.hostIP)
	e := newEnv(t, withS3(srv.Endpoint, srv.Region, srv.Bucket, "hosts", srv.AccessKey, srv.SecretKey))
	e.init()
	w := e.mount()
	writeFile(t, e.path("before"), blocks(1, 0, 10, 1))
	fsyncFile(t, e.path("before"))
	// A manifest for the replicas' checkpoints to pin.
	e.mustEbbfs("checkpoint", "create", "first", "--ttl", "1m")
	e.mustEbbfs("checkpoint", "delete", "first")

	far := e.sameStore()
	fp := far.startIn(h, "--read-only")
	if h.reaches(e.admin) {
		t.Fatalf("the namespace reaches this host's loopback (%s): not a second host", e.admin)
	}
	if !h.reaches(strings.TrimPrefix(srv.Endpoint, "http://")) {
		t.Fatalf("the namespace does not reach the S3 server at %s", srv.Endpoint)
	}
	near1, near2 := e.sameStore(), e.sameStore()
	n1, n2 := near1.mount("--read-only"), near2.mount("--read-only")
	replicas := []*env{far, near1, near2}

	// All three follow.
	for i := range 5 {
		name := fmt.Sprintf("f%d.0", 10+i)
		writeFile(t, e.path(name), blocks(uint64(10+i), 0, 20+i, 1))
	}
	e.mustEbbfs("flush")
	for _, r := range replicas {
		d := testutil.Eventually(t, time.Minute, "writer's files on replica "+r.dir, func() bool { return sameTrees(e.mnt, r.mnt) == "" })
		t.Logf("replica %s (own cache %s) shows the writer's files after %v", r.dir, r.cache, d.Round(time.Millisecond))
	}
	if recs := e.readerCheckpoints(); len(recs) != 3 {
		t.Fatalf("want 3 reader checkpoints, have %+v", recs)
	}

	// Idle: count every replica's requests.
	window := 30 * time.Second
	if soakReplica() {
		window = 5 * time.Minute
	}
	const poll = time.Second               // [replica] poll_interval default
	const renewEvery = 3 * time.Minute / 3 // checkpoint.DefaultReaderTTL/3
	before := make([]metrics, len(replicas))
	for i, r := range replicas {
		before[i] = r.scrapeUnix()
	}
	start := time.Now()
	time.Sleep(window)
	elapsed := time.Since(start)
	polls := math.Ceil(float64(elapsed)/float64(poll)) + 1
	renewals := math.Ceil(float64(elapsed)/float64(renewEvery)) + 1
	for i, r := range replicas {
		after := r.scrapeUnix()
		d := func(labels ...string) float64 {
			return after.sum("ebbfs_store_requests_total", labels...) - before[i].sum("ebbfs_store_requests_total", labels...)
		}
		total, meta, cps := d(), d(`space="meta"`), d(`space="checkpoints"`)
		lists, segs := d(`op="list"`), d(`space="segments"`)
		t.Logf("replica %s idle for %v: %.0f requests (%.0f journal GETs = %.2f per poll interval, %.0f checkpoint, %.0f LIST, %.0f segments)",
			r.dir, elapsed.Round(time.Millisecond), total, meta, meta/(float64(elapsed)/float64(poll)), cps, lists, segs)
		if lists != 0 || segs != 0 {
			t.Errorf("an idle replica sent %.0f LIST and %.0f segment requests", lists, segs)
		}
		if meta > polls || meta < polls/2 {
			t.Errorf("an idle replica sent %.0f journal probes in %v, want at most one per %v (%.0f) and at least half that", meta, elapsed, poll, polls)
		}
		if cps > 3*renewals { // a renewal is a HEAD, a GET and a conditional PUT
			t.Errorf("an idle replica sent %.0f checkpoint requests in %v, want at most %.0f renewals", cps, elapsed, renewals)
		}
		if total != meta+cps {
			t.Errorf("an idle replica sent %.0f requests besides probes and renewals", total-meta-cps)
		}
		// Its whole life: it wrote nothing but its checkpoint record, and
		// ran no reclamation.
		for k, v := range after {
			if !strings.HasPrefix(k, "ebbfs_store_requests_total{") || v == 0 || strings.Contains(k, `space="checkpoints"`) {
				continue
			}
			if strings.Contains(k, `op="put"`) || strings.Contains(k, `op="delete"`) || strings.Contains(k, `op="delete_many"`) {
				t.Errorf("replica %s wrote outside checkpoints/: %s %v", r.dir, k, v)
			}
		}
		if c := after.sum("ebbfs_reclaim_cycles_total") + after.sum("ebbfs_reclaim_store_requests_total"); c != 0 {
			t.Errorf("replica %s ran reclamation: %v", r.dir, c)
		}
	}

	// Still following after the idle window.
	writeFile(t, e.path("f20.0"), blocks(20, 0, 7, 2))
	fsyncFile(t, e.path("f20.0"))
	for _, r := range replicas {
		testutil.Eventually(t, time.Minute, "a change after the idle window on "+r.dir, func() bool { return sameTrees(e.mnt, r.mnt) == "" })
	}
	fp.stop()
	n1.stop()
	n2.stop()
	if recs := e.readerCheckpoints(); len(recs) != 0 {
		t.Fatalf("stopped replicas left checkpoints %+v", recs)
	}
	w.stop()
}
