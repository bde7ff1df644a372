package fuse

import (
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"ebbfs.dev/ebbfs/internal/stats"
)

// timedFS records every FUSE request's count, failures, bytes and latency
// by operation into a stats.Ops, around go-fuse's node bridge: one hook
// point for every op. Operations it does not override (locks, ioctl, the
// rarer ones) pass through uncounted.
type timedFS struct {
	fuse.RawFileSystem
	ops *stats.Ops
	// One tally per op, looked up once.
	lookup, getattr, setattr, mknod, mkdir, unlink, rmdir, rename, link, symlink,
	readlink, access, getxattr, listxattr, setxattr, removexattr, create, open, read,
	lseek, release, write, flush, fsync, fallocate, opendir, readdir, releasedir,
	fsyncdir, statfs, copyFileRange *stats.Op
}

// FUSEOps are the operation names the mount records.
var FUSEOps = []string{"lookup", "getattr", "setattr", "mknod", "mkdir", "unlink", "rmdir", "rename", "link", "symlink",
	"readlink", "access", "getxattr", "listxattr", "setxattr", "removexattr", "create", "open", "read",
	"lseek", "release", "write", "flush", "fsync", "fallocate", "opendir", "readdir", "releasedir",
	"fsyncdir", "statfs", "copy_file_range"}

func newTimedFS(raw fuse.RawFileSystem, ops *stats.Ops) *timedFS {
	g := ops.Get
	return &timedFS{RawFileSystem: raw, ops: ops,
		lookup: g("lookup"), getattr: g("getattr"), setattr: g("setattr"), mknod: g("mknod"), mkdir: g("mkdir"),
		unlink: g("unlink"), rmdir: g("rmdir"), rename: g("rename"), link: g("link"), symlink: g("symlink"),
		readlink: g("readlink"), access: g("access"), getxattr: g("getxattr"), listxattr: g("listxattr"),
		setxattr: g("setxattr"), removexattr: g("removexattr"), create: g("create"), open: g("open"), read: g("read"),
		lseek: g("lseek"), release: g("release"), write: g("write"), flush: g("flush"), fsync: g("fsync"),
		fallocate: g("fallocate"), opendir: g("opendir"), readdir: g("readdir"), releasedir: g("releasedir"),
		fsyncdir: g("fsyncdir"), statfs: g("statfs"), copyFileRange: g("copy_file_range")}
}

// failed: an error other than "no such entry" (a negative lookup is an
// answer), "no such attribute", and EINTR: a call the caller's signal
// interrupted before it changed anything (interrupt.go), which the caller
// retries or gives up on (a Go program's runtime signals interrupt its
// writes that wait on the dirty limit, and Go retries them).
func failed(s fuse.Status) bool {
	return s != fuse.OK && s != fuse.ENOENT && s != fuse.ENOATTR && s != fuse.EINTR
}

func (t *timedFS) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.Lookup(c, h, name, out)
	t.lookup.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.GetAttr(c, in, out)
	t.getattr.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.SetAttr(c, in, out)
	t.setattr.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.Mknod(c, in, name, out)
	t.mknod.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.Mkdir(c, in, name, out)
	t.mkdir.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.Unlink(c, h, name)
	t.unlink.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.Rmdir(c, h, name)
	t.rmdir.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.Rename(c, in, oldName, newName)
	t.rename.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.Link(c, in, name, out)
	t.link.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) Symlink(c <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.Symlink(c, h, target, name, out)
	t.symlink.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) Readlink(c <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	s := time.Now()
	b, st := t.RawFileSystem.Readlink(c, h)
	t.readlink.Done(s, 0, failed(st))
	return b, st
}

func (t *timedFS) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.Access(c, in)
	t.access.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) GetXAttr(c <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	s := time.Now()
	n, st := t.RawFileSystem.GetXAttr(c, h, attr, dest)
	t.getxattr.Done(s, 0, failed(st) && st != fuse.ERANGE)
	return n, st
}

func (t *timedFS) ListXAttr(c <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	s := time.Now()
	n, st := t.RawFileSystem.ListXAttr(c, h, dest)
	t.listxattr.Done(s, 0, failed(st) && st != fuse.ERANGE)
	return n, st
}

func (t *timedFS) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.SetXAttr(c, in, attr, data)
	t.setxattr.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) RemoveXAttr(c <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.RemoveXAttr(c, h, attr)
	t.removexattr.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.Create(c, in, name, out)
	t.create.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.Open(c, in, out)
	t.open.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	s := time.Now()
	r, st := t.RawFileSystem.Read(c, in, buf)
	n := 0
	if st == fuse.OK && r != nil {
		n = r.Size()
	}
	t.read.Done(s, n, failed(st))
	return r, st
}

func (t *timedFS) Lseek(c <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.Lseek(c, in, out)
	t.lseek.Done(s, 0, failed(st) && st != fuse.Status(syscall.ENXIO))
	return st
}

func (t *timedFS) Release(c <-chan struct{}, in *fuse.ReleaseIn) {
	s := time.Now()
	t.RawFileSystem.Release(c, in)
	t.release.Done(s, 0, false)
}

func (t *timedFS) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	s := time.Now()
	n, st := t.RawFileSystem.Write(c, in, data)
	t.write.Done(s, int(n), failed(st))
	return n, st
}

func (t *timedFS) Writev(c <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	s := time.Now()
	n, st := t.RawFileSystem.Writev(c, in, data)
	if st == fuse.ENOSYS {
		return n, st // go-fuse falls back to Write, which counts it
	}
	t.write.Done(s, int(n), failed(st))
	return n, st
}

func (t *timedFS) CopyFileRange(c <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	s := time.Now()
	n, st := t.RawFileSystem.CopyFileRange(c, in)
	t.copyFileRange.Done(s, int(n), failed(st) && st != fuse.ENOSYS)
	return n, st
}

func (t *timedFS) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.Flush(c, in)
	t.flush.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.Fsync(c, in)
	t.fsync.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.Fallocate(c, in)
	t.fallocate.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.OpenDir(c, in, out)
	t.opendir.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.ReadDir(c, in, out)
	t.readdir.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.ReadDirPlus(c, in, out)
	t.readdir.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) ReleaseDir(in *fuse.ReleaseIn) {
	s := time.Now()
	t.RawFileSystem.ReleaseDir(in)
	t.releasedir.Done(s, 0, false)
}

func (t *timedFS) FsyncDir(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.FsyncDir(c, in)
	t.fsyncdir.Done(s, 0, failed(st))
	return st
}

func (t *timedFS) StatFs(c <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	s := time.Now()
	st := t.RawFileSystem.StatFs(c, h, out)
	t.statfs.Done(s, 0, failed(st))
	return st
}
