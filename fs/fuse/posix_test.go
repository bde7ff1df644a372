package fuse

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"

	ebbfs "ebbfs.dev/ebbfs/fs"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
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

// TestFallocateClearsSetID follows xfstests generic/683 and 684: fallocate
// (allocate and punch hole) by a user without CAP_FSETID drops set-user-ID,
// and set-group-ID when group-execute is set or the user is not in the
// file's group, as a write does (privs.go).
func TestFallocateClearsSetID(t *testing.T) {
	m := mount(t)
	type op struct {
		name string
		mode uint32
		off  int64
	}
	ops := []op{
		{"allocate", 0, 0},
		{"keep-size allocate", unix.FALLOC_FL_KEEP_SIZE, 1 << 20},
		{"punch hole", unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE, 0},
	}
	for _, o := range ops {
		for _, c := range []struct{ mode, want uint32 }{
			// The user (65534) is not in the file's group (0): set-group-ID
			// goes with or without group-execute.
			{0o6666, 0o0666},
			{0o6676, 0o0676},
			{0o6766, 0o0766},
			{0o6777, 0o0777},
		} {
			p := m.path("setid")
			if err := os.WriteFile(p, make([]byte, 8192), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, os.FileMode(c.mode&0o777)|os.ModeSetuid|os.ModeSetgid); err != nil {
				t.Fatal(err)
			}
			err := asUser(t, 65534, 65534, func() error {
				fd, err := unix.Open(p, unix.O_RDWR, 0)
				if err != nil {
					return err
				}
				defer unix.Close(fd)
				return unix.Fallocate(fd, o.mode, o.off, 4096)
			})
			if err != nil {
				t.Fatalf("%s as an unprivileged user: %v", o.name, err)
			}
			var st unix.Stat_t
			if err := unix.Stat(p, &st); err != nil {
				t.Fatal(err)
			}
			if got := st.Mode & 0o7777; got != c.want {
				t.Errorf("%s on a %#o file: mode %#o, want %#o", o.name, c.mode, got, c.want)
			}
			// Root (CAP_FSETID) keeps the bits.
			if err := os.Chmod(p, os.FileMode(c.mode&0o777)|os.ModeSetuid|os.ModeSetgid); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			err = unix.Fallocate(int(f.Fd()), o.mode, o.off, 4096)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Stat(p, &st); err != nil {
				t.Fatal(err)
			}
			if got := st.Mode & 0o7777; got != c.mode {
				t.Errorf("%s by root on a %#o file: mode %#o, want it kept", o.name, c.mode, got)
			}
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestAllocateDropsSetIDItself calls the node operations directly, with no
// kernel in between (kernels before 6.x send no SETATTR of their own for
// fallocate): the rule of TestFallocateClearsSetID is the server's.
func TestAllocateDropsSetIDItself(t *testing.T) {
	e := openEngine(t)
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	root := &Node{fsys: &fsys{e: e, log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	fs.NewNodeFS(root, &fs.Options{RootStableAttr: &fs.StableAttr{Ino: ebbfs.RootIno}})
	asRoot := &fuse.Context{Cancel: make(chan struct{})}
	user := &fuse.Context{Caller: fuse.Caller{Owner: fuse.Owner{Uid: 65534, Gid: 65534}}, Cancel: make(chan struct{})}
	for i, mode := range []uint32{0, unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE} {
		var out fuse.EntryOut
		ch, fh, _, errno := root.Create(asRoot, fmt.Sprintf("f%d", i), unix.O_RDWR, 0o6777, &out)
		if errno != 0 {
			t.Fatal(errno)
		}
		n := ch.Operations().(*Node)
		var ao fuse.AttrOut
		in := &fuse.SetAttrIn{SetAttrInCommon: fuse.SetAttrInCommon{Valid: fuse.FATTR_MODE, Mode: 0o6777}}
		if errno := n.Setattr(asRoot, fh, in, &ao); errno != 0 || ao.Mode&0o7777 != 0o6777 {
			t.Fatalf("chmod 6777: %v, mode %#o", errno, ao.Mode)
		}
		if errno := n.Allocate(user, fh, 0, 4096, mode); errno != 0 {
			t.Fatalf("fallocate mode %#x: %v", mode, errno)
		}
		a, err := e.GetAttr(context.Background(), n.ino())
		if err != nil {
			t.Fatal(err)
		}
		if a.Mode&0o7777 != 0o777 {
			t.Errorf("fallocate mode %#x by an unprivileged caller: mode %#o, want 0777", mode, a.Mode&0o7777)
		}
		n.Release(asRoot, fh)
	}
}

// TestSetgidClearedForOutsiders: a write or a truncate by a caller not in
// the file's group clears set-group-ID even without group-execute (the
// kernel's FUSE client leaves that to the server); one in the group keeps
// it, as on ext4.
func TestSetgidClearedForOutsiders(t *testing.T) {
	m := mount(t)
	if err := os.Chmod(m.dir, 0o777); err != nil {
		t.Fatal(err)
	}
	ops := map[string]func(p string) error{
		"write":    func(p string) error { return appendTo(p, "x") },
		"truncate": func(p string) error { return unix.Truncate(p, 1) },
	}
	for name, op := range ops {
		for _, c := range []struct {
			gid  uint32
			want uint32
		}{{0, 0o2666}, {65534, 0o666}} { // the file's group is 0
			p := m.path("f")
			if err := os.WriteFile(p, []byte("data"), 0o666); err != nil {
				t.Fatal(err)
			}
			if err := unix.Chmod(p, 0o2666); err != nil {
				t.Fatal(err)
			}
			if err := asUser(t, 65534, c.gid, func() error { return op(p) }); err != nil {
				t.Fatalf("%s as 65534:%d: %v", name, c.gid, err)
			}
			if got := statOf(t, p).Mode & 0o7777; got != c.want {
				t.Errorf("%s as 65534:%d on a 2666 file: mode %o, want %o", name, c.gid, got, c.want)
			}
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
	}
}
