package tests

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestTmpfileLinkSurvivesRemount: open(O_TMPFILE), write, linkat into the
// tree, and the file reads back after a remount.
func TestTmpfileLinkSurvivesRemount(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	p := e.mount()
	if err := os.Mkdir(e.path("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	data := randBytes(t, 1<<20)
	fd, err := unix.Open(e.path("dir"), unix.O_TMPFILE|unix.O_RDWR, 0o640)
	if err != nil {
		t.Fatalf("open O_TMPFILE: %v", err)
	}
	f := os.NewFile(uintptr(fd), "tmpfile")
	defer f.Close() // before the unmount, even if the test fails
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(e.path("dir")); len(ents) != 0 {
		t.Fatalf("the directory lists %v before the link", ents)
	}
	if err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, e.path("dir/linked"), unix.AT_SYMLINK_FOLLOW); err != nil {
		t.Fatalf("linkat: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	p.stop()
	p = e.mount()
	if got := readFile(t, e.path("dir/linked")); !bytes.Equal(got, data) {
		t.Fatalf("after the remount: %d bytes, want the %d written", len(got), len(data))
	}
	var st unix.Stat_t
	if err := unix.Stat(e.path("dir/linked"), &st); err != nil || st.Nlink != 1 || st.Mode != unix.S_IFREG|0o640 {
		t.Fatalf("stat after the remount: %+v, %v", st, err)
	}
	p.stop()
}

// TestTmpfileCrashLeavesNothing: an O_TMPFILE file written and fsynced,
// never linked, and the writer killed: after a restart it is gone, fsck
// is clean and reclamation gives its bytes back (the store's segments
// return to the live bytes of what was linked).
func TestTmpfileCrashLeavesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withEnvVars("EBBFS_TEST_TIME_SCALE=200"))
	e.init()
	p := e.mount()
	kept := randBytes(t, 256<<10)
	writeFile(t, e.path("kept"), kept)
	fsyncFile(t, e.path("kept"))
	fd, err := unix.Open(e.mnt, unix.O_TMPFILE|unix.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("open O_TMPFILE: %v", err)
	}
	f := os.NewFile(uintptr(fd), "tmpfile")
	// 4 MiB: more than the extents an unlink deletes inline, so the
	// restart's deletion goes through a tombstone and the cleaner.
	if _, err := f.Write(randBytes(t, 4<<20)); err != nil {
		f.Close()
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	before := crashSpaceOf(t, e)
	if before.LiveBytes < 4<<20 {
		f.Close()
		t.Fatalf("live bytes %d before the crash: the unnamed file's data is not counted", before.LiveBytes)
	}
	p.kill()
	f.Close() // on the dead mount: its error does not matter
	e.forceUnmount()

	p = e.mount()
	if got := readFile(t, e.path("kept")); !bytes.Equal(got, kept) {
		t.Fatal("the linked file changed across the crash")
	}
	ents, err := os.ReadDir(e.mnt)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ents {
		if d.Name() != "kept" && d.Name() != ".nbd" {
			t.Fatalf("root after the crash lists %q", d.Name())
		}
	}
	crashReclaimGarbage(t, e)
	after := crashSpaceOf(t, e)
	if after.LiveBytes >= 1<<20 {
		t.Fatalf("live bytes %d after the restart: the unnamed file's 4 MiB are still counted", after.LiveBytes)
	}
	p.stop()
	if r := e.mustEbbfs("fsck", "--verify-data"); !strings.Contains(r.stdout, "consistent") {
		t.Fatalf("fsck: %s", r.stdout)
	}
}
