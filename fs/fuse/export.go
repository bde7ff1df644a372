package fuse

import (
	"context"
	"errors"
	"syscall"

	ebbfs "ebbfs.dev/ebbfs/fs"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// File handles and files without names.
//
// The mount uses the engine's inode numbers as FUSE node ids
// (fs.Options.ExternalNodeID) and tells the kernel it supports export
// operations (CAP_EXPORT_SUPPORT). A handle from name_to_handle_at(2), or
// one an NFS server hands out for a re-exported mount, then holds the
// inode number and its generation, both stable across remounts and
// writers: open_by_handle_at(2) of a handle the kernel no longer has
// cached becomes a LOOKUP of "." on that node id (LookupNode), and the
// reconnection of a directory's path a LOOKUP of ".." (LookupParent). A
// file deleted since (or one with no links left: unlinked while open, or
// an O_TMPFILE file) answers ESTALE, as on a local filesystem.

// LookupNode finds an inode by number alone (called on the root).
func (n *Node) LookupNode(ctx context.Context, id uint64, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	a, err := n.fsys.e.GetAttr(ctx, id)
	if errors.Is(err, ebbfs.ErrNotExist) || (err == nil && a.Nlink == 0) {
		return nil, syscall.ESTALE
	}
	if err != nil {
		return nil, n.fsys.toErrno(err, "lookup-node", id)
	}
	return n.newNode(ctx, a, out), 0
}

// LookupParent finds the directory holding n (a directory) and n's name
// in it.
func (n *Node) LookupParent(ctx context.Context, out *fuse.EntryOut) (*fs.Inode, string, syscall.Errno) {
	pino, name, err := n.fsys.e.ParentOf(ctx, n.ino())
	if errors.Is(err, ebbfs.ErrNotExist) || errors.Is(err, ebbfs.ErrNotDir) || (err == nil && pino == n.ino()) {
		return nil, "", syscall.ESTALE
	}
	if err != nil {
		return nil, "", n.fsys.toErrno(err, "lookup-parent", n.ino())
	}
	pa, err := n.fsys.e.GetAttr(ctx, pino)
	if err != nil {
		return nil, "", n.fsys.toErrno(err, "lookup-parent", pino)
	}
	if pino == ebbfs.RootIno {
		fillAttr(&out.Attr, pa)
		return n.fsys.root.EmbeddedInode(), name, 0
	}
	return n.newNode(ctx, pa, out), name, 0
}

// Tmpfile makes a file with no name in directory n, open (open(2) with
// O_TMPFILE). linkat(2) gives it a name; otherwise its last close deletes
// it, or the next start after a crash.
func (n *Node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ctx = keep(ctx) // the file exists from the engine's CreateTmp on
	mode = ebbfs.ModeRegular | mode&0o7777
	uid, gid, mode, errno := n.owner(ctx, mode)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	a, err := n.fsys.e.CreateTmp(ctx, n.ino(), mode, uid, gid)
	if err != nil {
		return nil, nil, 0, n.fsys.toErrno(err, "tmpfile", n.ino())
	}
	return n.newNode(ctx, a, out), &handle{flags: flags}, openFlags, 0
}
