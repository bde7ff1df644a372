package fs

import (
	"context"

	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
)

// Files without names and names found from inodes: what O_TMPFILE and
// file handles (name_to_handle_at, open_by_handle_at, NFS re-export) need
// of the namespace.

// CreateTmp makes a regular file with no name in directory parent, open
// once (O_TMPFILE; Release ends that open). It is an orphan from the
// start: Link gives it a name; otherwise its last close deletes it, or the
// next start does after a crash, as for a file unlinked while open.
func (e *Engine) CreateTmp(ctx context.Context, parent uint64, mode, uid, gid uint32) (Attr, error) {
	if err := e.mayCreate(); err != nil {
		return Attr{}, err
	}
	e.ns.Lock()
	defer e.ns.Unlock()
	t := e.begin()
	p, err := t.dir(parent)
	if err == nil {
		return e.createTmpIn(t, p, mode, uid, gid)
	}
	return Attr{}, t.finish(err)
}

// createTmpIn is CreateTmp's transaction in directory p. Caller holds
// e.ns.
func (e *Engine) createTmpIn(t *txn, p *inode, mode, uid, gid uint32) (Attr, error) {
	n := t.newInode(p, ModeRegular|mode&^ModeType, 0, uid, gid, 0)
	t.b.Set(schema.OrphanKey(n.ino), nil)
	n.open = 1
	a := n.attr
	if err := t.finish(nil); err != nil {
		// Never committed: no one may find it.
		n.open = 0
		n.deleted = true
		delete(e.ns.inodes, n.ino)
		return Attr{}, err
	}
	return a, nil
}

// ParentOf returns the parent directory of directory ino and ino's name
// in it (the ".." of a file handle's reconnection). The root is its own
// parent, with the name ".".
func (e *Engine) ParentOf(ctx context.Context, ino uint64) (uint64, string, error) {
	if ino == RootIno {
		return RootIno, ".", nil
	}
	e.ns.Lock()
	n, err := e.acquireLocked(ino)
	e.ns.Unlock()
	if err != nil {
		return 0, "", err
	}
	n.mu.RLock()
	parent, isDir, nlink := n.parent, n.attr.IsDir(), n.attr.Nlink
	n.mu.RUnlock()
	e.release(n)
	switch {
	case !isDir:
		return 0, "", ErrNotDir
	case nlink == 0:
		return 0, "", ErrNotExist
	}
	lo, hi := schema.DirentPrefix(parent)
	name := ""
	err = e.scan(lo, hi, func(k, v []byte) error {
		d, err := schema.UnmarshalDirent(v)
		if err != nil || d.Ino != ino {
			return err
		}
		_, name, err = schema.ParseDirentKey(k)
		if err != nil {
			return err
		}
		return lsm.ErrStopScan
	})
	if name != "" {
		return parent, name, nil
	}
	if err != nil {
		return 0, "", err
	}
	return 0, "", ErrNotExist
}
