package tests

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/s3test"
)

// The slow store: the writer runs in a network namespace of its own and
// reaches the real S3 server only over a veth link shaped to 10 MB/s each
// way (tc tbf, or netem's rate where the kernel has netem) with 100 ms of
// delay each way, so every request costs at least 200 ms of round trip.
// Kernels without netem (CONFIG_NET_SCH_NETEM unset: the test machine's)
// get the delay from a delay line in the test process instead: a TCP
// relay on the host end of the link that holds every chunk 100 ms before
// passing it on, in each direction.

const (
	slowRate  = "80mbit" // 10 MB/s
	slowDelay = 100 * time.Millisecond
)

// vethNames returns the host-side and namespace-side interface of h's
// veth pair.
func (h *netnsHost) vethNames(t *testing.T) (host, peer string) {
	t.Helper()
	out, err := exec.Command("ip", "-o", "addr", "show", "to", h.hostIP).Output()
	if err != nil {
		t.Fatalf("ip addr show to %s: %v", h.hostIP, err)
	}
	host = ifName(string(out))
	out, err = exec.Command("ip", "-n", h.name, "-o", "addr", "show", "to", h.peerIP).Output()
	if err != nil {
		t.Fatalf("ip -n %s addr show to %s: %v", h.name, h.peerIP, err)
	}
	peer = ifName(string(out))
	if host == "" || peer == "" {
		t.Fatalf("veth of %s not found (host %q, peer %q)", h.name, host, peer)
	}
	return host, peer
}

// ifName takes the interface out of one line of `ip -o addr`:
// "12: ebh123@if11    inet 10.231.5.1/30 ...".
func ifName(line string) string {
	f := strings.Fields(line)
	if len(f) < 2 {
		return ""
	}
	name, _, _ := strings.Cut(f[1], "@")
	return name
}

func tcCmd(ns string, args ...string) error {
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	out, err := exec.Command("tc", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("tc %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// shapeLink caps both directions of h's link at slowRate and, where the
// kernel has netem, delays each by slowDelay. It reports whether the
// delay is in place (false: the caller must add it).
func (h *netnsHost) shapeLink(t *testing.T) (delayed bool) {
	t.Helper()
	need(t, "tc")
	host, peer := h.vethNames(t)
	netem := []string{"qdisc", "add", "dev", "", "root", "netem", "delay", fmt.Sprintf("%dms", slowDelay.Milliseconds()), "rate", slowRate, "limit", "100000"}
	tbf := []string{"qdisc", "add", "dev", "", "root", "tbf", "rate", slowRate, "burst", "256kb", "latency", "1s"}
	try := func(ns, dev string, args []string) error {
		a := append([]string(nil), args...)
		a[3] = dev
		return tcCmd(ns, a...)
	}
	err := try("", host, netem)
	if err == nil {
		if err := try(h.name, peer, netem); err != nil {
			t.Fatal(err)
		}
		t.Logf("link %s <-> %s: netem delay %v each way, rate %s", host, peer, slowDelay, slowRate)
		return true
	}
	if !strings.Contains(err.Error(), "unknown") {
		t.Fatal(err)
	}
	for _, d := range []struct{ ns, dev string }{{"", host}, {h.name, peer}} {
		if err := try(d.ns, d.dev, tbf); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("link %s <-> %s: tbf rate %s each way; this kernel has no netem, the %v delay each way comes from a delay line", host, peer, slowRate, slowDelay)
	return false
}

// delayLine is a TCP relay that holds every chunk it forwards for delay
// before passing it on, in both directions.
type delayLine struct {
	l     net.Listener
	to    string
	delay time.Duration
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func startDelayLine(t *testing.T, listen, to string, delay time.Duration) *delayLine {
	t.Helper()
	l, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	d := &delayLine{l: l, to: to, delay: delay}
	d.wg.Add(1)
	go d.accept()
	t.Cleanup(d.close)
	return d
}

func (d *delayLine) addr() string { return d.l.Addr().String() }

func (d *delayLine) accept() {
	defer d.wg.Done()
	for {
		c, err := d.l.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", d.to)
		if err != nil {
			c.Close()
			continue
		}
		d.mu.Lock()
		d.conns = append(d.conns, c, u)
		d.mu.Unlock()
		d.wg.Add(2)
		go d.pipe(c, u)
		go d.pipe(u, c)
	}
}

type stamped struct {
	at time.Time
	b  []byte
}

// pipe copies src to dst, each chunk no earlier than delay after it was
// read.
func (d *delayLine) pipe(src, dst net.Conn) {
	defer d.wg.Done()
	q := make(chan stamped, 4096)
	go func() {
		defer close(q)
		for {
			b := make([]byte, 64<<10)
			n, err := src.Read(b)
			if n > 0 {
				q <- stamped{time.Now(), b[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		time.Sleep(time.Until(c.at.Add(d.delay)))
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	for range q { // let the reader finish
	}
}

func (d *delayLine) close() {
	d.l.Close()
	d.mu.Lock()
	for _, c := range d.conns {
		c.Close()
	}
	d.mu.Unlock()
	d.wg.Wait()
}

// vmStatusKiB reads a "Vm...: N kB" line of /proc/PID/status.
func vmStatusKiB(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// blocksAt checks data as blocks first, first+1, ... of file id (version
// 1).
func blocksAt(id, first uint64, data []byte) error {
	want := make([]byte, blockSize)
	for i := 0; i < len(data); i += blockSize {
		fillBlock(want, id, first+uint64(i/blockSize), 1)
		if len(data)-i < blockSize || string(data[i:i+blockSize]) != string(want) {
			return fmt.Errorf("block %d of file %d is wrong", first+uint64(i/blockSize), id)
		}
	}
	return nil
}

// TestSlowStoreBoundedMemory: the writer reaches the S3 server over a
// link of 10 MB/s with 200 ms of round trip per request. A sequential
// write of 384 MiB ending in fsync, and 1500 small files written while it
// runs and fsynced, all succeed (no request times out into an application
// error), throughput drops to about the link's rate, and the writer's peak
// RSS (VmHWM) stays below the documented bound, [cache] memory_size plus
// 448 MiB, and its live heap below 300 MB, short of the workload's size
// (back-pressure, not buffering). Everything reads back intact from a writer on this host, and
// fsck is clean.
func TestSlowStoreBoundedMemory(t *testing.T) {
	h := newNetnsHost(t)
	delayed := h.shapeLink(t)
	srv := s3test.StartOn(t, h.hostIP)
	endpoint := srv.Endpoint
	if !delayed {
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.Endpoint, "http://"))
		dl := startDelayLine(t, net.JoinHostPort(h.hostIP, "0"), net.JoinHostPort(h.hostIP, port), slowDelay)
		endpoint = "http://" + dl.addr()
	}
	e := newEnv(t, withS3(endpoint, srv.Region, srv.Bucket, "slow", srv.AccessKey, srv.SecretKey), withEnvVars("GODEBUG=gctrace=1"))
	e.init()

	// The round trip the writer sees: time an HTTP request from inside the
	// namespace.
	hp := strings.TrimPrefix(endpoint, "http://")
	host, port, _ := net.SplitHostPort(hp)
	probe := exec.Command("nsenter", "--net=/run/netns/"+h.name, "bash", "-c",
		fmt.Sprintf(`exec 3<>/dev/tcp/%s/%s; s=$(date +%%s%%N); printf 'HEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3; head -c 12 <&3 >/dev/null; echo $(( ($(date +%%s%%N) - s) / 1000000 ))`, host, port))
	out, err := probe.Output()
	if err != nil {
		t.Fatalf("round-trip probe: %v", err)
	}
	rtt, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	t.Logf("one request's round trip from the writer's namespace: %d ms", rtt)
	if time.Duration(rtt)*time.Millisecond < 2*slowDelay {
		t.Fatalf("round trip %d ms: the link is not delayed", rtt)
	}

	w := e.startIn(h)
	pid := w.cmd.Process.Pid
	// The documented bound (README, Configuration reference): the Go
	// memory limit, memory_size + 384 MiB, plus 64 MiB outside the Go heap.
	const memorySize = 64 << 20 // writeConfig's [cache] memory_size
	bound := int64(memorySize + 448<<20)

	// Sample RSS while the workload runs, for the log.
	var peakRSS int64
	stopSample := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if v, err := vmStatusKiB(pid, "VmRSS"); err == nil {
				peakRSS = max(peakRSS, v<<10)
			}
			select {
			case <-stopSample:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()

	const bigSize = 384 << 20
	const smallFiles = 1500
	var wg sync.WaitGroup
	var bigErr, smallErr error
	var bigTime, bigFsync time.Duration
	start := time.Now()
	wg.Add(2)
	go func() {
		defer wg.Done()
		f, err := os.Create(e.path("big"))
		if err != nil {
			bigErr = err
			return
		}
		defer f.Close()
		for i := range bigSize / mib {
			if _, err := f.Write(blocks(1, uint64(i*mib/blockSize), mib/blockSize, 1)); err != nil {
				bigErr = fmt.Errorf("write at %d MiB: %w", i, err)
				return
			}
		}
		fs := time.Now()
		if err := f.Sync(); err != nil {
			bigErr = fmt.Errorf("fsync: %w", err)
			return
		}
		bigFsync = time.Since(fs)
		bigTime = time.Since(start)
	}()
	go func() {
		defer wg.Done()
		if err := os.Mkdir(e.path("small"), 0o755); err != nil {
			smallErr = err
			return
		}
		for i := range smallFiles {
			p := filepath.Join(e.path("small"), fmt.Sprintf("f%d.0", 100+i))
			if err := os.WriteFile(p, blocks(uint64(100+i), 0, 1+i%3, 1), 0o644); err != nil {
				smallErr = fmt.Errorf("small file %d: %w", i, err)
				return
			}
			if i%100 == 99 {
				f, err := os.Open(p)
				if err == nil {
					err = f.Sync()
					f.Close()
				}
				if err != nil {
					smallErr = fmt.Errorf("fsync small file %d: %w", i, err)
					return
				}
			}
		}
	}()
	wg.Wait()
	if bigErr != nil || smallErr != nil {
		t.Fatalf("application errors on the slow store: big file: %v; small files: %v", bigErr, smallErr)
	}
	// The small files' last barrier.
	if r := e.ebbfs("flush"); r.code != 0 {
		t.Fatalf("ebbfs flush on the slow store: %s", r)
	}
	total := time.Since(start)
	hwm, err := vmStatusKiB(pid, "VmHWM")
	if err != nil {
		t.Fatal(err)
	}
	close(stopSample)
	<-sampled
	hwm <<= 10
	m := e.scrapeUnix()
	t.Logf("slow store: 384 MiB sequential + fsync in %v (%.1f MiB/s, the fsync took %v); %d small files; everything durable after %v",
		bigTime.Round(time.Millisecond), float64(bigSize)/mib/bigTime.Seconds(), bigFsync.Round(time.Millisecond), smallFiles, total.Round(time.Millisecond))
	t.Logf("writer peak RSS (VmHWM) %.1f MiB, highest sampled VmRSS %.1f MiB; documented bound memory_size 64 MiB + 448 MiB = %.0f MiB",
		float64(hwm)/mib, float64(peakRSS)/mib, float64(bound)/mib)
	t.Logf("store requests: %.0f PUT, %.0f GET, %.0f failed; %.0f barriers failed; FUSE errors %.0f",
		m.sum("ebbfs_store_requests_total", `op="put"`), m.sum("ebbfs_store_requests_total", `op="get"`)+m.sum("ebbfs_store_requests_total", `op="get_range"`),
		m.sum("ebbfs_store_request_errors_total"), m.sum("ebbfs_barrier_failures_total"), m.sum("ebbfs_fuse_operation_errors_total"))
	if n := m.sum("ebbfs_fuse_operation_errors_total"); n != 0 {
		var by []string
		for k, v := range m {
			if strings.HasPrefix(k, "ebbfs_fuse_operation_errors_total{") && v != 0 {
				by = append(by, fmt.Sprintf("%s %.0f", k, v))
			}
		}
		t.Errorf("%.0f FUSE requests failed on the slow store: %v", n, by)
	}
	if hwm >= bound {
		t.Errorf("writer peak RSS %.1f MiB is not below the documented bound %.0f MiB", float64(hwm)/mib, float64(bound)/mib)
	}
	// The live heap after each collection (GODEBUG=gctrace=1): what the
	// writer holds, apart from the garbage the collector's pacing lets
	// accumulate up to the memory limit.
	var liveMB int
	for _, mm := range regexp.MustCompile(`\d+->\d+->(\d+) MB`).FindAllStringSubmatch(w.out.String(), -1) {
		v, _ := strconv.Atoi(mm[1])
		liveMB = max(liveMB, v)
	}
	// What the writer may hold: 128 MiB of unsealed writes, two 32 MiB
	// segments (one encoding, one uploading), and some slack; a writer
	// that buffered the workload would hold it all (384 MiB).
	const liveBoundMB = 300
	t.Logf("writer peak live heap after a collection: %d MB (the workload wrote %d MiB)", liveMB, bigSize/mib)
	if liveMB == 0 || liveMB >= liveBoundMB {
		t.Errorf("writer live heap peaked at %d MB, want below %d MB: it buffered the workload instead of holding it back (or no GC trace)", liveMB, liveBoundMB)
	}
	w.stop()

	// Read back from a writer on this host, straight to the server.
	e.storage = fmt.Sprintf("url = %q\nendpoint = %q\nregion = %q\n", "s3://"+srv.Bucket+"/slow", srv.Endpoint, srv.Region)
	e.writeConfig("")
	w = e.mount()
	f, err := os.Open(e.path("big"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, mib)
	for i := 0; ; i++ {
		n, err := io.ReadFull(f, buf)
		if n > 0 {
			if cerr := blocksAt(1, uint64(i*mib/blockSize), buf[:n]); cerr != nil {
				t.Fatalf("big file after the slow run: %v", cerr)
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			if i*mib+n != bigSize {
				t.Fatalf("big file is %d bytes, want %d", i*mib+n, bigSize)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	for i := range smallFiles {
		id := uint64(100 + i)
		b := readFile(t, filepath.Join(e.path("small"), fmt.Sprintf("f%d.0", id)))
		if err := checkContent(id, b); err != nil || len(b) != (1+i%3)*blockSize {
			t.Fatalf("small file %d: %d bytes, %v", i, len(b), err)
		}
	}
	w.stop()
	e.fsckClean()
}
