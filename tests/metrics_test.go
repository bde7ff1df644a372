package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"ebbfs.dev/ebbfs/internal/testutil"
)

// TestMetricsDocumentedAndTrue: after a known workload (files written and
// read through the mount, two large files deleted and reclaimed), /metrics
// of the real writer parses with the Prometheus text parser, passes
// client_golang's lint, holds every series docs/METRICS.md documents for a
// writer with the documented type and no undocumented ebbfs_ series, and
// its counters match the workload.
func TestMetricsDocumentedAndTrue(t *testing.T) {
	t.Parallel()
	seed := e2eSeed(t)
	src := newDataSource(seed)
	e := newEnv(t, withEnvVars("EBBFS_TEST_TIME_SCALE=100"))
	e.init()
	p := e.mount()

	// A small file, then two large ones (32 extents each: tombstones), each
	// fsynced into its own segment.
	small := make([]byte, 100*kib)
	src.fill(small)
	writeFile(t, e.path("small"), small)
	fsyncFile(t, e.path("small"))
	const large = 1 * mib
	writeSynced(t, e.path("big1"), large, src)
	writeSynced(t, e.path("big2"), large, src)
	dropPageCache(t, e.path("big1"))
	if got := readFile(t, e.path("big1")); len(got) != large {
		t.Fatalf("read %d bytes of big1", len(got))
	}
	// 1 MiB written to an NBD export with nbdcopy, flushed.
	needTool(t, "nbdcopy")
	const nbdSize = 1 * mib
	writeFile(t, e.path(".nbd/disk0"), nil)
	if err := os.Truncate(e.path(".nbd/disk0"), nbdSize); err != nil {
		t.Fatal(err)
	}
	img := make([]byte, nbdSize)
	src.fill(img)
	writeFile(t, filepath.Join(e.dir, "img.raw"), img)
	if r := e.run("nbdcopy", "--flush", filepath.Join(e.dir, "img.raw"), "nbd://"+e.nbdAddr+"/disk0"); r.code != 0 {
		t.Fatalf("nbdcopy: %s", r)
	}
	e.mustEbbfs("flush")
	before, objsBefore := segmentBytes(t, e.store)
	objects := segmentObjects(t, e.store)

	for _, n := range []string{"big1", "big2"} {
		if err := os.Remove(e.path(n)); err != nil {
			t.Fatal(err)
		}
	}
	// The cleaner, then the cycles (grace 60 s / 100) free the files'
	// segments: two, or more when a slow machine cut them smaller, so the
	// wait is for no dead byte left, after which nothing is deleted.
	testutil.Eventually(t, time.Minute, "both large files reclaimed", func() bool {
		m := e.monitorState()
		return m.Engine.TombstonesProcessed == 2 && m.ReclaimTotals != nil && m.ReclaimTotals.Deleted >= 2 && e.noDeadBytes()
	})
	after, objsAfter := segmentBytes(t, e.store)
	// What reclamation deleted: the objects gone from segments/ (a repack
	// of small segments, should one happen, adds an output but deletes
	// only sources).
	var goneN, goneBytes int64
	for p, n := range segmentObjects(t, e.store) {
		if _, ok := objects[p]; !ok {
			t.Logf("new segment object since the deletes: %s (%d bytes)", p, n)
		}
	}
	now := segmentObjects(t, e.store)
	for p, n := range objects {
		if _, ok := now[p]; !ok {
			goneN++
			goneBytes += n
		}
	}
	t.Logf("segments/: %s in %d objects before the deletes, %s in %d after", mibs(before), objsBefore, mibs(after), objsAfter)

	body := e.adminGet("/metrics")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("the Prometheus text parser rejects /metrics: %v", err)
	}
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		t.Errorf("promlint: %s: %s", pr.Metric, pr.Text)
	}

	docs := documentedMetrics(t)
	for name, d := range docs {
		if !d.exportedBy("writer") {
			continue
		}
		f, ok := fams[name]
		if !ok {
			t.Errorf("%s is documented (%s, %s) but the writer does not export it", name, d.typ, d.process)
			continue
		}
		if got := strings.ToLower(f.GetType().String()); got != d.typ {
			t.Errorf("%s is a %s, documented as a %s", name, got, d.typ)
		}
	}
	for name := range fams {
		if strings.HasPrefix(name, "ebbfs_") {
			if _, ok := docs[name]; !ok {
				t.Errorf("%s is exported but not documented in docs/METRICS.md", name)
			}
		}
	}

	// Values from the workload.
	val := func(name string, labels ...string) float64 {
		t.Helper()
		f := fams[name]
		if f == nil {
			t.Fatalf("no %s", name)
		}
		var sum float64
		found := false
	next:
		for _, m := range f.Metric {
			for i := 0; i+1 < len(labels); i += 2 {
				if labelValue(m, labels[i]) != labels[i+1] {
					continue next
				}
			}
			found = true
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
		if !found {
			t.Fatalf("no %s%v", name, labels)
		}
		return sum
	}
	// The writer PUTs in the background (journals, manifests), and a
	// request's count and its latency are two updates: one scrape may fall
	// between them. Scrape again until they agree.
	testutil.Eventually(t, time.Minute, "a /metrics scrape with as many PUT latencies as PUTs", func() bool {
		if val("ebbfs_store_request_duration_seconds", "op", "put") == val("ebbfs_store_requests_total", "op", "put") {
			return true
		}
		fams, err = parser.TextToMetricFamilies(bytes.NewReader(e.adminGet("/metrics")))
		if err != nil {
			t.Fatalf("the Prometheus text parser rejects /metrics: %v", err)
		}
		return false
	})
	extents := float64(2 * large / (32 * kib))
	checks := []struct {
		what      string
		got, want float64
		atLeast   bool
	}{
		{"tombstones created = large files deleted", val("ebbfs_tombstones_created_total"), 2, false},
		{"tombstones processed = large files deleted", val("ebbfs_tombstones_processed_total"), 2, false},
		{"tombstones pending", val("ebbfs_tombstones_pending"), 0, false},
		{"extents deleted by the cleaner = their extents", val("ebbfs_cleaner_extents_deleted_total"), extents, false},
		{"segments deleted = the objects gone from segments/", val("ebbfs_reclaim_segments_deleted_total"), float64(goneN), false},
		{"segments deleted: the large files' segments at least", val("ebbfs_reclaim_segments_deleted_total"), 2, true},
		{"bytes freed = the bytes of the objects gone", val("ebbfs_reclaim_freed_bytes_total"), float64(goneBytes), false},
		{"bytes freed: the large files at least", val("ebbfs_reclaim_freed_bytes_total"), 2 * large, true},
		{"dead bytes left", val("ebbfs_segment_bytes", "state", "dead"), 0, false},
		{"live bytes = the small file's frames", val("ebbfs_segment_bytes", "state", "live"), float64(len(small)), true},
		{"stored bytes = segments/", val("ebbfs_segment_stored_bytes"), float64(after), false},
		{"cycles run", val("ebbfs_reclaim_cycles_total", "result", "ok"), 2, true},
		{"cycle durations observed", val("ebbfs_reclaim_cycle_duration_seconds"), 2, true},
		{"reclamation DELETEs = segments deleted", val("ebbfs_reclaim_store_requests_total", "op", "delete"), float64(goneN), false},
		{"FUSE bytes written", val("ebbfs_fuse_bytes_total", "op", "write"), float64(2*large + len(small)), true},
		{"FUSE bytes read", val("ebbfs_fuse_bytes_total", "op", "read"), large, true},
		{"FUSE fsyncs", val("ebbfs_fuse_operations_total", "op", "fsync"), 3, true},
		{"FUSE unlinks", val("ebbfs_fuse_operations_total", "op", "unlink"), 2, false},
		{"NBD bytes written = nbdcopy's image", val("ebbfs_nbd_bytes_total", "op", "write"), nbdSize, false},
		{"NBD writes", val("ebbfs_nbd_operations_total", "op", "write"), 1, true},
		{"NBD flushes", val("ebbfs_nbd_operations_total", "op", "flush"), 1, true},
		{"NBD errors", val("ebbfs_nbd_operation_errors_total"), 0, false},
		{"barriers run, shared or not needed (3 fsyncs, 1 flush)", val("ebbfs_barrier_duration_seconds") + val("ebbfs_barrier_joins_total") + val("ebbfs_fsync_clean_total"), 4, true},
		{"barriers run", val("ebbfs_barrier_duration_seconds"), 1, true},
		{"store PUTs of segments", val("ebbfs_store_requests_total", "op", "put", "space", "segments"), 3, true},
		{"store PUT latencies", val("ebbfs_store_request_duration_seconds", "op", "put"), val("ebbfs_store_requests_total", "op", "put"), false},
		{"authentication failures", val("ebbfs_frame_auth_failures_total"), 0, false},
		{"orphan sweep at startup", val("ebbfs_orphan_sweeps_total", "result", "ok"), 1, false},
		{"writer role", val("ebbfs_build_info", "role", "writer"), 1, false},
	}
	for _, c := range checks {
		ok := c.got == c.want
		if c.atLeast {
			ok = c.got >= c.want
		}
		cmp := "="
		if c.atLeast {
			cmp = ">="
		}
		if !ok {
			t.Errorf("%s: got %v, want %s %v", c.what, c.got, cmp, c.want)
		} else {
			t.Logf("%s: %v", c.what, c.got)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", grepLines(string(body), "ebbfs_", "_bucket"))
	}

	// A read-only replica exports the "all" and "replica" series.
	r := e.sameStore()
	rp := r.mount("--read-only")
	r.adminGet("/metrics") // the admin request counter has a series from the second scrape on
	rbody := r.adminGet("/metrics")
	rparser := expfmt.NewTextParser(model.UTF8Validation)
	rfams, err := rparser.TextToMetricFamilies(bytes.NewReader(rbody))
	if err != nil {
		t.Fatalf("the replica's /metrics: %v", err)
	}
	if problems, err := promlint.New(bytes.NewReader(rbody)).Lint(); err != nil || len(problems) > 0 {
		t.Errorf("promlint on the replica: %v %v", problems, err)
	}
	for name, d := range docs {
		f, ok := rfams[name]
		switch {
		case !d.exportedBy("replica"):
		case !ok:
			t.Errorf("%s is documented (%s, %s) but the replica does not export it", name, d.typ, d.process)
		case strings.ToLower(f.GetType().String()) != d.typ:
			t.Errorf("replica: %s is a %s, documented as a %s", name, strings.ToLower(f.GetType().String()), d.typ)
		}
	}
	for name := range rfams {
		if _, ok := docs[name]; strings.HasPrefix(name, "ebbfs_") && !ok {
			t.Errorf("the replica exports %s, which docs/METRICS.md does not document", name)
		}
	}
	if f := rfams["ebbfs_build_info"]; f == nil || labelValue(f.Metric[0], "role") != "replica" {
		t.Errorf("the replica's build info: %v", f)
	}
	if f := rfams["ebbfs_replica_lag_seconds"]; f == nil || f.Metric[0].GetGauge().GetValue() < 0 {
		t.Errorf("the replica's lag: %v", f)
	} else {
		t.Logf("replica lag %.3f s", f.Metric[0].GetGauge().GetValue())
	}
	rp.stop()
	p.stop()
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// grepLines returns the lines with prefix and without skip.
func grepLines(s, prefix, skip string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) && !strings.Contains(l, skip) {
			fmt.Fprintln(&b, l)
		}
	}
	return b.String()
}

// TestGrafanaDashboardUsesDocumentedSeries: every ebbfs_ series the
// dashboard in docs/ queries is documented in docs/METRICS.md.
func TestGrafanaDashboardUsesDocumentedSeries(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	docs := documentedMetrics(t)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, name := range seriesName.FindAllString(tg.Expr, -1) {
				base := name
				for _, suf := range []string{"_bucket", "_count", "_sum"} {
					if b := strings.TrimSuffix(name, suf); b != name && docs[b].typ == "histogram" {
						base = b
					}
				}
				if _, ok := docs[base]; !ok {
					t.Errorf("panel %q queries %s, which docs/METRICS.md does not document", p.Title, name)
				}
				used[base] = true
			}
		}
	}
	if len(used) < 30 {
		t.Errorf("the dashboard uses only %d ebbfs series", len(used))
	}
}

var seriesName = regexp.MustCompile(`ebbfs_[a-z0-9_]+`)
