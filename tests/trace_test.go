package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"ebbfs.dev/ebbfs/internal/testutil"
)

// traceEvent is a line of `ebbfs trace --json`.
type traceEvent struct {
	At             time.Time `json:"at"`
	Op             string    `json:"op"`
	Purpose        string    `json:"purpose"`
	Key            string    `json:"key"`
	Bytes          int64     `json:"bytes"`
	LatencySeconds float64   `json:"latency_seconds"`
	Summary        []struct {
		Purpose  string `json:"purpose"`
		Op       string `json:"op"`
		Requests int64  `json:"requests"`
	} `json:"summary"`
}

func (ev traceEvent) done() time.Time {
	return ev.At.Add(time.Duration(ev.LatencySeconds * float64(time.Second)))
}

// tracer runs `ebbfs trace --json` against e's writer and collects its
// lines.
type tracer struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr *testutil.SyncBuffer
	mu     sync.Mutex
	events []traceEvent
	last   time.Time // when the last line arrived
	done   chan struct{}
}

func startTrace(t *testing.T, e *env) *tracer {
	tr := &tracer{t: t, stderr: &testutil.SyncBuffer{}, done: make(chan struct{})}
	tr.cmd = e.command(context.Background(), ebbfsBin, "trace", "-c", e.cfg, "--json")
	out, err := tr.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	tr.cmd.Stderr = tr.stderr
	if err := tr.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.cmd.Process.Kill(); <-tr.done })
	go func() {
		defer close(tr.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ev traceEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Errorf("trace line %q: %v", sc.Text(), err)
				continue
			}
			tr.mu.Lock()
			tr.events = append(tr.events, ev)
			tr.last = time.Now()
			tr.mu.Unlock()
		}
	}()
	testutil.Eventually(t, 20*time.Second, "ebbfs trace attached", func() bool {
		return strings.Contains(tr.stderr.String(), "tracing the store requests")
	})
	return tr
}

func (tr *tracer) snapshot() []traceEvent {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]traceEvent(nil), tr.events...)
}

// storeOps scrapes the request metrics: requests by op, from the latency
// histogram every request is recorded in.
func storeOps(t *testing.T, e *env) map[string]int64 {
	var p expfmt.TextParser = expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(e.adminGet("/metrics"))))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, m := range fams["ebbfs_store_request_duration_seconds"].GetMetric() {
		out[labelValue(m, "op")] = int64(m.GetHistogram().GetSampleCount())
	}
	return out
}

// boundary scrapes the request metrics at a moment no traced request
// completes near (the trace shows every request's end), so that each
// request falls clearly before or after it; it returns the counts and the
// scrape's start and end.
func (tr *tracer) boundary(e *env) (map[string]int64, time.Time, time.Time) {
	for try := 0; try < 50; try++ {
		t0 := time.Now()
		m := storeOps(tr.t, e)
		t1 := time.Now()
		// Every request that ended by t1 has reached the trace once the
		// stream has been quiet a moment.
		testutil.Eventually(tr.t, 10*time.Second, "the trace quiet", func() bool {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			return time.Since(tr.last) > 300*time.Millisecond && time.Since(t1) > 300*time.Millisecond
		})
		near := false
		for _, ev := range tr.snapshot() {
			if d := ev.done(); !d.Before(t0.Add(-5*time.Millisecond)) && !d.After(t1.Add(5*time.Millisecond)) {
				near = true
			}
		}
		if !near {
			return m, t0, t1
		}
	}
	tr.t.Fatal("no quiet moment for a metrics scrape in 50 tries")
	return nil, time.Time{}, time.Time{}
}

// TestTraceShowsPurposes runs `ebbfs trace` against the real writer during
// a write and fsync, a read of data no cache holds (after a restart) and
// the reclamation of a deleted file, and checks that each shows under its
// purpose (segment_upload, barrier, read_miss, deletion, verification),
// that between two scrapes of /metrics the trace has exactly the requests
// the request metrics count, op by op, and that Ctrl-C prints a summary
// that adds up to the lines.
func TestTraceShowsPurposes(t *testing.T) {
	t.Parallel()
	src := newDataSource(e2eSeed(t))
	e := newEnv(t, withEnvVars("EBBFS_TEST_TIME_SCALE=20"))
	e.init()
	p := e.mount()
	writeSynced(t, e.path("cold"), 2*mib, src)
	writeSynced(t, e.path("doomed"), 1*mib, src)
	p.stop()
	p = e.mount() // nothing cached: reading "cold" misses

	tr := startTrace(t, e)
	m0, _, b0 := tr.boundary(e)

	writeSynced(t, e.path("new"), 1*mib, src) // write, fsync
	dropPageCache(t, e.path("cold"))
	if got := readFile(t, e.path("cold")); len(got) != 2*mib {
		t.Fatalf("read %d bytes of cold", len(got))
	}
	if err := os.Remove(e.path("doomed")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, "the deleted file's segment deleted", func() bool {
		for _, ev := range tr.snapshot() {
			if ev.Purpose == "deletion" && (ev.Op == "delete" || ev.Op == "delete_many") {
				return true
			}
		}
		return false
	})

	m1, b1, _ := tr.boundary(e)
	got := map[string]int64{}
	purposes := map[string]map[string]int{}
	for _, ev := range tr.snapshot() {
		if d := ev.done(); d.After(b0) && d.Before(b1) && ev.Op != "" {
			got[ev.Op]++
			if purposes[ev.Purpose] == nil {
				purposes[ev.Purpose] = map[string]int{}
			}
			purposes[ev.Purpose][ev.Op]++
		}
	}
	t.Logf("trace between the scrapes, by purpose and op: %v", purposes)
	for _, want := range []string{"segment_upload", "barrier", "read_miss", "deletion", "verification"} {
		if len(purposes[want]) == 0 {
			t.Errorf("no %s request in the trace", want)
		}
	}
	ops := map[string]bool{}
	for op := range m1 {
		ops[op] = true
	}
	for op := range got {
		ops[op] = true
	}
	var names []string
	for op := range ops {
		names = append(names, op)
	}
	sort.Strings(names)
	for _, op := range names {
		if d := m1[op] - m0[op]; d != got[op] {
			t.Errorf("op %s: /metrics counted %d requests between the scrapes, the trace shows %d", op, d, got[op])
		} else {
			t.Logf("op %s: %d requests in both /metrics and the trace", op, d)
		}
	}

	// space --cost: the footprint and the request rates priced.
	r := e.mustEbbfs("space", "--cost")
	for _, want := range []string{"estimated monthly cost", "storage", "PUT, LIST, POST", "GET, HEAD", "total"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("ebbfs space --cost lacks %q:\n%s", want, r.stdout)
		}
	}
	var cost struct {
		Currency      string  `json:"currency"`
		StoredBytes   int64   `json:"stored_bytes"`
		StorageCost   float64 `json:"storage_cost"`
		WriteRequests float64 `json:"write_requests_per_month"`
		WriteCost     float64 `json:"write_cost"`
		ReadCost      float64 `json:"read_cost"`
		Total         float64 `json:"total"`
	}
	if err := json.Unmarshal([]byte(e.mustEbbfs("space", "--cost", "--json").stdout), &cost); err != nil {
		t.Fatal(err)
	}
	if cost.Currency != "USD" || cost.StoredBytes < 3*mib || cost.WriteRequests <= 0 ||
		math.Abs(cost.Total-(cost.StorageCost+cost.WriteCost+cost.ReadCost)) > 1e-9 {
		t.Errorf("space --cost --json: %+v", cost)
	}
	t.Logf("space --cost:\n%s", r.stdout)

	// The human form, filtered, ended by --duration.
	hout, herr := &testutil.SyncBuffer{}, &testutil.SyncBuffer{}
	hc := e.command(context.Background(), ebbfsBin, "trace", "-c", e.cfg, "--duration", "4s", "--purpose", "barrier,segment_upload")
	hc.Stdout, hc.Stderr = hout, herr
	if err := hc.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the second trace attached", func() bool {
		return strings.Contains(herr.String(), "tracing the store requests")
	})
	writeSynced(t, e.path("new2"), 64*kib, src)
	if err := hc.Wait(); err != nil {
		t.Fatalf("ebbfs trace --duration: %v\n%s", err, herr.String())
	}
	human := hout.String()
	t.Logf("ebbfs trace --duration 4s --purpose barrier,segment_upload:\n%s", human)
	for _, want := range []string{" put ", "barrier", "segment_upload", "summary over", "request(s)"} {
		if !strings.Contains(human, want) {
			t.Errorf("the human trace lacks %q", want)
		}
	}
	if strings.Contains(human, "read_miss") || strings.Contains(human, "heartbeat") {
		t.Errorf("the filtered trace shows other purposes")
	}

	// Ctrl-C: a summary that adds up to the lines.
	if err := tr.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-tr.done
	if err := tr.cmd.Wait(); err != nil {
		t.Fatalf("ebbfs trace after Ctrl-C: %v\n%s", err, tr.stderr.String())
	}
	evs := tr.snapshot()
	last := evs[len(evs)-1]
	if len(last.Summary) == 0 {
		t.Fatalf("the last line of ebbfs trace is not a summary: %+v", last)
	}
	var sum int64
	for _, r := range last.Summary {
		sum += r.Requests
	}
	if sum != int64(len(evs)-1) {
		t.Errorf("the summary counts %d requests, the trace printed %d", sum, len(evs)-1)
	}
	t.Logf("summary: %d requests in %d rows", sum, len(last.Summary))
}
