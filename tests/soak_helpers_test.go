package tests

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Helpers of the chaos soak (soak_test.go): a model of what was
// acknowledged, an S3 fault proxy, the NBD client and the server's pid.

// soakDuration is how long the soak's workload runs: 3 minutes, or
// EBBFS_SOAK_DURATION (make soak sets 1h).
func soakDuration(t testing.TB) time.Duration {
	t.Helper()
	v := os.Getenv("EBBFS_SOAK_DURATION")
	if v == "" {
		return 3 * time.Minute
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("EBBFS_SOAK_DURATION=%q: want a duration such as 1h", v)
	}
	return d
}

// ---- the model ----

// soakBlockVer returns the version of block idx of file id held in b
// (0: a block of zeroes, a hole), or an error when b is not one of that
// file's blocks at that index.
func soakBlockVer(b []byte, id uint64, idx int) (uint64, error) {
	zero := true
	for _, c := range b {
		if c != 0 {
			zero = false
			break
		}
	}
	if zero {
		return 0, nil
	}
	sum := sha256.Sum256(b[:blockSum])
	if string(sum[:]) != string(b[blockSum:]) {
		return 0, fmt.Errorf("block %d: checksum mismatch (first bytes %x)", idx, b[:24])
	}
	gid, gidx, ver := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])
	if gid != id || gidx != uint64(idx) || ver == 0 {
		return 0, fmt.Errorf("block %d: holds block %d of file %d, version %d", idx, gidx, gid, ver)
	}
	return ver, nil
}

// soakVersions parses a whole file of id into block versions.
func soakVersions(id uint64, data []byte) ([]uint64, error) {
	if len(data)%blockSize != 0 {
		return nil, fmt.Errorf("size %d is not a multiple of %d", len(data), blockSize)
	}
	vers := make([]uint64, len(data)/blockSize)
	for i := range vers {
		v, err := soakBlockVer(data[i*blockSize:(i+1)*blockSize], id, i)
		if err != nil {
			return nil, err
		}
		vers[i] = v
	}
	return vers, nil
}

// soakContent is what the model knows of one file (or an NBD export), in
// blocks: its current content, the content of its last barrier, and
// every state it went through since (any of which a crash may leave,
// block by block).
type soakContent struct {
	vers   []uint64 // current, per block (0: zeroes)
	dVers  []uint64 // as of the last successful barrier
	pVers  map[int]map[uint64]bool
	pSizes [][2]int // block counts reached since (intervals: an extending write may land in parts)
	dirty  bool
}

func newSoakContent(vers []uint64) *soakContent {
	c := &soakContent{vers: vers}
	c.durable()
	return c
}

// note records the current state as possibly durable; from is the size
// before an extending write (its intermediate sizes are possible too).
func (c *soakContent) note(from int) {
	c.dirty = true
	if c.pVers == nil {
		c.pVers = map[int]map[uint64]bool{}
	}
	n := len(c.vers)
	c.pSizes = append(c.pSizes, [2]int{min(from, n), max(from, n)})
	for i, v := range c.vers {
		s := c.pVers[i]
		if s == nil {
			s = map[uint64]bool{}
			c.pVers[i] = s
		}
		s[v] = true
	}
}

// durable marks the current state as the last barrier's.
func (c *soakContent) durable() {
	c.dVers = append([]uint64(nil), c.vers...)
	c.pVers, c.pSizes, c.dirty = nil, nil, false
}

// write sets n blocks from idx to version v (0: zeroes), growing the
// content as needed, and notes the result.
func (c *soakContent) write(idx, n int, v uint64) {
	from := len(c.vers)
	for len(c.vers) < idx+n {
		c.vers = append(c.vers, 0)
	}
	for i := idx; i < idx+n; i++ {
		c.vers[i] = v
	}
	c.note(from)
}

// truncate sets the size to n blocks and notes the result.
func (c *soakContent) truncate(n int) {
	if n < len(c.vers) {
		c.vers = c.vers[:n]
	}
	for len(c.vers) < n {
		c.vers = append(c.vers, 0)
	}
	c.note(n)
}

// exact reports how got differs from the current content ("" if not).
func (c *soakContent) exact(got []uint64) string {
	if len(got) != len(c.vers) {
		return fmt.Sprintf("%d blocks, want %d", len(got), len(c.vers))
	}
	for i := range got {
		if got[i] != c.vers[i] {
			return fmt.Sprintf("block %d has version %d, want %d", i, got[i], c.vers[i])
		}
	}
	return ""
}

// possible reports how got (found after a crash) differs from every
// content the model allows ("" if it is allowed): each block holds its
// last barrier's version or one written since, and the size is the last
// barrier's or one reached since.
func (c *soakContent) possible(got []uint64, durableExists bool) string {
	n := len(got)
	ok := durableExists && n == len(c.dVers)
	for _, iv := range c.pSizes {
		if n >= iv[0] && n <= iv[1] {
			ok = true
		}
	}
	if !ok {
		return fmt.Sprintf("%d blocks: the last barrier had %d (exists %v), sizes since %v", n, len(c.dVers), durableExists, c.pSizes)
	}
	for i, v := range got {
		var dv uint64
		if durableExists && i < len(c.dVers) {
			dv = c.dVers[i]
		}
		if v == dv || c.pVers[i][v] {
			continue
		}
		return fmt.Sprintf("block %d has version %d: the last barrier had %d, written since %v", i, v, dv, sortedVers(c.pVers[i]))
	}
	return ""
}

func sortedVers(s map[uint64]bool) []uint64 {
	out := make([]uint64, 0, len(s))
	for v := range s {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// soakFile is one file of a soak worker: its id, its name now and at
// the last barrier ("" when absent) and the names it had since.
type soakFile struct {
	id     uint64
	name   string
	dName  string
	pNames map[string]bool // "" for absent
	c      *soakContent
}

func (f *soakFile) noteName() {
	if f.pNames == nil {
		f.pNames = map[string]bool{}
	}
	f.pNames[f.name] = true
	f.c.dirty = true
}

func (f *soakFile) durable() {
	f.dName = f.name
	f.pNames = nil
	f.c.durable()
}

// ---- the S3 fault proxy ----

// faultProxy sits between ebbfs and the real S3 server and, at the rate
// set, fails requests the way a struggling store does: 503 SlowDown, 500
// InternalError, a connection reset before the request reaches the
// server, or the response of a write lost after the server applied it.
type faultProxy struct {
	ln     net.Listener
	srv    *http.Server
	rp     *httputil.ReverseProxy
	mu     sync.Mutex
	rng    *rand.Rand
	rate   float64
	reqs   atomic.Int64
	counts [4]atomic.Int64 // slowDown, internal, reset, lost
}

const (
	faultSlowDown = iota
	faultInternal
	faultReset
	faultLost
)

func startFaultProxy(t testing.TB, endpoint string, seed uint64) *faultProxy {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, rng: rand.New(rand.NewPCG(seed, 13))}
	p.rp = &httputil.ReverseProxy{
		// The Host header stays the proxy's: the request is signed for it.
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = target.Scheme
			pr.Out.URL.Host = target.Host
		},
		ErrorLog: log.New(io.Discard, "", 0), // a hung-up client is the point
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: time.Minute}
	go func() { _ = p.srv.Serve(ln) }()
	t.Cleanup(func() { _ = p.srv.Close() })
	return p
}

func (p *faultProxy) endpoint() string { return "http://" + p.ln.Addr().String() }

// setRate sets the fraction of requests that fail.
func (p *faultProxy) setRate(r float64) {
	p.mu.Lock()
	p.rate = r
	p.mu.Unlock()
}

// pick decides the fate of one request: -1 to pass it through.
func (p *faultProxy) pick(write bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rng.Float64() >= p.rate {
		return -1
	}
	switch r := p.rng.IntN(100); {
	case r < 40:
		return faultSlowDown
	case r < 60:
		return faultInternal
	case r < 80 || !write:
		return faultReset
	default:
		return faultLost
	}
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.reqs.Add(1)
	write := r.Method == http.MethodPut || r.Method == http.MethodPost || r.Method == http.MethodDelete
	f := p.pick(write)
	if f >= 0 {
		p.counts[f].Add(1)
	}
	switch f {
	case faultSlowDown, faultInternal:
		_, _ = io.Copy(io.Discard, r.Body)
		code, status, msg := "SlowDown", http.StatusServiceUnavailable, "Please reduce your request rate."
		if f == faultInternal {
			code, status, msg = "InternalError", http.StatusInternalServerError, "We encountered an internal error. Please try again."
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message><Resource>%s</Resource><RequestId>soak</RequestId></Error>`, code, msg, r.URL.Path)
	case faultReset:
		p.hangUp(w)
	case faultLost:
		rec := httptest.NewRecorder()
		p.rp.ServeHTTP(rec, r)
		p.hangUp(w)
	default:
		p.rp.ServeHTTP(w, r)
	}
}

// hangUp closes the client's connection without a response (RST).
func (p *faultProxy) hangUp(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	conn.Close()
}

func (p *faultProxy) String() string {
	return fmt.Sprintf("%d requests, %d failed: %d SlowDown, %d InternalError, %d reset, %d response lost after the server applied it",
		p.reqs.Load(), p.counts[0].Load()+p.counts[1].Load()+p.counts[2].Load()+p.counts[3].Load(),
		p.counts[0].Load(), p.counts[1].Load(), p.counts[2].Load(), p.counts[3].Load())
}

// ---- scraping a writer that may die at any moment ----

// soakScrape sums the reclamation counters of the writer behind e's
// admin socket; ok is false when it does not answer.
func soakScrape(e *env) (rt reclaimTotals, ok bool) {
	sock := filepath.Join(e.cache, "admin.sock")
	cli := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}, Timeout: 10 * time.Second}
	defer cli.CloseIdleConnections()
	resp, err := cli.Get("http://ebbfs/metrics")
	if err != nil {
		return rt, false
	}
	defer resp.Body.Close()
	m := metrics{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if line == "" || line[0] == '#' || i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	if sc.Err() != nil || resp.StatusCode != http.StatusOK {
		return rt, false
	}
	return reclaimTotals{
		repacks:   m.sum("ebbfs_reclaim_repacks_total", `result="ok"`),
		deleted:   m.sum("ebbfs_reclaim_segments_deleted_total"),
		relocated: m.sum("ebbfs_reclaim_relocated_frames_total"),
	}, true
}

// ---- the NBD client: qemu-io over a pipe ----

// qemuIO is a qemu-io process connected to an NBD export, fed one
// command at a time: it prints its prompt when a command has finished,
// and anything it printed before that (to stdout or stderr) is an error
// (write -q and flush print nothing when they succeed). qemu-io takes one
// line per read of its input, so the next command goes only after the
// prompt.
type qemuIO struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	chunks  chan []byte
	pending string
	done    chan struct{}
}

const qemuPrompt = "qemu-io> "

func (e *env) startQemuIO(uri string) (*qemuIO, error) {
	cmd := e.command(context.Background(), "qemu-io", "-f", "raw", uri)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, err
	}
	pw.Close()
	q := &qemuIO{cmd: cmd, in: in, chunks: make(chan []byte, 64), done: make(chan struct{})}
	go func() {
		defer close(q.chunks)
		defer pr.Close()
		for {
			b := make([]byte, 4096)
			n, err := pr.Read(b)
			if n > 0 {
				q.chunks <- b[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(q.done) }()
	if out, err := q.answer(30 * time.Second); err != nil {
		q.close()
		return nil, fmt.Errorf("qemu-io %s: %w: %s", uri, err, out)
	}
	return q, nil
}

// answer reads up to the next prompt.
func (q *qemuIO) answer(timeout time.Duration) (string, error) {
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	for {
		if i := strings.Index(q.pending, qemuPrompt); i >= 0 {
			out := strings.TrimSpace(q.pending[:i])
			q.pending = q.pending[i+len(qemuPrompt):]
			return out, nil
		}
		select {
		case b, ok := <-q.chunks:
			if !ok {
				return strings.TrimSpace(q.pending), errors.New("qemu-io exited")
			}
			q.pending += string(b)
		case <-tm.C:
			return strings.TrimSpace(q.pending), fmt.Errorf("no answer within %v", timeout)
		}
	}
}

// do runs one command and returns what qemu-io printed (an error
// message), or an error when qemu-io is gone or took longer than timeout.
func (q *qemuIO) do(command string, timeout time.Duration) (string, error) {
	if _, err := io.WriteString(q.in, command+"\n"); err != nil {
		return "", err
	}
	out, err := q.answer(timeout)
	if err != nil {
		return out, fmt.Errorf("qemu-io %q: %w", command, err)
	}
	return out, nil
}

// close quits qemu-io, or kills it.
func (q *qemuIO) close() {
	_, _ = io.WriteString(q.in, "quit\n")
	q.in.Close()
	select {
	case <-q.done:
		return
	case <-time.After(5 * time.Second):
	}
	_ = q.cmd.Process.Signal(syscall.SIGKILL)
	<-q.done
}

// TestSoakModel: the soak's model accepts what a crash may leave and
// rejects what it may not (a version from before the last barrier, a
// size never reached, another file's block).
func TestSoakModel(t *testing.T) {
	t.Parallel()
	c := newSoakContent([]uint64{1, 1})
	c.write(0, 1, 2)
	for _, ok := range [][]uint64{{2, 1}, {1, 1}} {
		if d := c.possible(ok, true); d != "" {
			t.Errorf("%v refused: %s", ok, d)
		}
	}
	for _, bad := range [][]uint64{{3, 1}, {2}, {2, 1, 0}} {
		if c.possible(bad, true) == "" {
			t.Errorf("%v accepted", bad)
		}
	}
	c.durable()
	if c.possible([]uint64{1, 1}, true) == "" {
		t.Error("a version from before the last barrier accepted")
	}
	c.truncate(1)
	c.write(3, 1, 4) // [2 0 0 4], reached in parts
	for _, ok := range [][]uint64{{2, 1}, {2, 0}, {2, 0, 0}, {2, 0, 0, 4}, {2}} {
		if d := c.possible(ok, true); d != "" {
			t.Errorf("%v refused: %s", ok, d)
		}
	}
	if c.possible([]uint64{2, 0, 0, 0, 0}, true) == "" || c.possible([]uint64{2, 0, 0, 5}, true) == "" {
		t.Error("a size or a version never written accepted")
	}
	if d := c.exact([]uint64{2, 0, 0, 4}); d != "" {
		t.Errorf("exact: %s", d)
	}
	created := newSoakContent(nil)
	created.note(0)
	created.write(0, 2, 7)
	if created.possible(nil, false) != "" || created.possible([]uint64{7}, false) != "" || created.possible([]uint64{0, 7}, false) != "" {
		t.Error("a new file's partial states refused")
	}
	b := blocks(5, 0, 2, 9)
	if v, err := soakBlockVer(b[blockSize:], 5, 1); err != nil || v != 9 {
		t.Errorf("block 1 of file 5: %d, %v", v, err)
	}
	if _, err := soakBlockVer(b[blockSize:], 5, 0); err == nil {
		t.Error("block 1 accepted at index 0")
	}
	if _, err := soakBlockVer(b[:blockSize], 6, 0); err == nil {
		t.Error("file 5's block accepted for file 6")
	}
}
