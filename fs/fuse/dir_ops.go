package fuse

import (
	"context"
	"syscall"

	ebbfs "ebbfs.dev/ebbfs/fs"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// renameWhiteout is RENAME_WHITEOUT, which ebbfs does not support (it only
// serves overlayfs upper layers).
const renameWhiteout = 4

// owner decides the owner of a new inode created in directory n by the
// caller, and adjusts its mode, following Linux (inode_init_owner): the uid
// is the caller's; the gid is the caller's unless n is set-group-ID, in
// which case it is n's gid and a new directory inherits the set-group-ID
// bit. (Stripping set-group-ID from a new file whose group the caller is not
// in is done by the kernel before the request arrives.)
func (n *Node) owner(ctx context.Context, mode uint32) (uid, gid, outMode uint32, errno syscall.Errno) {
	uid, gid = caller(ctx)
	if hint := n.mode.Load(); hint != 0 && hint&ebbfs.ModeSetgid == 0 {
		return uid, gid, mode, 0
	}
	pa, err := n.fsys.e.GetAttr(ctx, n.ino())
	if err != nil {
		return 0, 0, 0, n.fsys.toErrno(err, "getattr", n.ino())
	}
	n.remember(pa)
	if pa.Mode&ebbfs.ModeSetgid != 0 {
		gid = pa.Gid
		if mode&ebbfs.ModeType == ebbfs.ModeDir {
			mode |= ebbfs.ModeSetgid
		}
	}
	return uid, gid, mode, 0
}

func (n *Node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = keep(ctx)
	mode = ebbfs.ModeDir | mode&0o7777
	uid, gid, mode, errno := n.owner(ctx, mode)
	if errno != 0 {
		return nil, errno
	}
	a, err := n.fsys.e.Mkdir(ctx, n.ino(), name, mode, uid, gid)
	if err != nil {
		return nil, n.fsys.toErrno(err, "mkdir", n.ino())
	}
	return n.newNode(ctx, a, out), 0
}

func (n *Node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = keep(ctx)
	typ := mode & ebbfs.ModeType
	switch typ {
	case 0, ebbfs.ModeRegular:
		typ = ebbfs.ModeRegular
		dev = 0
	case ebbfs.ModeFIFO, ebbfs.ModeSocket:
		dev = 0
	case ebbfs.ModeChar, ebbfs.ModeBlock:
	default:
		// Directories come through Mkdir and symlinks through Symlink.
		return nil, syscall.EINVAL
	}
	mode = typ | mode&0o7777
	uid, gid, mode, errno := n.owner(ctx, mode)
	if errno != 0 {
		return nil, errno
	}
	var a ebbfs.Attr
	var err error
	if typ == ebbfs.ModeRegular {
		a, err = n.fsys.e.Create(ctx, n.ino(), name, mode, uid, gid)
	} else {
		a, err = n.fsys.e.Mknod(ctx, n.ino(), name, mode, dev, uid, gid)
	}
	if err != nil {
		return nil, n.fsys.toErrno(err, "mknod", n.ino())
	}
	return n.newNode(ctx, a, out), 0
}

func (n *Node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = keep(ctx)
	uid, gid, _, errno := n.owner(ctx, ebbfs.ModeSymlink|0o777)
	if errno != 0 {
		return nil, errno
	}
	a, err := n.fsys.e.Symlink(ctx, n.ino(), name, target, uid, gid)
	if err != nil {
		return nil, n.fsys.toErrno(err, "symlink", n.ino())
	}
	return n.newNode(ctx, a, out), 0
}

func (n *Node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	t, err := n.fsys.e.Readlink(ctx, n.ino())
	if err != nil {
		return nil, n.fsys.toErrno(err, "readlink", n.ino())
	}
	return []byte(t), 0
}

func (n *Node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = keep(ctx)
	t, ok := target.(*Node)
	if !ok {
		return nil, syscall.EXDEV
	}
	a, err := n.fsys.e.Link(ctx, t.ino(), n.ino(), name)
	if err != nil {
		return nil, n.fsys.toErrno(err, "link", t.ino())
	}
	return n.newNode(ctx, a, out), 0
}

func (n *Node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.fsys.toErrno(n.fsys.e.Unlink(keep(ctx), n.ino(), name), "unlink", n.ino())
}

func (n *Node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.fsys.toErrno(n.fsys.e.Rmdir(keep(ctx), n.ino(), name), "rmdir", n.ino())
}

func (n *Node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	ctx = keep(ctx)
	np, ok := newParent.(*Node)
	if !ok {
		return syscall.EXDEV
	}
	const known = ebbfs.RenameNoReplace | ebbfs.RenameExchange
	if flags&renameWhiteout != 0 || flags&^known != 0 || flags == known {
		return syscall.EINVAL
	}
	err := n.fsys.e.Rename(ctx, n.ino(), name, np.ino(), newName, flags)
	return n.fsys.toErrno(err, "rename", n.ino())
}

// readdirPage is how many entries one engine call lists: a directory is
// streamed to the kernel page by page, never held whole in memory.
const readdirPage = 512

// Readdir returns a stream of the directory: "." and "..", then the
// entries in name order, read from the engine a page at a time (see
// dirStream). readdirplus then looks every other entry up through Lookup.
func (n *Node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	// One call now: a missing or non-directory inode fails the opendir's
	// first readdir rather than a later page.
	first, err := n.fsys.e.ReadDirPage(ctx, n.ino(), "", readdirPage)
	if err != nil {
		return nil, n.fsys.toErrno(err, "readdir", n.ino())
	}
	parentIno := n.ino()
	if _, p := n.Parent(); p != nil {
		parentIno = p.StableAttr().Ino
	}
	s := &dirStream{fsys: n.fsys, ino: n.ino(), parent: parentIno}
	s.rewind()
	s.fill(first)
	return s, 0
}
