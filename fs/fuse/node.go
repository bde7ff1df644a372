package fuse

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	ebbfs "ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/clock"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// blockSize is reported as st_blksize. It stays at the page size: the kernel
// derives the inode's block bits from it.
const blockSize = 4096

// fsys is the state shared by every node of one mount.
type fsys struct {
	e    *ebbfs.Engine
	log  *slog.Logger
	root *Node // the mount's root (notify.go walks the kernel's view from it)
	// notify sends the cache invalidations of a replica's followed
	// journals and of a writer's restore (notify.go).
	notify *notifier
	// limit bounds the nodes the kernel holds (nodelimit.go); nil: none.
	limit *nodeLimit
	// clk times how long a write has waited (patient.go); nil: the
	// system clock.
	clk clock.Clock
}

// Node is one inode of the mounted filesystem. The inode number and type
// live in the embedded fs.Inode's StableAttr; everything else is asked of
// the engine.
type Node struct {
	fs.Inode

	fsys *fsys

	// mode is the last mode the engine reported for this inode (0 when not
	// yet seen). It only serves as a hint that lets writes skip the
	// set-user-ID check when the file cannot have such bits.
	mode atomic.Uint32

	// wmu serialises writes that must read the file's attributes first
	// (O_APPEND writes and privilege clearing) against each other.
	wmu sync.Mutex

	// last holds the attributes last sent to the kernel, for an inode the
	// engine has deleted while the kernel still holds it (see Getattr).
	lastMu sync.Mutex
	last   ebbfs.Attr

	// counted: the kernel holds this node (nodeLimit counts it); queued:
	// it is in nodeLimit's queue.
	counted, queued atomic.Bool
}

// OnForget is the kernel's FORGET of the node (go-fuse drops it).
func (n *Node) OnForget() {
	if l := n.fsys.limit; l != nil {
		l.forgotten(n)
	}
}

// remember records a as the attributes last sent for n.
func (n *Node) remember(a ebbfs.Attr) {
	n.mode.Store(a.Mode)
	n.lastMu.Lock()
	n.last = a
	n.lastMu.Unlock()
}

func (n *Node) ino() uint64 { return n.StableAttr().Ino }

// newNode builds the go-fuse inode for an engine inode and fills out with
// its attributes. If the kernel already knows the inode (a hard link, or a
// lookup racing another), go-fuse returns the existing one.
func (n *Node) newNode(ctx context.Context, a ebbfs.Attr, out *fuse.EntryOut) *fs.Inode {
	child := &Node{fsys: n.fsys}
	child.remember(a)
	ch := n.NewInode(ctx, child, fs.StableAttr{
		Mode: a.Mode & syscall.S_IFMT,
		Ino:  a.Ino,
		Gen:  a.Gen,
	})
	nd, ok := ch.Operations().(*Node)
	if ok && nd != child {
		nd.remember(a)
	}
	if l := n.fsys.limit; ok && l != nil {
		l.added(nd)
	}
	fillAttr(&out.Attr, a)
	return ch
}

// noteAttr remembers a and converts it for the kernel.
func (n *Node) noteAttr(out *fuse.Attr, a ebbfs.Attr) {
	n.remember(a)
	fillAttr(out, a)
}

// fillAttr converts engine attributes to the kernel's form, faithfully: nlink,
// blocks and all three times come from the engine unchanged.
func fillAttr(out *fuse.Attr, a ebbfs.Attr) {
	out.Ino = a.Ino
	out.Size = a.Size
	out.Blocks = a.Blocks
	out.Mode = a.Mode
	out.Nlink = a.Nlink
	out.Uid = a.Uid
	out.Gid = a.Gid
	out.Rdev = a.Rdev
	out.Blksize = blockSize
	out.Atime, out.Atimensec = splitNs(a.Atime)
	out.Mtime, out.Mtimensec = splitNs(a.Mtime)
	out.Ctime, out.Ctimensec = splitNs(a.Ctime)
}

// splitNs splits nanoseconds since the epoch into seconds (two's complement
// for times before 1970, as the kernel reads them) and a non-negative
// nanosecond part.
func splitNs(ns int64) (uint64, uint32) {
	sec := ns / 1e9
	rem := ns % 1e9
	if rem < 0 {
		sec--
		rem += 1e9
	}
	return uint64(sec), uint32(rem)
}

// joinNs is the inverse of splitNs for times coming from the kernel.
func joinNs(sec uint64, nsec uint32) int64 {
	return time.Unix(int64(sec), int64(nsec)).UnixNano()
}

// caller returns the uid and gid of the process that made the request. A
// request without caller information is treated as coming from root, as the
// kernel only omits it for its own requests.
func caller(ctx context.Context) (uid, gid uint32) {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Uid, c.Gid
	}
	return 0, 0
}

func (n *Node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	a, err := n.fsys.e.Lookup(ctx, n.ino(), name)
	if err != nil {
		return nil, n.fsys.toErrno(err, "lookup", n.ino())
	}
	return n.newNode(ctx, a, out), 0
}

// Getattr reports the engine's attributes. The kernel asks for an inode it
// still holds (an open file or directory, a working directory), and one
// can be gone from the engine: a directory removed, or replaced by a
// rename, while open (xfstests generic/035). As on a local filesystem the
// holder's fstat still succeeds: the attributes last seen, with no links
// left.
func (n *Node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	a, err := n.fsys.e.GetAttr(ctx, n.ino())
	if errors.Is(err, ebbfs.ErrNotExist) && n.ino() != ebbfs.RootIno {
		n.lastMu.Lock()
		a = n.last
		n.lastMu.Unlock()
		if a.Ino == n.ino() {
			a.Nlink = 0
			fillAttr(&out.Attr, a)
			return 0
		}
	}
	if err != nil {
		return n.fsys.toErrno(err, "getattr", n.ino())
	}
	n.noteAttr(&out.Attr, a)
	return 0
}

func (n *Node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if f != nil && n.stale(f) {
		// ftruncate and the like through a handle of the state a
		// checkpoint restore replaced (file_ops.go).
		return syscall.ESTALE
	}
	ctx = keep(ctx) // a truncate must not stop half way (interrupt.go)
	var sa ebbfs.SetAttr
	if m, ok := in.GetMode(); ok {
		sa.Valid |= ebbfs.SetMode
		sa.Mode = m & 0o7777
	}
	if uid, ok := in.GetUID(); ok {
		sa.Valid |= ebbfs.SetUid
		sa.Uid = uid
	}
	if gid, ok := in.GetGID(); ok {
		sa.Valid |= ebbfs.SetGid
		sa.Gid = gid
	}
	if size, ok := in.GetSize(); ok {
		if size > ebbfs.MaxFileSize {
			return syscall.EFBIG
		}
		sa.Valid |= ebbfs.SetSize
		sa.Size = size
	}
	if in.Valid&fuse.FATTR_ATIME_NOW != 0 {
		sa.Valid |= ebbfs.SetAtimeNow
	} else if in.Valid&fuse.FATTR_ATIME != 0 {
		sa.Valid |= ebbfs.SetAtime
		sa.Atime = joinNs(in.Atime, in.Atimensec)
	}
	if in.Valid&fuse.FATTR_MTIME_NOW != 0 {
		sa.Valid |= ebbfs.SetMtimeNow
	} else if in.Valid&fuse.FATTR_MTIME != 0 {
		sa.Valid |= ebbfs.SetMtime
		sa.Mtime = joinNs(in.Mtime, in.Mtimensec)
	}
	if in.Valid&fuse.FATTR_CTIME != 0 {
		sa.Valid |= ebbfs.SetCtime
	}

	// chown and truncate clear set-ID bits by Linux's rules (privs.go);
	// the kernel sends only part of that.
	if errno := n.setattrKill(ctx, &sa); errno != 0 {
		return errno
	}

	if sa.Valid == 0 {
		return n.Getattr(ctx, f, out)
	}
	a, err := n.fsys.e.SetAttr(ctx, n.ino(), sa)
	if err != nil {
		return n.fsys.toErrno(err, "setattr", n.ino())
	}
	n.noteAttr(&out.Attr, a)
	return 0
}

func (n *Node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	st, err := n.fsys.e.StatFS(ctx)
	if err != nil {
		return n.fsys.toErrno(err, "statfs", n.ino())
	}
	bs := st.BlockSize
	if bs == 0 {
		bs = blockSize
	}
	out.Bsize = bs
	out.Frsize = bs
	out.Blocks = st.Blocks
	out.Bfree = st.BlocksFree
	out.Bavail = st.BlocksFree
	out.Files = st.Files
	out.Ffree = st.FilesFree
	out.NameLen = st.NameLen
	if out.NameLen == 0 {
		out.NameLen = ebbfs.MaxNameLen
	}
	return 0
}
