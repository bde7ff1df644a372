package fuse

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"

	ebbfs "ebbfs.dev/ebbfs/fs"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// TestInterruptedCallsRunToTheirEnd calls the node operations with a
// request context that is already cancelled, as go-fuse leaves it after a
// FUSE_INTERRUPT: durability calls and changes must still run to their end
// and report success (never EINTR for something done), and the barrier
// must really have run.
func TestInterruptedCallsRunToTheirEnd(t *testing.T) {
	e := openEngine(t)
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	root := &Node{fsys: &fsys{e: e, log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	fs.NewNodeFS(root, &fs.Options{RootStableAttr: &fs.StableAttr{Ino: ebbfs.RootIno}})
	cancel := make(chan struct{})
	close(cancel)
	ctx := &fuse.Context{Cancel: cancel} // interrupted: Done() is closed
	if ctx.Err() == nil {
		t.Fatal("context not cancelled")
	}

	var out fuse.EntryOut
	ch, fh, _, errno := root.Create(ctx, "f", unix.O_RDWR, 0o644, &out)
	if errno != 0 {
		t.Fatalf("create: %v", errno)
	}
	n := ch.Operations().(*Node)
	data := bytes.Repeat([]byte("interrupt"), 10000)
	if nw, errno := n.Write(ctx, fh, data, 0); errno != 0 || int(nw) != len(data) {
		t.Fatalf("write: %d, %v", nw, errno)
	}
	before := e.DB().Pending()
	for i := 0; i < 20; i++ { // lockFlush's select is random: try it often
		if errno := n.Fsync(ctx, fh, 0); errno != 0 {
			t.Fatalf("fsync %d with an interrupted context: %v, want success", i, errno)
		}
	}
	if p := e.DB().Pending(); p != 0 {
		t.Fatalf("after fsync %d batches are outside any journal (%d before)", p, before)
	}
	in := &fuse.SetAttrIn{SetAttrInCommon: fuse.SetAttrInCommon{Valid: fuse.FATTR_SIZE, Size: 5}}
	var ao fuse.AttrOut
	if errno := n.Setattr(ctx, fh, in, &ao); errno != 0 || ao.Size != 5 {
		t.Fatalf("truncate: %v, size %d", errno, ao.Size)
	}
	if errno := n.Allocate(ctx, fh, 0, 1<<20, 0); errno != 0 {
		t.Fatalf("fallocate: %v", errno)
	}
	if errno := n.Allocate(ctx, fh, 0, 4096, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE); errno != 0 {
		t.Fatalf("punch: %v", errno)
	}
	if _, errno := root.Mkdir(ctx, "d", 0o755, &out); errno != 0 {
		t.Fatalf("mkdir: %v", errno)
	}
	if errno := root.Rename(ctx, "f", root.EmbeddedInode().Operations().(*Node), "g", 0); errno != 0 {
		t.Fatalf("rename: %v", errno)
	}
	if errno := n.Setxattr(ctx, "user.k", []byte("v"), 0); errno != 0 {
		t.Fatalf("setxattr: %v", errno)
	}
	if errno := root.Rmdir(ctx, "d"); errno != 0 {
		t.Fatalf("rmdir: %v", errno)
	}
	if errno := root.Unlink(ctx, "g"); errno != 0 {
		t.Fatalf("unlink: %v", errno)
	}
	if errno := root.Fsync(ctx, nil, 0); errno != 0 {
		t.Fatalf("fsyncdir: %v", errno)
	}
	n.Release(ctx, fh)
	if _, err := e.Lookup(context.Background(), ebbfs.RootIno, "g"); err == nil {
		t.Fatal("g still exists after unlink")
	}
}
