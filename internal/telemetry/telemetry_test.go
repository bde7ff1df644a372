package telemetry

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/stats"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/reclaim"
)

// newSource opens a writer on an in-memory store, with the recorders the
// daemon puts around it.
func newSource(t *testing.T, raw objstore.Store) *Source {
	t.Helper()
	ctx := context.Background()
	k, err := fs.Init(ctx, raw, "password123")
	if err != nil {
		t.Fatal(err)
	}
	timed := objstore.NewTimed(raw)
	count := objstore.NewCounting(timed)
	fsStats := fs.NewStats()
	e, err := fs.Open(ctx, fs.Options{Store: count, Keys: k, CacheDir: t.TempDir(), FlushInterval: time.Hour,
		Stats: fsStats, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return &Source{Engine: e, Store: count, Count: count, Timed: timed, FS: fsStats,
		FUSEOps: stats.NewOps("read", "write", "copy_file_range"), NBDOps: stats.NewOps("read", "write"),
		Version: "v-test", StoreURL: "mem://", Mountpoint: "/mnt/test", StartedAt: time.Now(),
		NBDAddrs: func() []string { return []string{"nbd://127.0.0.1:10809/"} }}
}

// gather scrapes c and returns every sample by name and labels
// ("name{k=v,...}").
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry() // fails on series not described, or described twice
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			key := mf.GetName() + "{" + strings.Join(ls, ",") + "}"
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

func TestCollectorSeries(t *testing.T) {
	src := newSource(t, objstore.NewMem())
	read := src.FUSEOps.Get("read")
	for i := 0; i < 3; i++ {
		read.Done(time.Now(), 4096, false)
	}
	read.Done(time.Now(), 0, true)
	src.NBDOps.Get("write").Done(time.Now(), 512, false)
	s := NewSampler(src)
	defer s.Close()
	got := gather(t, NewCollector(src, s))

	want := map[string]float64{
		"ebbfs_build_info{role=writer,version=v-test}":   1,
		"ebbfs_fuse_operations_total{op=read}":           4,
		"ebbfs_fuse_operation_errors_total{op=read}":     1,
		"ebbfs_fuse_bytes_total{op=read}":                3 * 4096,
		"ebbfs_fuse_operation_duration_seconds{op=read}": 4,
		"ebbfs_nbd_operations_total{op=write}":           1,
		"ebbfs_nbd_bytes_total{op=write}":                512,
		"ebbfs_tombstones_created_total{}":               0,
		"ebbfs_store_unreachable_seconds{}":              0,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	// Requests by key space add up to what the counting store saw, as of
	// the scrape (the scrape itself sends none).
	var sum float64
	for k, v := range got {
		if strings.HasPrefix(k, "ebbfs_store_requests_total{") {
			sum += v
		}
	}
	if n := src.Count.Snapshot().Requests(); sum != float64(n) || n == 0 {
		t.Errorf("store requests by space add up to %v; the store counted %d", sum, n)
	}
	// Without reclamation there is no footprint and no replica lag.
	for k := range got {
		if strings.HasPrefix(k, "ebbfs_segments{") || strings.HasPrefix(k, "ebbfs_reclaim_") || strings.HasPrefix(k, "ebbfs_replica_lag") {
			t.Errorf("%s exported by a writer without reclamation", k)
		}
	}
}

// TestEverySeriesIsDocumented: docs/METRICS.md lists every series the
// collector describes.
func TestEverySeriesIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/METRICS.md")
	if err != nil {
		t.Fatal(err)
	}
	c := NewCollector(&Source{}, nil)
	if len(c.descs) < 50 {
		t.Fatalf("only %d series described", len(c.descs))
	}
	for _, d := range c.descs {
		s := d.String() // Desc{fqName: "name", ...}
		i := strings.Index(s, `fqName: "`)
		name := s[i+len(`fqName: "`):]
		name = name[:strings.IndexByte(name, '"')]
		if !strings.Contains(string(doc), name) {
			t.Errorf("%s is not in docs/METRICS.md", name)
		}
	}
}

func TestSamplerState(t *testing.T) {
	src := newSource(t, objstore.NewMem())
	src.FUSEOps.Get("write").Done(time.Now(), 100, false)
	s := NewSampler(src)
	defer s.Close()
	st := s.State(context.Background())
	if st.Role != RoleWriter || st.Version != "v-test" || st.Mountpoint != "/mnt/test" || st.PID != os.Getpid() {
		t.Errorf("identity: %+v", st)
	}
	if _, ok := st.FUSE["write"]; !ok || len(st.FUSE) != 1 {
		t.Errorf("FUSE ops %v: want only the one that ran", st.FUSE)
	}
	if len(st.NBD) != 1 || st.Replica != nil || st.Reclaim != nil || st.Space != nil {
		t.Errorf("NBD %v, replica %v, reclaim %v, space %v", st.NBD, st.Replica, st.Reclaim, st.Space)
	}
	if st.Checkpoints == nil || st.CheckpointError != "" {
		t.Errorf("checkpoints %v, error %q", st.Checkpoints, st.CheckpointError)
	}
	if st.StoreRequests.Requests() == 0 {
		t.Error("no store requests counted")
	}
	src.Checkpoint = "nightly"
	if got := s.State(context.Background()).Role; got != RoleCheckpoint {
		t.Errorf("role with a checkpoint: %q", got)
	}
}

// hangingList is a store whose listings wait for their context.
type hangingList struct {
	objstore.Store
	started chan struct{}
}

func (h *hangingList) List(ctx context.Context, prefix, startAfter string, limit int) (objstore.ListPage, error) {
	if strings.HasPrefix(prefix, "checkpoints") {
		close(h.started)
		<-ctx.Done()
		return objstore.ListPage{}, ctx.Err()
	}
	return h.Store.List(ctx, prefix, startAfter, limit)
}

// TestSamplerCloseEndsFetches: a listing that hangs on the store is
// cancelled by Close, which returns once it has.
func TestSamplerCloseEndsFetches(t *testing.T) {
	src := newSource(t, objstore.NewMem())
	h := &hangingList{Store: src.Store, started: make(chan struct{})}
	src.Store = h
	s := NewSampler(src)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-h.started; cancel() }()
	st := s.State(ctx) // waits for the first listing until ctx ends
	if len(st.Checkpoints) != 0 {
		t.Errorf("checkpoints %v from a store that does not answer", st.Checkpoints)
	}
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(refreshTimeout / 2):
		t.Fatal("Close did not cancel the hanging listing")
	}
}

func TestHistoryBucketsOnTheInjectedClock(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 3, 0, time.UTC)
	clk := clock.NewFake(t0)
	h := NewHistory(reclaim.NewCleanerStats(), clk)
	h.Start()
	for i := 1; i <= 3; i++ {
		deadline := time.Now().Add(10 * time.Second)
		for clk.Waiters() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the history does not wait on the clock")
			}
			time.Sleep(time.Millisecond)
		}
		clk.Advance(HistoryBucket)
		for len(h.Points()) < i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("after %d buckets: %d points", i, len(h.Points()))
			}
			time.Sleep(time.Millisecond)
		}
	}
	h.Close()
	pts := h.Points()
	if len(pts) != 4 {
		t.Fatalf("%d points after three buckets, want 3 and the one in progress", len(pts))
	}
	start := t0.Truncate(HistoryBucket)
	for i, p := range pts {
		if want := start.Add(time.Duration(i) * HistoryBucket).UnixMilli(); p.T != want {
			t.Errorf("point %d at %d, want %d", i, p.T, want)
		}
	}
	NewHistory(reclaim.NewCleanerStats(), nil).Close() // never started: returns at once
}
