package tests

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestDamageNamed flips a bit in one frame of a hard-linked file in a
// local store and checks that the damage is findable: the read fails with
// EIO and the writer's log line names both paths and the extent's byte
// range; `ebbfs status`, the monitor's header (tmux) and the web page
// (headless Chromium) show the alarm with the paths; `ebbfs fsck
// --verify-data --list-damaged` prints the two paths, one a line, and
// exits 1; an undamaged file still reads.
func TestDamageNamed(t *testing.T) {
	t.Parallel()
	needTool(t, "chromium")
	needTool(t, "tmux")
	e := newEnv(t)
	e.init()
	p := e.mount()
	if err := os.Mkdir(e.path("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	victim := randBytes(t, 4*32<<10)
	writeFile(t, e.path("dir/victim.bin"), victim)
	fsyncFile(t, e.path("dir/victim.bin"))
	if err := os.Link(e.path("dir/victim.bin"), e.path("other-name")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.path("ok.txt"), []byte("undamaged"))
	fsyncFile(t, e.path("ok.txt"))
	var sys syscall.Stat_t
	if err := syscall.Stat(e.path("dir/victim.bin"), &sys); err != nil {
		t.Fatal(err)
	}
	e.mustEbbfs("flush")
	p.stop()

	// Flip one bit in the middle of the victim's extent 1, in the store.
	k, err := readStoreDescriptor(t, e).Unlock(testPassword)
	if err != nil {
		t.Fatal(err)
	}
	flipped := false
	for _, path := range segmentFiles(t, e) {
		obj, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range segmentEntries(t, k, path, obj) {
			if en.Ino == sys.Ino && en.Extent == 1 && !flipped {
				obj[uint64(en.Offset)+uint64(en.Length)/2] ^= 0x04
				flipped = true
				if err := os.WriteFile(path, obj, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if !flipped {
		t.Fatalf("no frame of inode %d extent 1 in the store", sys.Ino)
	}
	if err := os.RemoveAll(e.cache); err != nil {
		t.Fatal(err)
	}

	p = e.mount()
	if _, err := os.ReadFile(e.path("dir/victim.bin")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("reading the damaged file: %v, want EIO", err)
	}
	if got := string(readFile(t, e.path("ok.txt"))); got != "undamaged" {
		t.Fatalf("ok.txt = %q", got)
	}
	logLine := regexp.MustCompile(`damaged file.*path="/dir/victim.bin, /other-name".*bytes=\[32768,65536\)`)
	if !logLine.MatchString(p.out.String()) {
		t.Errorf("the writer's log has no line naming the paths and bytes [32768,65536) (%s):\n%s", logLine, p.out.String())
	}

	st := e.mustEbbfs("status")
	t.Logf("ebbfs status:\n%s", st.stdout)
	for _, want := range []string{"DAMAGE: 1 file(s)", "damaged: /dir/victim.bin, /other-name bytes [32768,65536)"} {
		if !strings.Contains(st.stdout, want) {
			t.Errorf("ebbfs status lacks %q", want)
		}
	}

	m := startMonitor(t, e, 160, 40)
	g := m.waitScreen(20*time.Second, "the damage alarm", regexp.MustCompile(`DAMAGE: 1 file\(s\) fail authentication[^\n]*/dir/victim.bin, /other-name`))
	t.Logf("monitor header: %s", strings.TrimSpace(g[0]))
	m.quit()

	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+e.admin+"/?interval=500")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 20*time.Second, "the page's damage alarm",
		`(() => { const d = document.getElementById("damage"); return !d.hidden && d.textContent.includes("/dir/victim.bin, /other-name bytes [32768,65536)"); })()`)
	alarm := js[string](t, ctx, `document.getElementById("damage").textContent`)
	bg := js[string](t, ctx, `getComputedStyle(document.getElementById("damage")).backgroundColor`)
	t.Logf("page alarm (background %s): %s", bg, alarm)
	if bg == "rgba(0, 0, 0, 0)" || bg == "" {
		t.Errorf("the page's damage alarm has no background colour: %q", bg)
	}
	p.stop()

	r := e.ebbfs("fsck", "--verify-data", "--list-damaged")
	if r.code != 1 {
		t.Errorf("fsck --list-damaged exit %d, want 1:\n%s", r.code, r)
	}
	if got := strings.Split(strings.TrimSpace(r.stdout), "\n"); strings.Join(got, "|") != "/dir/victim.bin|/other-name" {
		t.Errorf("fsck --list-damaged printed %q, want the two paths", r.stdout)
	}
	if !strings.Contains(r.stderr, "damaged: /dir/victim.bin, /other-name bytes [32768,65536) (inode") {
		t.Errorf("fsck's report does not name the paths and byte range:\n%s", r.stderr)
	}
	t.Logf("fsck --verify-data --list-damaged:\n%s%s", r.stdout, r.stderr)
}
