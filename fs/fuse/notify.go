package fuse

import (
	"sync"

	"github.com/hanwen/go-fuse/v2/fs"

	ebbfs "ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/worker"
)

// A read-only replica follows the writer; the kernel keeps its page,
// attribute and dentry caches on, and this file keeps them true: every
// change a followed journal makes becomes an invalidation of exactly the
// inodes and names it touched, found in go-fuse's tree of the inodes the
// kernel knows.
//
// The notifications go out from a worker of their own, never from the
// goroutine that applied the journal: the kernel handles an inode
// invalidation by waiting for the page locks of that inode, which a read
// in flight holds until the daemon answers it, and a replica read that
// found its segment gone applies journals itself (fs.Engine.Read) or waits
// for the poll loop that does. Sent synchronously, the invalidation and
// the read would wait for each other for ever.

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

// notifier queues changes for the worker, merging those not yet sent.
type notifier struct {
	f *fsys
	w *worker.Worker

	mu struct {
		sync.Mutex
		closed  bool
		all     bool
		inodes  map[uint64]bool
		entries map[ebbfs.EntryRef]bool
	}
}

// startNotifier starts the worker; close stops it.
func startNotifier(f *fsys) *notifier {
	n := &notifier{f: f}
	n.w = worker.Start("fuse-notify", nil, n.loop)
	return n
}

// queue adds a followed journal's changes; it never blocks.
func (n *notifier) queue(ch ebbfs.Changes) {
	n.mu.Lock()
	if n.mu.closed {
		n.mu.Unlock()
		return
	}
	if n.mu.inodes == nil {
		n.mu.inodes, n.mu.entries = map[uint64]bool{}, map[ebbfs.EntryRef]bool{}
	}
	n.mu.all = n.mu.all || ch.All
	for _, ino := range ch.Inodes {
		n.mu.inodes[ino] = true
	}
	for _, e := range ch.Entries {
		n.mu.entries[e] = true
	}
	n.mu.Unlock()
	n.w.Notify()
}

func (n *notifier) loop(w *worker.Worker) {
	for w.Wait(0) {
		n.mu.Lock()
		ch := ebbfs.Changes{All: n.mu.all}
		for ino := range n.mu.inodes {
			ch.Inodes = append(ch.Inodes, ino)
		}
		for e := range n.mu.entries {
			ch.Entries = append(ch.Entries, e)
		}
		n.mu.all, n.mu.inodes, n.mu.entries = false, nil, nil
		n.mu.Unlock()
		n.f.send(ch)
	}
}

// close stops the worker (once the mount is gone) and waits for it.
func (n *notifier) close() {
	n.mu.Lock()
	if n.mu.closed {
		n.mu.Unlock()
		return
	}
	n.mu.closed = true
	n.mu.Unlock()
	n.w.Close()
}

// invalidate hands a followed journal's changes to the notifier.
func (f *fsys) invalidate(ch ebbfs.Changes) {
	if f.notify != nil {
		f.notify.queue(ch)
	}
}

// send tells the kernel what a followed journal changed: for each
// changed inode its attributes and pages and the names it is known by (a
// fresh lookup brings the new size and mtime), and each changed directory
// entry. An inode or name the kernel does not hold needs nothing.
func (f *fsys) send(ch ebbfs.Changes) {
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
