package tests

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestMountSourceAndRemount: the mount's source is the config file (as
// findmnt and df show it), "mount -o remount" with the same options
// succeeds and leaves the mount working, and one asking for a change fails
// with a clear message and changes nothing.
func TestMountSourceAndRemount(t *testing.T) {
	need(t, "mount", "findmnt", "df")
	e := newEnv(t)
	e.init()
	installHelper(t)
	p := e.mount()

	if r := e.run("findmnt", "-n", "-o", "SOURCE", e.mnt); r.code != 0 || strings.TrimSpace(r.stdout) != e.cfg {
		t.Fatalf("findmnt SOURCE = %q, want the config file %s (%s)", strings.TrimSpace(r.stdout), e.cfg, r)
	}
	if r := e.run("df", "--output=source", e.mnt); r.code != 0 || !strings.Contains(r.stdout, e.cfg) {
		t.Fatalf("df does not name the config file %s: %s", e.cfg, r)
	}
	// And the mount can be found by it.
	if r := e.run("findmnt", "-n", "-o", "TARGET", "--source", e.cfg); r.code != 0 || strings.TrimSpace(r.stdout) != e.mnt {
		t.Fatalf("findmnt --source %s: %s", e.cfg, r)
	}

	for _, opts := range []string{"remount", "remount,rw", "remount,nosuid,nodev,_netdev"} {
		if r := e.run("mount", "-o", opts, e.mnt); r.code != 0 {
			t.Fatalf("mount -o %s: %s", opts, r)
		}
		if !isLiveMount(e.mnt) {
			t.Fatalf("mount -o %s left no live mount", opts)
		}
		writeFile(t, e.path("after-"+opts), []byte(opts))
	}

	for _, c := range []struct{ opts, want string }{
		{"remount,ro", "from read-write to read-only"},
		{"remount,noexec", "cannot be changed"},
	} {
		r := e.run("mount", "-o", c.opts, e.mnt)
		if r.code == 0 {
			t.Fatalf("mount -o %s succeeded; want a refusal", c.opts)
		}
		if !strings.Contains(r.stderr+r.stdout, c.want) {
			t.Errorf("mount -o %s: message lacks %q: %s", c.opts, c.want, r)
		}
		// Nothing changed: still mounted read-write.
		if err := os.WriteFile(e.path("still-rw"), []byte(c.opts), 0o644); err != nil {
			t.Fatalf("after a refused mount -o %s: %v", c.opts, err)
		}
	}
	p.stop()
}

// TestMaxSizeQuota: with [filesystem] max_size, statfs reports that
// capacity, writes past it fail with ENOSPC (and nothing else), everything
// accepted before is kept (fsync succeeds, and it survives kill -9 and
// recovery from the store), and deleting data makes room again.
func TestMaxSizeQuota(t *testing.T) {
	const maxSize = 8 << 20
	e := newEnv(t)
	e.writeConfig("\n[filesystem]\nmax_size = \"8MiB\"\n")
	e.init()
	p := e.mount()

	var st syscall.Statfs_t
	if err := syscall.Statfs(e.mnt, &st); err != nil {
		t.Fatal(err)
	}
	if got := st.Blocks * uint64(st.Bsize); got != maxSize {
		t.Fatalf("statfs capacity %d, want max_size %d", got, maxSize)
	}
	if st.Bfree > st.Blocks || st.Bavail != st.Bfree || st.Bfree*uint64(st.Bsize) < maxSize-1<<20 {
		t.Fatalf("statfs of an empty filesystem: blocks %d free %d avail %d", st.Blocks, st.Bfree, st.Bavail)
	}

	f, err := os.OpenFile(e.path("fill"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var accepted []byte
	var werr error
	for i := 0; i < 64 && werr == nil; i++ {
		chunk := randBytes(t, 256<<10)
		var n int
		n, werr = f.Write(chunk)
		accepted = append(accepted, chunk[:n]...)
	}
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("writing 16 MiB into an 8 MiB filesystem: %v after %d bytes, want ENOSPC", werr, len(accepted))
	}
	t.Logf("ENOSPC after %d bytes accepted (max_size %d)", len(accepted), maxSize)
	if len(accepted) > maxSize || len(accepted) < maxSize-1<<20 {
		t.Fatalf("%d bytes accepted before ENOSPC, want close to and at most %d", len(accepted), maxSize)
	}
	// Full: other files cannot grow either, but metadata still works.
	if err := os.WriteFile(e.path("more"), randBytes(t, 1<<20), 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write to another file when full: %v, want ENOSPC", err)
	}
	if err := os.Mkdir(e.path("dir"), 0o755); err != nil {
		t.Fatalf("mkdir when full: %v", err)
	}
	// What was accepted is kept: fsync succeeds and the data survives.
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync after ENOSPC: %v", err)
	}
	f.Close()
	if err := syscall.Statfs(e.mnt, &st); err != nil {
		t.Fatal(err)
	}
	if st.Bfree*uint64(st.Bsize) > 1<<20 {
		t.Errorf("statfs free %d blocks when full", st.Bfree)
	}
	p.kill()
	if err := os.RemoveAll(e.cache); err != nil {
		t.Fatal(err)
	}
	p = e.mount()
	if got := readFile(t, e.path("fill")); !bytes.Equal(got, accepted) {
		t.Fatalf("after recovery: fill has %d bytes, want the %d accepted", len(got), len(accepted))
	}
	// Deleting gives the space back.
	if err := os.Remove(e.path("fill")); err != nil {
		t.Fatal(err)
	}
	data := randBytes(t, 4<<20)
	writeFile(t, e.path("after-delete"), data)
	fsyncFile(t, e.path("after-delete"))
	p.stop()
}
