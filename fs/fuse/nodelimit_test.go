package fuse

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestNodeLimitMakesTheKernelForget creates ten times more files than the
// mount's node bound: the kernel is made to forget the oldest until the
// server holds at most the bound, while every file stays reachable, the
// directory lists them all, and a file held open all along and a
// directory stay known to the kernel (their dentries are never dropped).
func TestNodeLimitMakesTheKernelForget(t *testing.T) {
	const max, files = 300, 3000
	m := mountWith(t, func(o *MountOptions) { o.MaxNodes = max })
	l := m.f.limit
	if err := os.Mkdir(m.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	held, err := os.Create(m.path("d", "held"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := os.Mkdir(m.path("d", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range files {
		if err := os.WriteFile(m.path("d", fmt.Sprintf("f%05d", i)), []byte{byte(i)}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for l.live.Load() > max && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if live := l.live.Load(); live > max {
		t.Fatalf("server holds %d nodes after creating %d files, bound %d (%d invalidations sent)", live, files, max, l.invalidated.Load())
	}
	if l.invalidated.Load() == 0 {
		t.Fatalf("no invalidation sent")
	}
	t.Logf("%d nodes held, %d invalidations sent", l.live.Load(), l.invalidated.Load())
	// The oldest names, but an open file and a directory: still held, and
	// the open file's name is not "(deleted)".
	if link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", held.Fd())); err != nil || link != m.path("d", "held") {
		t.Errorf("the open file's /proc link reads %q (%v)", link, err)
	}
	d := m.f.root.GetChild("d")
	for _, name := range []string{"held", "sub"} {
		if ch := d.GetChild(name); ch == nil || !ch.Operations().(*Node).counted.Load() {
			t.Errorf("%s was forgotten", name)
		}
	}

	if _, err := held.WriteAt([]byte("still here"), 0); err != nil {
		t.Fatal(err)
	}
	if err := held.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, m.path("d", "held")); !bytes.Equal(got, []byte("still here")) {
		t.Fatalf("held file reads %q", got)
	}
	for i := range files {
		b, err := os.ReadFile(m.path("d", fmt.Sprintf("f%05d", i)))
		if err != nil || len(b) != 1 || b[0] != byte(i) {
			t.Fatalf("f%05d: %v %v", i, b, err)
		}
	}
	ents, err := os.ReadDir(m.path("d"))
	if err != nil || len(ents) != files+2 {
		t.Fatalf("readdir: %d entries, %v; want %d", len(ents), err, files+2)
	}
}
