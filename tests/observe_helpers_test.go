package tests

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// Helpers of the observability tests (monitor, metrics, status page).

// adminGet fetches path from the env's admin TCP endpoint.
func (e *env) adminGet(path string) []byte {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.admin+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET %s: %d %v\n%s", path, resp.StatusCode, err, b)
	}
	return b
}

// monitorJSON is the part of GET /v1/monitor the tests read.
type monitorJSON struct {
	Role    string `json:"role"`
	Replica *struct {
		LagSeconds float64 `json:"lag_seconds"`
		Served     uint64  `json:"served_seq"`
	} `json:"replica"`
	Engine struct {
		TombstonesCreated   uint64 `json:"tombstones_created"`
		TombstonesProcessed uint64 `json:"tombstones_processed"`
		ExtentsCleaned      uint64 `json:"extents_cleaned"`
	} `json:"engine"`
	ReclaimTotals *struct {
		Deleted    uint64 `json:"deleted"`
		BytesFreed uint64 `json:"bytes_freed"`
	} `json:"reclaim_totals"`
}

func (e *env) monitorState() monitorJSON {
	e.t.Helper()
	var m monitorJSON
	if err := json.Unmarshal(e.adminGet("/v1/monitor"), &m); err != nil {
		e.t.Fatal(err)
	}
	return m
}

// needTool is need for the tools of these tests: missing ones skip the
// test, or fail it under CI=true.
func needTool(t testing.TB, tool string) string {
	t.Helper()
	p, err := lookPath(tool)
	if err != nil {
		if inCI() {
			t.Fatalf("%s is not installed; scripts/install-deps.sh installs it (CI=true: failing, not skipping)", tool)
		}
		t.Skipf("%s is not installed; scripts/install-deps.sh installs it", tool)
	}
	return p
}

// metricsDoc is one row of docs/METRICS.md.
type metricsDoc struct {
	name, typ, process string // process: "all", or the roles that export it, comma-separated
}

// exportedBy reports whether the row says a process of the role exports it.
func (d metricsDoc) exportedBy(role string) bool {
	return d.process == "all" || slices.Contains(strings.Split(d.process, ", "), role)
}

var docRow = regexp.MustCompile("^\\| `(ebbfs_[a-z0-9_]+)` \\| (counter|gauge|histogram) \\|[^|]*\\|[^|]*\\| (all|(?:writer|standby|replica|mirror)(?:, (?:writer|standby|replica|mirror))*) \\|")

// documentedMetrics parses the tables of docs/METRICS.md.
func documentedMetrics(t testing.TB) map[string]metricsDoc {
	t.Helper()
	b, err := os.ReadFile("../docs/METRICS.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]metricsDoc{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| `ebbfs_") {
			continue
		}
		m := docRow.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("docs/METRICS.md: malformed row %q", line)
		}
		if _, dup := out[m[1]]; dup {
			t.Fatalf("docs/METRICS.md documents %s twice", m[1])
		}
		out[m[1]] = metricsDoc{name: m[1], typ: m[2], process: m[3]}
	}
	if len(out) < 40 {
		t.Fatalf("docs/METRICS.md documents only %d series", len(out))
	}
	return out
}

// segmentObjects lists the local store's segment objects: path -> size.
func segmentObjects(t testing.TB, store string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := filepath.Walk(filepath.Join(store, "segments"), func(p string, fi os.FileInfo, err error) error {
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			out[p] = fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
