package fuse

import (
	"github.com/hanwen/go-fuse/v2/fs"

	ebbfs "ebbfs.dev/ebbfs/fs"
)

// A read-only replica follows the writer; the kernel keeps its page,
// attribute and dentry caches on, and this file keeps them true: every
// change a followed journal makes becomes an invalidation of exactly the
// inodes and names it touched, found in go-fuse's tree of the inodes the
// kernel knows.

// link is one name by which the kernel reached an inode.
type link struct {
	parent *fs.Inode
	name   string
}

// known walks the kernel's view from the root: every inode by number,
// with the names it is reachable by.
func (f *fsys) known() (map[uint64][]*fs.Inode, map[uint64][]link) {
	byIno := map[uint64][]*fs.Inode{}
	names := map[uint64][]link{}
	seen := map[*fs.Inode]bool{}
	var walk func(n *fs.Inode)
	walk = func(n *fs.Inode) {
		if seen[n] {
			return
		}
		seen[n] = true
		ino := n.StableAttr().Ino
		byIno[ino] = append(byIno[ino], n)
		for name, ch := range n.Children() {
			names[ch.StableAttr().Ino] = append(names[ch.StableAttr().Ino], link{n, name})
			walk(ch)
		}
	}
	if f.root != nil {
		walk(f.root.EmbeddedInode())
	}
	return byIno, names
}

// invalidate tells the kernel what a followed journal changed: for each
// changed inode its attributes and pages and the names it is known by (a
// fresh lookup brings the new size and mtime), and each changed directory
// entry. An inode or name the kernel does not hold needs nothing.
func (f *fsys) invalidate(ch ebbfs.Changes) {
	byIno, names := f.known()
	if ch.All {
		for _, list := range byIno {
			for _, n := range list {
				n.NotifyContent(0, 0)
			}
		}
		for _, ls := range names {
			for _, l := range ls {
				l.parent.NotifyEntry(l.name)
			}
		}
		return
	}
	for _, ino := range ch.Inodes {
		for _, n := range byIno[ino] {
			n.NotifyContent(0, 0)
		}
		for _, l := range names[ino] {
			l.parent.NotifyEntry(l.name)
		}
	}
	for _, e := range ch.Entries {
		for _, p := range byIno[e.Parent] {
			p.NotifyEntry(e.Name)
		}
	}
}
