package fs

import (
	"context"
	"strings"

	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
)

// MaxLinks is the largest link count of a non-directory.
const MaxLinks = 65000

// MaxSymlinkLen is the longest symlink target.
const MaxSymlinkLen = 4095

func checkName(name string) error {
	switch {
	case name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00"):
		return ErrInvalid
	case len(name) > MaxNameLen:
		return ErrNameTooLong
	}
	return nil
}

// txn is one namespace transaction: a batch and the inodes it pinned.
// Caller holds e.ns for its whole life.
type txn struct {
	e    *Engine
	b    *lsm.Batch
	held []*inode
	now  int64
}

// begin starts a transaction; it holds ptrMu until finish, since deleting
// an inode deletes pointers. Caller holds e.ns.
func (e *Engine) begin() *txn {
	e.ptrMu.Lock()
	return &txn{e: e, b: e.db.NewBatch(), now: e.now()}
}

func (t *txn) inode(ino uint64) (*inode, error) {
	n, err := t.e.acquireLocked(ino)
	if err != nil {
		return nil, err
	}
	t.held = append(t.held, n)
	return n, nil
}

func (t *txn) dir(ino uint64) (*inode, error) {
	n, err := t.inode(ino)
	if err != nil {
		return nil, err
	}
	n.mu.RLock()
	isDir := n.attr.IsDir()
	n.mu.RUnlock()
	if !isDir {
		return nil, ErrNotDir
	}
	return n, nil
}

// modify changes n's attributes and writes its record into the batch.
func (t *txn) modify(n *inode, f func(a *Attr)) {
	n.mu.Lock()
	f(&n.attr)
	t.e.putInode(t.b, n)
	n.mu.Unlock()
}

func (t *txn) touch(n *inode) {
	t.modify(n, func(a *Attr) { a.Mtime, a.Ctime = t.now, t.now })
}

// finish commits the batch and unpins the inodes.
func (t *txn) finish(err error) error {
	if err == nil {
		err = t.e.commit(t.b)
	}
	t.e.ptrMu.Unlock()
	for _, n := range t.held {
		t.e.releaseLocked(n)
	}
	t.b.Close()
	return err
}

func (e *Engine) dirent(parent uint64, name string) (schema.Dirent, bool, error) {
	v, ok, err := e.get(schema.DirentKey(parent, name))
	if err != nil || !ok {
		return schema.Dirent{}, false, err
	}
	d, err := schema.UnmarshalDirent(v)
	return d, err == nil, err
}

// absent fails with ErrExist if name is taken in directory parent.
func (e *Engine) absent(parent uint64, name string) error {
	_, ok, err := e.dirent(parent, name)
	if err == nil && ok {
		err = ErrExist
	}
	return err
}

// Lookup finds name in directory parent.
func (e *Engine) Lookup(ctx context.Context, parent uint64, name string) (Attr, error) {
	if len(name) > MaxNameLen {
		return Attr{}, ErrNameTooLong
	}
	d, ok, err := e.dirent(parent, name)
	if err != nil {
		return Attr{}, err
	}
	if !ok {
		if _, err := e.GetAttr(ctx, parent); err != nil {
			return Attr{}, err
		}
		return Attr{}, ErrNotExist
	}
	return e.GetAttr(ctx, d.Ino)
}

// newInode allocates an inode with nlink links, created in directory p
// (its extent size and recorded parent come from p), and writes its
// record. Caller holds e.ns.
func (t *txn) newInode(p *inode, mode, rdev, uid, gid, nlink uint32) *inode {
	e := t.e
	ino := e.ns.nextIno
	e.ns.nextIno++
	t.b.Set(schema.NextInoKey, schema.U64(e.ns.nextIno))
	p.mu.RLock()
	shift := p.shift // a directory's extent size is its new children's
	p.mu.RUnlock()
	n := &inode{ino: ino, parent: p.ino, refs: 1, shift: shift, dirty: map[uint64][]byte{}, flushing: map[uint64]*flushEntry{},
		attr: Attr{Ino: ino, Mode: mode, Uid: uid, Gid: gid, Nlink: nlink, Rdev: rdev,
			Atime: t.now, Mtime: t.now, Ctime: t.now, Gen: 1}}
	e.ns.inodes[ino] = n
	t.held = append(t.held, n)
	e.putInode(t.b, n)
	return n
}

// newChild allocates an inode and links it as name in p. Caller holds e.ns.
func (t *txn) newChild(p *inode, name string, mode, rdev, uid, gid uint32) *inode {
	nlink := uint32(1)
	if mode&ModeType == ModeDir {
		nlink = 2
	}
	n := t.newInode(p, mode, rdev, uid, gid, nlink)
	t.b.Set(schema.DirentKey(p.ino, name), schema.Dirent{Ino: n.ino, Type: mode & ModeType}.Marshal())
	t.modify(p, func(a *Attr) {
		a.Mtime, a.Ctime = t.now, t.now
		if nlink == 2 {
			a.Nlink++
		}
	})
	return n
}

// mayCreate fails if no new inode may be made now (a reader, or the cache
// directory's disk full).
func (e *Engine) mayCreate() error {
	if err := e.writable(); err != nil {
		return err
	}
	return e.cacheDiskRoom()
}

func (e *Engine) create(parent uint64, name string, mode, rdev, uid, gid uint32, target string) (Attr, error) {
	if err := e.mayCreate(); err != nil {
		return Attr{}, err
	}
	if err := checkName(name); err != nil {
		return Attr{}, err
	}
	e.ns.Lock()
	defer e.ns.Unlock()
	t := e.begin()
	p, err := t.dir(parent)
	if err != nil {
		return Attr{}, t.finish(err)
	}
	if err := e.absent(parent, name); err != nil {
		return Attr{}, t.finish(err)
	}
	n := t.newChild(p, name, mode, rdev, uid, gid)
	if mode&ModeType == ModeSymlink {
		n.attr.Size, n.psize = uint64(len(target)), uint64(len(target))
		e.putInode(t.b, n)
		t.b.Set(schema.SymlinkKey(n.ino), []byte(target))
	}
	a := n.attr
	err = t.finish(nil)
	if err == nil {
		failpoint.Hit("ns-create-after-commit")
	}
	return a, err
}

// Create makes a regular file.
func (e *Engine) Create(ctx context.Context, parent uint64, name string, mode, uid, gid uint32) (Attr, error) {
	return e.create(parent, name, ModeRegular|mode&^ModeType, 0, uid, gid, "")
}

// Mknod makes a file of any non-directory type given by mode's type bits.
func (e *Engine) Mknod(ctx context.Context, parent uint64, name string, mode, rdev, uid, gid uint32) (Attr, error) {
	switch mode & ModeType {
	case 0:
		mode |= ModeRegular
	case ModeRegular, ModeFIFO, ModeSocket, ModeChar, ModeBlock:
	default:
		return Attr{}, ErrInvalid
	}
	return e.create(parent, name, mode, rdev, uid, gid, "")
}

// Mkdir makes a directory.
func (e *Engine) Mkdir(ctx context.Context, parent uint64, name string, mode, uid, gid uint32) (Attr, error) {
	return e.create(parent, name, ModeDir|mode&^ModeType, 0, uid, gid, "")
}

// Symlink makes a symbolic link to target.
func (e *Engine) Symlink(ctx context.Context, parent uint64, name, target string, uid, gid uint32) (Attr, error) {
	if target == "" {
		return Attr{}, ErrNotExist
	}
	if len(target) > MaxSymlinkLen {
		return Attr{}, ErrNameTooLong
	}
	return e.create(parent, name, ModeSymlink|0o777, 0, uid, gid, target)
}

// Readlink returns a symlink's target.
func (e *Engine) Readlink(ctx context.Context, ino uint64) (string, error) {
	a, err := e.GetAttr(ctx, ino)
	if err != nil {
		return "", err
	}
	if a.Mode&ModeType != ModeSymlink {
		return "", ErrInvalid
	}
	v, ok, err := e.get(schema.SymlinkKey(ino))
	if err != nil {
		return "", err
	}
	if !ok {
		return "", ErrNotExist
	}
	return string(v), nil
}

// Link adds a hard link newName in newParent to ino.
func (e *Engine) Link(ctx context.Context, ino, newParent uint64, newName string) (Attr, error) {
	if err := e.writable(); err != nil {
		return Attr{}, err
	}
	if err := checkName(newName); err != nil {
		return Attr{}, err
	}
	e.ns.Lock()
	defer e.ns.Unlock()
	t := e.begin()
	p, err := t.dir(newParent)
	if err != nil {
		return Attr{}, t.finish(err)
	}
	n, err := t.inode(ino)
	if err != nil {
		return Attr{}, t.finish(err)
	}
	n.mu.RLock()
	a := n.attr
	n.mu.RUnlock()
	switch {
	case a.IsDir():
		return Attr{}, t.finish(ErrPermission)
	case a.Nlink >= MaxLinks:
		return Attr{}, t.finish(ErrTooManyLinks)
	case a.Nlink == 0 && (n.open == 0 || n.deleted):
		return Attr{}, t.finish(ErrNotExist)
	}
	if err := e.absent(newParent, newName); err != nil {
		return Attr{}, t.finish(err)
	}
	if a.Nlink == 0 {
		// An open file with no name (O_TMPFILE; the kernel allows the
		// link only for those) gets one and stops being an orphan.
		t.b.Delete(schema.OrphanKey(ino))
	}
	t.b.Set(schema.DirentKey(newParent, newName), schema.Dirent{Ino: ino, Type: a.Mode & ModeType}.Marshal())
	t.modify(n, func(a *Attr) { a.Nlink++; a.Ctime = t.now })
	t.touch(p)
	n.mu.RLock()
	a = n.attrNow()
	n.mu.RUnlock()
	return a, t.finish(nil)
}

// dropLink removes one link of a non-directory; at zero links the inode
// becomes an orphan if open, else it is deleted. Caller holds e.ns.
func (t *txn) dropLink(n *inode) error {
	var left uint32
	t.modify(n, func(a *Attr) {
		if a.Nlink > 0 {
			a.Nlink--
		}
		a.Ctime = t.now
		left = a.Nlink
	})
	if left > 0 {
		return nil
	}
	if n.open > 0 {
		t.b.Set(schema.OrphanKey(n.ino), nil)
		failpoint.Hit("unlink-orphaned")
		return nil
	}
	return t.e.deleteInodeLocked(t.b, n.ino, n)
}

// entry finds the directory parent and its entry name, which must exist.
func (t *txn) entry(parent uint64, name string) (*inode, schema.Dirent, error) {
	p, err := t.dir(parent)
	if err != nil {
		return nil, schema.Dirent{}, err
	}
	d, ok, err := t.e.dirent(parent, name)
	if err == nil && !ok {
		err = ErrNotExist
	}
	return p, d, err
}

// Unlink removes a non-directory entry.
func (e *Engine) Unlink(ctx context.Context, parent uint64, name string) error {
	if err := e.writable(); err != nil {
		return err
	}
	if len(name) > MaxNameLen {
		return ErrNameTooLong
	}
	e.ns.Lock()
	defer e.ns.Unlock()
	t := e.begin()
	p, d, err := t.entry(parent, name)
	if err != nil {
		return t.finish(err)
	}
	if d.Type == ModeDir {
		return t.finish(ErrIsDir)
	}
	c, err := t.inode(d.Ino)
	if err != nil {
		return t.finish(err)
	}
	t.b.Delete(schema.DirentKey(parent, name))
	t.touch(p)
	if err := t.finish(t.dropLink(c)); err != nil {
		return err
	}
	failpoint.Hit("ns-unlink-after-commit")
	return nil
}

func (e *Engine) dirEmpty(ino uint64) (bool, error) {
	lo, hi := schema.DirentPrefix(ino)
	it, err := e.newIter(lo, hi)
	if err != nil {
		return false, err
	}
	defer it.Close()
	empty := !it.First()
	return empty, it.Error()
}

// removeDir deletes empty directory c linked in p. Caller holds e.ns.
func (t *txn) removeDir(p, c *inode) error {
	empty, err := t.e.dirEmpty(c.ino)
	if err != nil {
		return err
	}
	if !empty {
		return ErrNotEmpty
	}
	t.modify(p, func(a *Attr) {
		a.Mtime, a.Ctime = t.now, t.now
		if a.Nlink > 2 {
			a.Nlink--
		}
	})
	return t.e.deleteInodeLocked(t.b, c.ino, c)
}

// Rmdir removes an empty directory.
func (e *Engine) Rmdir(ctx context.Context, parent uint64, name string) error {
	if err := e.writable(); err != nil {
		return err
	}
	if name == "." {
		return ErrInvalid
	}
	if name == ".." {
		return ErrNotEmpty
	}
	if len(name) > MaxNameLen {
		return ErrNameTooLong
	}
	e.ns.Lock()
	defer e.ns.Unlock()
	t := e.begin()
	p, d, err := t.entry(parent, name)
	if err != nil {
		return t.finish(err)
	}
	if d.Type != ModeDir {
		return t.finish(ErrNotDir)
	}
	c, err := t.inode(d.Ino)
	if err != nil {
		return t.finish(err)
	}
	t.b.Delete(schema.DirentKey(parent, name))
	return t.finish(t.removeDir(p, c))
}

// isAncestor reports whether dir a is dir b or one of b's ancestors.
// Caller holds e.ns.
func (e *Engine) isAncestor(a, b uint64) (bool, error) {
	for cur, steps := b, 0; ; steps++ {
		if cur == a {
			return true, nil
		}
		if cur == RootIno || steps > 1<<20 {
			return false, nil
		}
		if n := e.ns.inodes[cur]; n != nil {
			cur = n.parent
			continue
		}
		r, err := e.getRecord(cur)
		if err != nil {
			return false, err
		}
		cur = r.Parent
	}
}

// Rename moves oldName in oldParent to newName in newParent. flags may hold
// RenameNoReplace or RenameExchange.
func (e *Engine) Rename(ctx context.Context, oldParent uint64, oldName string, newParent uint64, newName string, flags uint32) error {
	if err := e.writable(); err != nil {
		return err
	}
	if flags&^(RenameNoReplace|RenameExchange) != 0 || flags == RenameNoReplace|RenameExchange {
		return ErrInvalid
	}
	if err := checkName(oldName); err != nil {
		return err
	}
	if err := checkName(newName); err != nil {
		return err
	}
	e.ns.Lock()
	defer e.ns.Unlock()
	t := e.begin()
	op, err := t.dir(oldParent)
	if err != nil {
		return t.finish(err)
	}
	np, err := t.dir(newParent)
	if err != nil {
		return t.finish(err)
	}
	sd, ok, err := e.dirent(oldParent, oldName)
	if err != nil || !ok {
		if err == nil {
			err = ErrNotExist
		}
		return t.finish(err)
	}
	dd, dstExists, err := e.dirent(newParent, newName)
	if err != nil {
		return t.finish(err)
	}
	if dstExists && dd.Ino == sd.Ino {
		// Two links to one inode (or the same entry): POSIX says do nothing.
		return t.finish(nil)
	}
	if flags&RenameNoReplace != 0 && dstExists {
		return t.finish(ErrExist)
	}
	if flags&RenameExchange != 0 && !dstExists {
		return t.finish(ErrNotExist)
	}
	src, err := t.inode(sd.Ino)
	if err != nil {
		return t.finish(err)
	}
	srcDir := sd.Type == ModeDir
	if srcDir && oldParent != newParent {
		if inside, err := e.isAncestor(sd.Ino, newParent); err != nil || inside {
			if err == nil {
				err = ErrInvalid
			}
			return t.finish(err)
		}
	}
	var dst *inode
	if dstExists {
		if dst, err = t.inode(dd.Ino); err != nil {
			return t.finish(err)
		}
		dstDir := dd.Type == ModeDir
		if flags&RenameExchange != 0 {
			if dstDir && oldParent != newParent {
				if inside, err := e.isAncestor(dd.Ino, oldParent); err != nil || inside {
					if err == nil {
						err = ErrInvalid
					}
					return t.finish(err)
				}
			}
			return t.finish(t.exchange(op, oldName, sd, src, np, newName, dd, dst))
		}
		switch {
		case srcDir && !dstDir:
			return t.finish(ErrNotDir)
		case !srcDir && dstDir:
			return t.finish(ErrIsDir)
		case dstDir:
			if err := t.removeDir(np, dst); err != nil {
				return t.finish(err)
			}
		default:
			if err := t.dropLink(dst); err != nil {
				return t.finish(err)
			}
		}
	}
	t.b.Delete(schema.DirentKey(oldParent, oldName))
	t.b.Set(schema.DirentKey(newParent, newName), sd.Marshal())
	t.moveChild(op, np, src, srcDir)
	if err := t.finish(nil); err != nil {
		return err
	}
	failpoint.Hit("ns-rename-after-commit")
	return nil
}

// moveChild fixes link counts and times after c moved from op to np.
func (t *txn) moveChild(op, np, c *inode, isDir bool) {
	if isDir && op != np {
		c.parent = np.ino
		t.modify(op, func(a *Attr) { a.Nlink--; a.Mtime, a.Ctime = t.now, t.now })
		t.modify(np, func(a *Attr) { a.Nlink++; a.Mtime, a.Ctime = t.now, t.now })
	} else {
		t.touch(op)
		if op != np {
			t.touch(np)
		}
	}
	t.modify(c, func(a *Attr) { a.Ctime = t.now })
}

func (t *txn) exchange(op *inode, oldName string, sd schema.Dirent, src *inode, np *inode, newName string, dd schema.Dirent, dst *inode) error {
	t.b.Set(schema.DirentKey(op.ino, oldName), dd.Marshal())
	t.b.Set(schema.DirentKey(np.ino, newName), sd.Marshal())
	srcDir, dstDir := sd.Type == ModeDir, dd.Type == ModeDir
	if op != np {
		if srcDir {
			src.parent = np.ino
		}
		if dstDir {
			dst.parent = op.ino
		}
		delta := 0
		if srcDir {
			delta--
		}
		if dstDir {
			delta++
		}
		t.modify(op, func(a *Attr) { a.Nlink = uint32(int(a.Nlink) + delta); a.Mtime, a.Ctime = t.now, t.now })
		t.modify(np, func(a *Attr) { a.Nlink = uint32(int(a.Nlink) - delta); a.Mtime, a.Ctime = t.now, t.now })
	} else {
		t.touch(op)
	}
	t.modify(src, func(a *Attr) { a.Ctime = t.now })
	t.modify(dst, func(a *Attr) { a.Ctime = t.now })
	return nil
}

// ReadDir lists directory ino (without "." and "..").
func (e *Engine) ReadDir(ctx context.Context, ino uint64) ([]DirEntry, error) {
	return e.readDir(ctx, ino, "", 0)
}

// ReadDirPage lists at most limit entries of directory ino whose names sort
// after after ("" for the first page), in name order; fewer than limit
// means the directory has no more. A listing in pages holds one page in
// memory, not the directory, and each page starts from the last name
// returned: entries added or removed between pages are listed or not, but
// no other entry is skipped or listed twice.
func (e *Engine) ReadDirPage(ctx context.Context, ino uint64, after string, limit int) ([]DirEntry, error) {
	if limit < 1 {
		limit = 1
	}
	return e.readDir(ctx, ino, after, limit)
}

// readDir lists the entries of ino after after (all of them if "");
// limit > 0 stops after that many.
func (e *Engine) readDir(ctx context.Context, ino uint64, after string, limit int) ([]DirEntry, error) {
	a, err := e.GetAttr(ctx, ino)
	if err != nil {
		return nil, err
	}
	if !a.IsDir() {
		return nil, ErrNotDir
	}
	var out []DirEntry
	if limit > 0 {
		out = make([]DirEntry, 0, limit)
	}
	lo, hi := schema.DirentPrefix(ino)
	if after != "" {
		lo = append(schema.DirentKey(ino, after), 0) // the first key after it
	}
	err = e.scan(lo, hi, func(k, v []byte) error {
		_, name, err := schema.ParseDirentKey(k)
		if err != nil {
			return err
		}
		d, err := schema.UnmarshalDirent(v)
		if err != nil {
			return err
		}
		out = append(out, DirEntry{Name: name, Ino: d.Ino, Mode: d.Type})
		if limit > 0 && len(out) >= limit {
			return lsm.ErrStopScan
		}
		return nil
	})
	return out, err
}
