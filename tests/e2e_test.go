package tests

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
)

func randBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBasicOps: init, run, ordinary file operations through the mount,
// then SIGTERM exits 0 and unmounts.
func TestBasicOps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	if r := e.ebbfs("init"); r.code == 0 || !strings.Contains(r.stderr, "already holds a filesystem") {
		t.Fatalf("second init: %s", r)
	}
	p := e.mount()

	data := randBytes(t, 3<<20+12345)
	writeFile(t, e.path("big.bin"), data)
	if got := readFile(t, e.path("big.bin")); !bytes.Equal(got, data) {
		t.Fatalf("big.bin read back %d bytes, differs from the %d written", len(got), len(data))
	}
	if err := os.MkdirAll(e.path("a/b/c"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.path("a/b/c/small.txt"), []byte("hello ebbfs\n"))
	if err := os.Rename(e.path("a/b/c/small.txt"), e.path("a/moved.txt")); err != nil {
		t.Fatal(err)
	}
	if got := string(readFile(t, e.path("a/moved.txt"))); got != "hello ebbfs\n" {
		t.Fatalf("moved.txt = %q", got)
	}
	if _, err := os.Stat(e.path("a/b/c/small.txt")); !os.IsNotExist(err) {
		t.Fatalf("rename left the old name: %v", err)
	}
	if err := os.Symlink("moved.txt", e.path("a/link")); err != nil {
		t.Fatal(err)
	}
	if tgt, err := os.Readlink(e.path("a/link")); err != nil || tgt != "moved.txt" {
		t.Fatalf("readlink = %q, %v", tgt, err)
	}
	if got := string(readFile(t, e.path("a/link"))); got != "hello ebbfs\n" {
		t.Fatalf("read through symlink = %q", got)
	}
	if err := os.Link(e.path("a/moved.txt"), e.path("hard")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(e.path("hard")); err != nil || fi.Sys().(*syscall.Stat_t).Nlink != 2 {
		t.Fatalf("hard link: %v %v", fi, err)
	}
	if err := syscall.Setxattr(e.path("a/moved.txt"), "user.color", []byte("blue"), 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := syscall.Getxattr(e.path("a/moved.txt"), "user.color", buf); err != nil || string(buf[:n]) != "blue" {
		t.Fatalf("getxattr = %q, %v", buf[:max(n, 0)], err)
	}
	if err := os.Chmod(e.path("a/moved.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(e.path("a/moved.txt")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("chmod: mode %v", fi.Mode())
	}
	if err := os.Truncate(e.path("big.bin"), 1000); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, e.path("big.bin")); !bytes.Equal(got, data[:1000]) {
		t.Fatal("truncate: content differs")
	}
	f, err := os.OpenFile(e.path("big.bin"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("tail")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	f.Close()
	if got := readFile(t, e.path("big.bin")); len(got) != 1004 || string(got[1000:]) != "tail" {
		t.Fatalf("append: %d bytes, tail %q", len(got), got[min(1000, len(got)):])
	}
	if err := os.Remove(e.path("hard")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(e.path("a/b")); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(e.path("a"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range ents {
		names = append(names, de.Name())
	}
	if want := []string{"link", "moved.txt"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("readdir a = %v, want %v", names, want)
	}
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(e.mnt, &sfs); err != nil || sfs.Bsize == 0 {
		t.Fatalf("statfs: %+v %v", sfs, err)
	}
	p.stop()
}

// TestRestartPersistence: what was written survives a clean restart, and
// fsck finds the store consistent.
func TestRestartPersistence(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	p := e.mount()
	data := randBytes(t, 1<<20+7)
	writeFile(t, e.path("keep.bin"), data)
	if err := os.Mkdir(e.path("dir"), 0o750); err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.path("dir/note"), []byte("persist me"))
	p.stop()

	r := e.mustEbbfs("fsck")
	if !strings.Contains(r.stdout, "consistent") {
		t.Errorf("fsck output: %s", r)
	}

	p = e.mount()
	if got := readFile(t, e.path("keep.bin")); !bytes.Equal(got, data) {
		t.Fatalf("keep.bin differs after restart (%d bytes)", len(got))
	}
	if got := string(readFile(t, e.path("dir/note"))); got != "persist me" {
		t.Fatalf("dir/note = %q", got)
	}
	if fi, err := os.Stat(e.path("dir")); err != nil || fi.Mode().Perm() != 0o750 || !fi.IsDir() {
		t.Fatalf("dir after restart: %v %v", fi, err)
	}
	p.stop()
}

// TestRecoverFromStoreAlone: fsynced data survives kill -9 plus the loss
// of the local cache directory.
func TestRecoverFromStoreAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	p := e.mount()
	data := randBytes(t, 2<<20+99)
	writeFile(t, e.path("fsynced.bin"), data)
	fsyncFile(t, e.path("fsynced.bin"))
	writeFile(t, e.path("flushed.txt"), []byte("made durable by ebbfs flush"))
	if r := e.ebbfs("flush"); r.code != 0 {
		t.Fatalf("flush: %s", r)
	}
	p.kill()
	// The killed writer leaves a dead mount ("transport endpoint is not
	// connected"); the next run detaches it by itself.
	if !isMounted(e.mnt) {
		t.Fatal("kill -9 removed the mount: expected a dead mount")
	}
	if err := os.RemoveAll(e.cache); err != nil {
		t.Fatal(err)
	}
	if r := e.mustEbbfs("fsck"); !strings.Contains(r.stdout, "consistent") {
		t.Fatalf("fsck after kill -9: %s", r)
	}

	p = e.mount()
	if !strings.Contains(p.out.String(), "detaching a dead ebbfs mount") {
		t.Errorf("the restart did not report detaching the dead mount:\n%s", p.out.String())
	}
	if got := readFile(t, e.path("fsynced.bin")); !bytes.Equal(got, data) {
		t.Fatalf("fsynced.bin differs after recovery from the store (%d bytes)", len(got))
	}
	if got := string(readFile(t, e.path("flushed.txt"))); got != "made durable by ebbfs flush" {
		t.Fatalf("flushed.txt = %q", got)
	}
	// The recovered filesystem takes writes.
	writeFile(t, e.path("after.txt"), []byte("new"))
	p.stop()
	p = e.mount()
	if got := string(readFile(t, e.path("after.txt"))); got != "new" {
		t.Fatalf("after.txt = %q", got)
	}
	p.stop()
}

// TestSecondWriterRefused: a second run against a live writer fails,
// saying a writer holds the lease, and the first keeps working.
func TestSecondWriterRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	p := e.mount()
	writeFile(t, e.path("x"), []byte("first"))

	// The second writer gets its own cache, mountpoint and ports, but the
	// same store.
	e2 := e.sameStore()
	q := e2.start()
	code := q.wait()
	if code == 0 {
		t.Fatalf("second writer exited 0:\n%s", q.out.String())
	}
	if !strings.Contains(q.out.String(), "writer holds the lease") {
		t.Fatalf("second writer's message does not say a writer holds the lease:\n%s", q.out.String())
	}
	if isMounted(e2.mnt) {
		t.Fatal("second writer left a mount")
	}
	if got := string(readFile(t, e.path("x"))); got != "first" {
		t.Fatalf("first writer after the refusal: %q", got)
	}
	writeFile(t, e.path("y"), []byte("still writing"))
	p.stop()
}

// TestWrongPassword: exits non-zero naming the password and writes nothing.
func TestWrongPassword(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	p := e.mount()
	writeFile(t, e.path("f"), []byte("data"))
	p.stop()

	before := e.storeTree()
	if err := os.WriteFile(filepath.Join(e.dir, "password"), []byte("not the right password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"run", "fsck"} {
		r := e.ebbfs(sub)
		if r.code == 0 {
			t.Fatalf("%s with a wrong password exited 0: %s", sub, r)
		}
		if !strings.Contains(strings.ToLower(r.stderr), "password") {
			t.Fatalf("%s with a wrong password: message does not name the password: %s", sub, r)
		}
		if isMounted(e.mnt) {
			t.Fatalf("%s with a wrong password mounted", sub)
		}
	}
	if after := e.storeTree(); !reflect.DeepEqual(before, after) {
		t.Fatalf("the store changed during wrong-password attempts:\n%s", treeDiff(before, after))
	}
	// Too short a password is refused by init of a new store, too.
	e2 := newEnv(t)
	if err := os.WriteFile(filepath.Join(e2.dir, "password"), []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := e2.ebbfs("init"); r.code == 0 || !strings.Contains(r.stderr, "password") {
		t.Fatalf("init with a short password: %s", r)
	}
}

func treeDiff(a, b map[string]string) string {
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok {
			out = append(out, "removed "+k)
		} else if v != w {
			out = append(out, "changed "+k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, "added "+k)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// TestFlush: ebbfs flush succeeds against a writer, fails without one.
func TestFlush(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	if r := e.ebbfs("flush"); r.code == 0 || !strings.Contains(r.stderr, "no ebbfs process is running") {
		t.Fatalf("flush with no writer: %s", r)
	}
	p := e.mount()
	data := randBytes(t, 512<<10)
	writeFile(t, e.path("f"), data)
	r := e.mustEbbfs("flush")
	if !strings.Contains(r.stdout, "flushed") {
		t.Fatalf("flush output: %s", r)
	}
	// Everything flushed is in the store: fsck from the store alone sees
	// the file's extents while the writer still runs.
	r = e.mustEbbfs("fsck")
	if !strings.Contains(r.stdout, "consistent") {
		t.Fatalf("fsck after flush: %s", r)
	}
	st := e.mustEbbfs("status", "--json")
	var status struct {
		Barriers   int    `json:"barriers"`
		Mountpoint string `json:"mountpoint"`
		PID        int    `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.stdout), &status); err != nil {
		t.Fatalf("status --json: %v\n%s", err, st)
	}
	if status.Barriers < 1 || status.Mountpoint != e.mnt || status.PID != p.cmd.Process.Pid {
		t.Fatalf("status = %+v", status)
	}
	if r := e.mustEbbfs("monitor", "--count", "2", "--interval", "200ms"); strings.Count(r.stdout, "live=") != 2 {
		t.Fatalf("monitor: %s", r)
	}
	// The admin TCP endpoint serves metrics and the page.
	for path, want := range map[string]string{"/metrics": "ebbfs_admin_flushes_total", "/": "<html", "/v1/status": `"mountpoint"`} {
		resp, err := http.Get("http://" + e.admin + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Fatalf("GET %s: %d, body lacks %q", path, resp.StatusCode, want)
		}
	}
	p.stop()
}

// TestUmountStopsWriter: umount(8) makes the writer run its final barrier
// and exit 0.
func TestUmountStopsWriter(t *testing.T) {
	t.Parallel()
	need(t, "umount")
	e := newEnv(t)
	e.init()
	p := e.mount()
	writeFile(t, e.path("last-words"), []byte("written just before umount"))
	if r := e.run("umount", e.mnt); r.code != 0 {
		t.Fatalf("umount: %s", r)
	}
	if code := p.wait(); code != 0 {
		t.Fatalf("writer exited %d after umount, want 0:\n%s", code, p.out.String())
	}
	if !strings.Contains(p.out.String(), "final barrier done") {
		t.Fatalf("writer did not report its final barrier:\n%s", p.out.String())
	}
	p = e.mount()
	if got := string(readFile(t, e.path("last-words"))); got != "written just before umount" {
		t.Fatalf("after umount and restart: %q", got)
	}
	p.stop()
}

// TestSigtermWithBusyMount: SIGTERM while a file is open detaches the mount
// lazily; the writer finishes (final barrier, exit 0) once the last open
// file is closed, and what was written persists.
func TestSigtermWithBusyMount(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	p := e.mount()
	f, err := os.OpenFile(e.path("held"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("written while busy")); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testutil.WaitMountTable(t, e.mnt, false, time.Minute) // detached after SIGTERM
	time.Sleep(300 * time.Millisecond)
	if p.exited() {
		t.Fatalf("writer exited (%d) while a file was still open:\n%s", p.code, p.out.String())
	}
	// The open file still works until it is closed.
	if _, err := f.Write([]byte(", and after")); err != nil {
		t.Fatalf("write to the held file after the detach: %v", err)
	}
	f.Close()
	if code := p.wait(); code != 0 {
		t.Fatalf("writer exited %d, want 0:\n%s", code, p.out.String())
	}
	p = e.mount()
	if got := string(readFile(t, e.path("held"))); got != "written while busy, and after" {
		t.Fatalf("held = %q", got)
	}
	p.stop()
}
