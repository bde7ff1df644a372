package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// buildHandles compiles testdata/handles.c (name_to_handle_at and
// open_by_handle_at from the command line) into dir.
func buildHandles(t *testing.T, e *env) string {
	t.Helper()
	need(t, "gcc")
	src, err := filepath.Abs("testdata/handles.c")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(e.dir, "handles")
	if r := e.run("gcc", "-Wall", "-O1", "-o", bin, src); r.code != 0 {
		t.Fatalf("gcc handles.c: %s", r)
	}
	return bin
}

// TestFileHandlesAcrossRemount: a small C program takes file handles with
// name_to_handle_at, the writer stops and a new one mounts, and
// open_by_handle_at reads the same bytes through the handle of a file in
// a subdirectory; a file deleted before the remount gives ESTALE.
// (fs/fuse's TestHandlesAcrossRemount covers directories' handles.)
func TestFileHandlesAcrossRemount(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("open_by_handle_at needs CAP_DAC_READ_SEARCH")
	}
	e := newEnv(t)
	bin := buildHandles(t, e)
	e.init()
	p := e.mount()
	if err := os.MkdirAll(e.path("a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	data := randBytes(t, 300<<10)
	writeFile(t, e.path("a/b/file"), data)
	writeFile(t, e.path("deleted"), []byte("soon gone"))
	hfile, hdel := filepath.Join(e.dir, "file.h"), filepath.Join(e.dir, "deleted.h")
	for path, h := range map[string]string{e.path("a/b/file"): hfile, e.path("deleted"): hdel} {
		if r := e.run(bin, "save", path, h); r.code != 0 {
			t.Fatalf("name_to_handle_at %s: %s", path, r)
		}
	}
	// The handle reads the file on the same mount too.
	if r := e.run(bin, "read", e.mnt, hfile); r.code != 0 || r.stdout != string(data) {
		t.Fatalf("open_by_handle_at before the remount: %d bytes, %s", len(r.stdout), r.stderr)
	}
	if err := os.Remove(e.path("deleted")); err != nil {
		t.Fatal(err)
	}
	p.stop()

	p = e.mount()
	r := e.run(bin, "read", e.mnt, hfile)
	if r.code != 0 || !bytes.Equal([]byte(r.stdout), data) {
		t.Fatalf("open_by_handle_at after the remount: exit %d, %d bytes (want %d): %s", r.code, len(r.stdout), len(data), r.stderr)
	}
	r = e.run(bin, "read", e.mnt, hdel)
	if r.code != 2 || !strings.Contains(r.stderr, "errno 116") {
		t.Fatalf("open_by_handle_at of a deleted file: exit %d, %s; want ESTALE (errno 116)", r.code, r.stderr)
	}
	p.stop()
}
