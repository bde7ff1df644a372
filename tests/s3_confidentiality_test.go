package tests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"ebbfs.dev/ebbfs/internal/s3test"
)

// TestS3Store: init, run, write, restart and recover from the store alone
// against a real S3 server.
func TestS3Store(t *testing.T) {
	t.Parallel()
	if noRun != "" {
		t.Skipf("end-to-end tests need: %s", noRun)
	}
	srv := s3test.Start(t)
	e := newEnv(t, withS3(srv.Endpoint, srv.Region, srv.Bucket, "fs1", srv.AccessKey, srv.SecretKey))
	e.init()
	if r := e.ebbfs("init"); r.code == 0 || !strings.Contains(r.stderr, "already") {
		t.Fatalf("second init on the same S3 prefix: %s", r)
	}
	p := e.mount()
	data := randBytes(t, 5<<20+3)
	writeFile(t, e.path("s3.bin"), data)
	if err := os.Mkdir(e.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.path("d/f"), []byte("on s3"))
	e.mustEbbfs("flush")
	p.kill()
	e.forceUnmount()
	if err := os.RemoveAll(e.cache); err != nil {
		t.Fatal(err)
	}
	p = e.mount()
	if got := readFile(t, e.path("s3.bin")); !bytes.Equal(got, data) {
		t.Fatalf("s3.bin differs after recovery from S3 (%d bytes)", len(got))
	}
	if got := string(readFile(t, e.path("d/f"))); got != "on s3" {
		t.Fatalf("d/f = %q", got)
	}
	p.stop()
	if r := e.ebbfs("fsck", "--verify-data"); r.code != 0 || !strings.Contains(r.stdout, "consistent") {
		t.Fatalf("fsck --verify-data on S3: %s", r)
	}
	// A different prefix in the same bucket is a different (absent) fs.
	e2 := newEnv(t, withS3(srv.Endpoint, srv.Region, srv.Bucket, "other", srv.AccessKey, srv.SecretKey))
	if r := e2.ebbfs("run"); r.code == 0 || !strings.Contains(r.stderr, "ebbfs init") {
		t.Fatalf("run on an empty prefix: %s", r)
	}
	// The bytes on the server hold no plaintext.
	assertNoMarker(t, srv.Dir, []byte("on s3"), srv.LogPath)
}

const marker = "ebbfsMARKERq7Zx3"

// TestConfidentiality: names, contents, symlink targets and xattrs never
// reach the store in plaintext.
func TestConfidentiality(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	p := e.mount()
	dir := e.path("dir-" + marker)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file-"+marker+".txt")
	// Compressible content (the marker repeated) and the marker inside
	// random data at an unaligned offset.
	writeFile(t, file, bytes.Repeat([]byte(marker+" "), 20000))
	noise := randBytes(t, 300<<10)
	copy(noise[70001:], marker)
	writeFile(t, e.path("noise.bin"), noise)
	if err := os.Symlink("/target/"+marker, e.path("link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setxattr(file, "user."+marker, []byte("value-"+marker), 0); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setxattr(e.path("noise.bin"), "user.plain", []byte(marker), 0); err != nil {
		t.Fatal(err)
	}
	// Hard links and renames put names in new places.
	if err := os.Link(file, e.path("hl-"+marker)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(e.path("noise.bin"), e.path("renamed-"+marker)); err != nil {
		t.Fatal(err)
	}
	// The scanner finds every kind of plaintext it looks for: run it over
	// the mount itself first.
	hits, _ := findMarker(t, e.mnt, []byte(marker), "")
	for _, want := range []string{"path ", "content of ", "symlink target of ", "xattr user." + marker, "xattr user.plain"} {
		found := false
		for _, h := range hits {
			found = found || strings.HasPrefix(h, want)
		}
		if !found {
			t.Fatalf("the marker scanner missed %q in the mount; hits: %q", want, hits)
		}
	}
	e.mustEbbfs("flush")
	assertNoMarker(t, e.store, []byte(marker), "")

	p.stop() // final barrier, lease release
	assertNoMarker(t, e.store, []byte(marker), "")
	p = e.mount()
	if got := readFile(t, e.path("renamed-"+marker)); !bytes.Equal(got, noise) {
		t.Fatal("renamed file differs after restart")
	}
	p.stop()
	assertNoMarker(t, e.store, []byte(marker), "")
}

// assertNoMarker fails if any file name, file content or xattr under root
// holds m. skip is a file to ignore (a server log).
func assertNoMarker(t *testing.T, root string, m []byte, skip string) {
	t.Helper()
	hits, n := findMarker(t, root, m, skip)
	for _, h := range hits {
		t.Errorf("in the store: %s", h)
	}
	if n == 0 {
		t.Fatalf("no objects under %s: the check checked nothing", root)
	}
}

// findMarker lists where m occurs under root and counts the files read.
func findMarker(t *testing.T, root string, m []byte, skip string) (hits []string, files int) {
	t.Helper()
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p == skip {
			return nil
		}
		if bytes.Contains([]byte(p), m) {
			hits = append(hits, "path "+p)
		}
		if names, err := listXattrs(p); err == nil {
			for _, name := range names {
				buf := make([]byte, 64<<10)
				k, err := syscall.Getxattr(p, name, buf)
				if strings.Contains(name, string(m)) || (err == nil && bytes.Contains(buf[:k], m)) {
					hits = append(hits, "xattr "+name+" of "+p)
				}
			}
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			if tgt, err := os.Readlink(p); err == nil && strings.Contains(tgt, string(m)) {
				hits = append(hits, "symlink target of "+p)
			}
			return nil
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files++
		if i := bytes.Index(b, m); i >= 0 {
			hits = append(hits, fmt.Sprintf("content of %s at offset %d", p, i))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hits, files
}

func listXattrs(p string) ([]string, error) {
	buf := make([]byte, 64<<10)
	n, err := syscall.Listxattr(p, buf)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range bytes.Split(buf[:n], []byte{0}) {
		if len(s) > 0 {
			out = append(out, string(s))
		}
	}
	return out, nil
}
