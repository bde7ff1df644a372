package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"ebbfs.dev/ebbfs/internal/testutil"
)

// browser starts headless Chromium for the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	exe := needTool(t, "chromium")
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); acancel() })
	// The first run starts the browser; it must not carry a timeout.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// js evaluates expr in the page, with a timeout.
func js[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitJS polls a boolean expression in the page.
func waitJS(t *testing.T, ctx context.Context, timeout time.Duration, what, expr string) {
	t.Helper()
	testutil.Eventually(t, timeout, what, func() bool { return js[bool](t, ctx, expr) })
}

// spaceAll is `ebbfs space --json` with the fields the page shows.
type spaceAll struct {
	LiveBytes         int64 `json:"live_bytes"`
	SegmentBytes      int64 `json:"segment_bytes"`
	FragmentedBytes   int64 `json:"fragmented_bytes"`
	DeadBytes         int64 `json:"dead_bytes"`
	AwaitingBytes     int64 `json:"awaiting_bytes"`
	SegmentCount      int   `json:"segment_count"`
	TombstonesPending int   `json:"tombstones_pending"`
}

// noDeadBytes reports whether `ebbfs space --json` shows no dead byte in
// the store, neither awaiting its deadline nor due: every deleted byte
// has been freed.
func (e *env) noDeadBytes() bool {
	var sp spaceAll
	r := e.ebbfs("space", "--json")
	return r.code == 0 && json.Unmarshal([]byte(r.stdout), &sp) == nil && sp.DeadBytes == 0 && sp.AwaitingBytes == 0
}

// TestWebPageChartsReclamation loads the admin page of the real writer in
// headless Chromium, runs a workload (large files written and deleted),
// and reads the DOM: the tombstone-cleanup chart has points adding up to
// the extents deleted, the cycle chart has the cycle that freed them, and
// the footprint numbers equal `ebbfs space --json`. The page loads
// nothing from outside its origin under a strict Content-Security-Policy
// and fits a phone's width. A screenshot of the page goes to
// EBBFS_SCREENSHOTS if set (make screenshots uses it for docs/).
func TestWebPageChartsReclamation(t *testing.T) {
	t.Parallel()
	needTool(t, "chromium")
	seed := e2eSeed(t)
	src := newDataSource(seed)
	e := newEnv(t, withEnvVars("EBBFS_TEST_TIME_SCALE=20"))
	e.init()
	p := e.mount()
	ctx := browser(t)
	base := "http://" + e.admin

	// The page's headers: a strict CSP, no framing.
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-") {
		t.Errorf("Content-Security-Policy allows unsafe sources: %q", csp)
	}

	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/?interval=500")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 20*time.Second, "the first update", `+(document.body.getAttribute("data-updates")||0) >= 1`)

	// Workload: a kept file and three deleted large ones (each 48 extents).
	kept := make([]byte, 200*kib)
	src.fill(kept)
	writeFile(t, e.path("kept"), kept)
	fsyncFile(t, e.path("kept"))
	const large, files = 1536 * kib, 3
	for i := range files {
		writeSynced(t, e.path(fmt.Sprintf("big%d", i)), large, src)
	}
	for i := range files {
		if err := os.Remove(e.path(fmt.Sprintf("big%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	extents := files * large / (32 * kib)
	// Reclaimed means no dead byte left in the store: how many segments
	// the three files' frames went into, and so how many cycles free
	// them, depends on how fast the machine wrote them.
	testutil.Eventually(t, time.Minute, "the deleted files reclaimed", func() bool {
		m := e.monitorState()
		if m.Engine.ExtentsCleaned != uint64(extents) || m.ReclaimTotals == nil || m.ReclaimTotals.Deleted < files {
			return false
		}
		return e.noDeadBytes()
	})

	// The tombstone chart: points whose extents add up to what the
	// cleaner deleted, in buckets of the last hour.
	sumExpr := `Array.from(document.querySelectorAll("#chart-tombstones rect.pt")).reduce((s, r) => s + +r.getAttribute("data-extents"), 0)`
	waitJS(t, ctx, 15*time.Second, "the tombstone chart's points", fmt.Sprintf(`%s === %d`, sumExpr, extents))
	points := js[int](t, ctx, `document.querySelectorAll("#chart-tombstones rect.pt").length`)
	nonEmpty := js[int](t, ctx, `Array.from(document.querySelectorAll("#chart-tombstones rect.pt")).filter(r => +r.getAttribute("data-extents") > 0).length`)
	tombs := js[int](t, ctx, `Array.from(document.querySelectorAll("#chart-tombstones rect.pt")).reduce((s, r) => s + +r.getAttribute("data-tombstones"), 0)`)
	t.Logf("tombstone chart: %d points, %d with extents, %d extents and %d tombstones in all", points, nonEmpty, extents, tombs)
	if nonEmpty < 1 || tombs != files {
		t.Errorf("tombstone chart: %d non-empty points, %d tombstones; want >= 1 and %d", nonEmpty, tombs, files)
	}
	// The cycle chart: the cycles that freed the segments.
	waitJS(t, ctx, 15*time.Second, "the cycle chart's bars", `Array.from(document.querySelectorAll("#chart-cycles rect.pt")).reduce((s, r) => s + +r.getAttribute("data-deleted"), 0) >= 3`)
	freed := js[float64](t, ctx, `Array.from(document.querySelectorAll("#chart-cycles rect.pt")).reduce((s, r) => s + +r.getAttribute("data-bytes"), 0)`)
	if freed < float64(files*large) {
		t.Errorf("the cycle chart shows %v bytes freed, want at least the %d deleted", freed, files*large)
	}

	// The footprint equals `ebbfs space --json` once the page has updated
	// after it (nothing changes any more: the filesystem is idle).
	var sp spaceAll
	if err := json.Unmarshal([]byte(e.mustEbbfs("space", "--json").stdout), &sp); err != nil {
		t.Fatal(err)
	}
	n0 := js[int](t, ctx, `+document.body.getAttribute("data-updates")`)
	waitJS(t, ctx, 10*time.Second, "two more updates", fmt.Sprintf(`+document.body.getAttribute("data-updates") >= %d`, n0+2))
	page := js[map[string]float64](t, ctx, `(() => { const b = id => +document.getElementById(id).getAttribute("data-bytes");
		return {live: b("fp-live"), fragmented: b("fp-fragmented"), dead: b("fp-dead"), awaiting: b("fp-awaiting"), stored: b("fp-segments"),
		        segments: +document.getElementById("fp-segcount").getAttribute("data-count"),
		        pending: +document.getElementById("cl-pending").getAttribute("data-count")}; })()`)
	want := map[string]float64{"live": float64(sp.LiveBytes), "fragmented": float64(sp.FragmentedBytes), "dead": float64(sp.DeadBytes),
		"awaiting": float64(sp.AwaitingBytes), "stored": float64(sp.SegmentBytes), "segments": float64(sp.SegmentCount), "pending": float64(sp.TombstonesPending)}
	for k, v := range want {
		if page[k] != v {
			t.Errorf("footprint %s: the page shows %v, ebbfs space --json says %v", k, page[k], v)
		}
	}
	t.Logf("footprint on the page = ebbfs space --json: %v", page)
	if sp.LiveBytes < int64(len(kept)) || sp.DeadBytes != 0 {
		t.Errorf("space after the workload: %+v", sp)
	}

	// Nothing from outside the origin; no script error shown.
	res := js[[]string](t, ctx, `performance.getEntriesByType("resource").map(e => e.name)`)
	for _, u := range res {
		if !strings.HasPrefix(u, base+"/") {
			t.Errorf("the page loaded %s from outside %s", u, base)
		}
	}
	if msg := js[string](t, ctx, `document.getElementById("fetch-error").textContent`); msg != "" {
		t.Errorf("the page reports a fetch error: %s", msg)
	}

	shots := os.Getenv("EBBFS_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shots, "webpage.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	// A phone: nothing wider than the screen.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 10*time.Second, "the phone layout", `document.documentElement.scrollWidth <= window.innerWidth + 1`)
	p.stop()
}
