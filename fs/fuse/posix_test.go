package fuse

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFstatAfterRenameOverOpen follows xfstests generic/035: a file and a
// directory held open while another one is renamed over them can still be
// fstat'ed, and report no links.
func TestFstatAfterRenameOverOpen(t *testing.T) {
	m := mount(t)
	for _, dir := range []bool{false, true} {
		renameOverOpen(t, m, dir)
	}
}

func renameOverOpen(t *testing.T, m *mounted, dir bool) {
	{
		src, dst := m.path("src"), m.path("dst")
		flags := os.O_RDWR | os.O_CREATE
		if dir {
			for _, p := range []string{src, dst} {
				if err := os.Mkdir(p, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			flags = unix.O_RDONLY | unix.O_DIRECTORY
		} else {
			for _, p := range []string{src, dst} {
				if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		fd, err := unix.Open(dst, flags, 0)
		if err != nil {
			t.Fatal(err)
		}
		// Closed before the unmount in t.Cleanup, even on failure.
		defer unix.Close(fd)
		var before unix.Stat_t
		if err := unix.Fstat(fd, &before); err != nil {
			t.Fatal(err)
		}
		if err := unix.Rename(src, dst); err != nil { // os.Rename refuses to replace a directory
			t.Fatalf("rename over (dir=%v): %v", dir, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatalf("fstat of the replaced %s (dir=%v): %v", dst, dir, err)
		}
		if st.Nlink != 0 {
			t.Errorf("dir=%v: nlink %d after being replaced, want 0", dir, st.Nlink)
		}
		if st.Ino != before.Ino || st.Mode != before.Mode {
			t.Errorf("dir=%v: fstat after replace: ino %d mode %#o, before ino %d mode %#o", dir, st.Ino, st.Mode, before.Ino, before.Mode)
		}
		if dir {
			// The fd can still be read: an empty listing, no error that
			// would surprise a caller holding it.
			var buf [4096]byte
			if _, err := unix.Getdents(fd, buf[:]); err != nil && err != unix.ENOENT {
				t.Errorf("getdents on the removed directory: %v", err)
			}
		}
		if err := os.Remove(dst); err != nil {
			t.Fatal(err)
		}
	}
}
