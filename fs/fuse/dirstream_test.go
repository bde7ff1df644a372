package fuse

import (
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// dirent is one getdents64 record.
type dirent struct {
	name string
	off  int64
}

// getdents reads one getdents64 buffer of bufSize bytes from fd; nil at
// the end.
func getdents(t *testing.T, fd, bufSize int) []dirent {
	t.Helper()
	buf := make([]byte, bufSize)
	n, err := unix.Getdents(fd, buf)
	if err != nil {
		t.Fatal(err)
	}
	var out []dirent
	for p := 0; p < n; {
		off := int64(binary.NativeEndian.Uint64(buf[p+8:]))
		reclen := int(binary.NativeEndian.Uint16(buf[p+16:]))
		name := buf[p+19 : p+reclen]
		if i := slices.Index(name, 0); i >= 0 {
			name = name[:i]
		}
		out = append(out, dirent{string(name), off})
		p += reclen
	}
	return out
}

// allDirents reads fd to its end.
func allDirents(t *testing.T, fd int) []dirent {
	t.Helper()
	var out []dirent
	for {
		batch := getdents(t, fd, 4096)
		if batch == nil {
			return out
		}
		out = append(out, batch...)
	}
}

func direntNames(ds []dirent) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.name
	}
	return out
}

// TestReaddirStreamsInPages lists a directory of several engine pages:
// every name once, in order, across pages; entries created and removed in
// the middle of a listing neither skip nor repeat any other entry; a seek
// to an offset given by the listing (also one in an earlier page, and 0)
// continues from there.
func TestReaddirStreamsInPages(t *testing.T) {
	m := mount(t)
	d := m.path("d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	const files = 3*readdirPage + 7
	want := []string{".", ".."}
	for i := range files {
		name := fmt.Sprintf("f%05d", i)
		want = append(want, name)
		if err := os.WriteFile(m.path("d", name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	all := allDirents(t, fd)
	if got := direntNames(all); !slices.Equal(got, want) {
		t.Fatalf("listing: %d names, want %d in name order (first %v)", len(got), len(want), got[:min(len(got), 5)])
	}

	// Seek back into an earlier page (the stream lists again from the
	// start) and to 0.
	k := readdirPage + 100
	if _, err := unix.Seek(fd, all[k].off, 0); err != nil {
		t.Fatal(err)
	}
	if got := direntNames(allDirents(t, fd)); !slices.Equal(got, want[k+1:]) {
		t.Fatalf("after a seek to entry %d: %d names, want %d", k, len(got), len(want)-k-1)
	}
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		t.Fatal(err)
	}
	if got := direntNames(allDirents(t, fd)); !slices.Equal(got, want) {
		t.Fatalf("after a seek to 0: %d names, want %d", len(got), len(want))
	}

	// Changes in the middle of a listing: after the first buffer, remove
	// every third file of the last two pages and add names that sort
	// before and after the position.
	fd2, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd2)
	listed := getdents(t, fd2, 4096)
	removed := map[string]bool{}
	for i := files - 2*readdirPage; i < files; i += 3 {
		name := fmt.Sprintf("f%05d", i)
		removed[name] = true
		if err := os.Remove(m.path("d", name)); err != nil {
			t.Fatal(err)
		}
	}
	added := map[string]bool{"a-before": true, "f00000-x": true, "z-after": true}
	for name := range added {
		if err := os.WriteFile(m.path("d", name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	listed = append(listed, allDirents(t, fd2)...)
	count := map[string]int{}
	for _, de := range listed {
		count[de.name]++
		if count[de.name] > 1 {
			t.Fatalf("%q listed twice", de.name)
		}
	}
	for _, name := range want {
		if !removed[name] && count[name] != 1 {
			t.Errorf("%q, untouched, listed %d times", name, count[name])
		}
	}
	for name := range count {
		if !slices.Contains(want, name) && !added[name] {
			t.Errorf("%q listed but never created", name)
		}
	}
	if !(count["z-after"] == 1) {
		t.Errorf("z-after, created past the listing's position, not listed")
	}
}
