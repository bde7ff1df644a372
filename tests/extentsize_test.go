package tests

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

const extentSizeAttr = "user.ebbfs.extent_size"

func getExtentSize(t *testing.T, path string) string {
	t.Helper()
	buf := make([]byte, 32)
	n, err := syscall.Getxattr(path, extentSizeAttr, buf)
	if err != nil {
		t.Fatalf("getxattr %s %s: %v", extentSizeAttr, path, err)
	}
	return string(buf[:n])
}

// TestExtentSizeOnTheMount: the extent size attribute through the kernel:
// a directory's is inherited, a file with data refuses a change with
// EBUSY, /.nbd starts at 4 KiB, `cp -a` carries it, and it survives a
// restart with fsck clean.
func TestExtentSizeOnTheMount(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	p := e.mount()
	if got := getExtentSize(t, e.path(".nbd")); got != "4096" {
		t.Fatalf("/.nbd has extent size %q, want 4096", got)
	}
	if got := getExtentSize(t, e.path("")); got != "32768" {
		t.Fatalf("the root has extent size %q, want 32768", got)
	}
	if err := os.Mkdir(e.path("db"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setxattr(e.path("db"), extentSizeAttr, []byte("8192"), 0); err != nil {
		t.Fatal(err)
	}
	data := randBytes(t, 1<<20+100)
	writeFile(t, e.path("db/table"), data)
	if got := getExtentSize(t, e.path("db/table")); got != "8192" {
		t.Fatalf("db/table has extent size %q, want the directory's 8192", got)
	}
	if err := syscall.Setxattr(e.path("db/table"), extentSizeAttr, []byte("4096"), 0); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("changing the extent size of a file with data: %v, want EBUSY", err)
	}
	if err := syscall.Setxattr(e.path("db"), extentSizeAttr, []byte("3000"), 0); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("extent size 3000: %v, want EINVAL", err)
	}
	// The attribute is not listed, so cp -a does not try to set it (on a
	// file it has written, which would fail): a copy takes the size of
	// the directory it is made in.
	for dst, want := range map[string]string{"copy": "32768", "db/copy": "8192"} {
		if out, err := exec.Command("cp", "-a", e.path("db/table"), e.path(dst)).CombinedOutput(); err != nil || len(out) > 0 {
			t.Fatalf("cp -a to %s: %v\n%s", dst, err, out)
		}
		if got := getExtentSize(t, e.path(dst)); got != want {
			t.Fatalf("cp -a to %s made extent size %q, want %s", dst, got, want)
		}
	}
	list := make([]byte, 4096)
	if n, err := syscall.Listxattr(e.path("db/table"), list); err != nil || bytes.Contains(list[:n], []byte(extentSizeAttr)) {
		t.Fatalf("listxattr: %q, %v; want no extent size", list[:max(n, 0)], err)
	}
	p.stop()

	if r := e.mustEbbfs("fsck", "--verify-data"); !bytes.Contains([]byte(r.stdout), []byte("consistent")) {
		t.Fatalf("fsck: %s", r)
	}
	p = e.mount()
	defer p.stop()
	for path, want := range map[string]string{"db": "8192", "db/table": "8192", "db/copy": "8192", "copy": "32768", ".nbd": "4096"} {
		if got := getExtentSize(t, e.path(path)); got != want {
			t.Errorf("after a restart %s has extent size %q, want %s", path, got, want)
		}
	}
	for _, path := range []string{"db/table", "copy", "db/copy"} {
		if got := readFile(t, e.path(path)); !bytes.Equal(got, data) {
			t.Fatalf("%s read back %d bytes, differs", path, len(got))
		}
	}
}
