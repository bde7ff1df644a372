package fs

import (
	"fmt"

	"ebbfs.dev/ebbfs/lsm/schema"
)

// The filesystem-wide total of fallocate reservations (allocate.go), in
// bytes: every reserved extent counts its whole extent size. statfs counts
// it as used, beside the live data and the unflushed writes, and
// reservations are admitted against the capacity (space.go). A writer
// keeps the total in memory: scanned from the inode records at open,
// then moved by every inode record it writes (putInode) and deletes
// (deleteInodeLocked), each remembering what its record last held
// (inode.resPut). A reader scans for it at each statfs, as the writer's
// journals move it.

// reservedOf is the bytes reservations res reserve in a file of extent
// shift shift.
func reservedOf(res []schema.ExtentSpan, shift uint8) int64 {
	return int64(reservedExtents(res) << shift)
}

// scanReserved sums the reservations of every inode record.
func (e *Engine) scanReserved() (int64, error) {
	var sum int64
	lo, hi := schema.PrefixRange(schema.PInode)
	err := e.scan(lo, hi, func(k, v []byte) error {
		rec, err := schema.UnmarshalInode(v)
		if err != nil {
			return fmt.Errorf("fs: inode record %x: %w", k, err)
		}
		if len(rec.Reserved) > 0 {
			sum += reservedOf(rec.Reserved, rec.Shift())
		}
		return nil
	})
	return sum, err
}

// loadReserved sets the writer's total at open.
func (e *Engine) loadReserved() error {
	sum, err := e.scanReserved()
	if err != nil {
		return err
	}
	e.resTotal.Store(sum)
	return nil
}

// reservedTotal is the reserved bytes now: the writer's running total, or
// a reader's scan.
func (e *Engine) reservedTotal() (int64, error) {
	if e.ro.Load() {
		return e.scanReserved()
	}
	return e.resTotal.Load(), nil
}

// noteReserved moves the total by the change in n's reservations since
// its record was last written. Caller holds n.mu and is writing n's
// record.
func (e *Engine) noteReserved(n *inode) {
	now := reservedOf(n.res, n.shift)
	if d := now - n.resPut; d != 0 {
		e.resTotal.Add(d)
		n.resPut = now
	}
}

// dropReserved takes a deleted inode's reservations out of the total: n's
// if it is loaded, else its record's. Caller holds e.ns.
func (e *Engine) dropReserved(ino uint64, n *inode) {
	if n != nil {
		n.mu.Lock()
		e.resTotal.Add(-n.resPut)
		n.resPut = 0
		n.mu.Unlock()
		return
	}
	if rec, err := e.getRecord(ino); err == nil && len(rec.Reserved) > 0 {
		e.resTotal.Add(-reservedOf(rec.Reserved, rec.Shift()))
	}
}

// writeSpace is the bytes a write of length bytes at off into ino adds to
// the used space: its extents that fallocate reserved were counted
// already, so only the others need room.
func (e *Engine) writeSpace(ino uint64, off int64, length int) int64 {
	if e.resTotal.Load() == 0 || length <= 0 {
		return int64(length)
	}
	e.ns.Lock()
	n := e.ns.inodes[ino]
	e.ns.Unlock()
	if n == nil {
		return int64(length)
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	if len(n.res) == 0 {
		return int64(length)
	}
	es := n.es()
	from, to := uint64(off)/es, (uint64(off)+uint64(length)+es-1)/es
	var covered uint64
	for _, r := range n.res {
		lo, hi := max(r.From, from), min(r.To, to)
		if lo < hi {
			covered += hi - lo
		}
	}
	return max(int64(length)-int64(covered*es), 0)
}
