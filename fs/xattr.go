package fs

import (
	"context"
	"errors"
	"math/bits"
	"strconv"
	"strings"

	"ebbfs.dev/ebbfs/lsm/schema"
)

// MaxXattrValue is the largest xattr value (Linux's limit).
const MaxXattrValue = 64 << 10

// GetXattr returns the value of xattr name.
func (e *Engine) GetXattr(ctx context.Context, ino uint64, name string) ([]byte, error) {
	if name == XattrExtentSize {
		n, err := e.acquire(ino)
		if err != nil {
			return nil, err
		}
		defer e.release(n)
		n.mu.RLock()
		defer n.mu.RUnlock()
		if !n.attr.IsRegular() && !n.attr.IsDir() {
			return nil, ErrNoXattr
		}
		return extentSizeValue(n), nil
	}
	if _, err := e.GetAttr(ctx, ino); err != nil {
		return nil, err
	}
	v, ok, err := e.get(schema.XattrKey(ino, name))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrNoXattr
	}
	return v, nil
}

// SetXattr sets xattr name; flags may hold XattrCreate or XattrReplace.
func (e *Engine) SetXattr(ctx context.Context, ino uint64, name string, value []byte, flags uint32) error {
	if err := e.writable(); err != nil {
		return err
	}
	if name == "" || len(name) > MaxNameLen {
		return ErrInvalid
	}
	if len(value) > MaxXattrValue {
		return ErrXattrRange
	}
	if err := e.cacheDiskRoom(); err != nil {
		return err
	}
	if name == XattrExtentSize {
		sh, err := parseExtentSize(value)
		if err != nil {
			return err
		}
		return e.setExtentShift(ino, sh, flags)
	}
	e.ns.Lock()
	defer e.ns.Unlock()
	t := e.begin()
	n, err := t.inode(ino)
	if err != nil {
		return t.finish(err)
	}
	_, exists, err := e.get(schema.XattrKey(ino, name))
	if err != nil {
		return t.finish(err)
	}
	if flags&XattrCreate != 0 && exists {
		return t.finish(ErrExist)
	}
	if flags&XattrReplace != 0 && !exists {
		return t.finish(ErrNoXattr)
	}
	t.b.Set(schema.XattrKey(ino, name), value)
	t.modify(n, func(a *Attr) { a.Ctime = t.now })
	return t.finish(nil)
}

// ListXattr lists the xattr names of ino.
func (e *Engine) ListXattr(ctx context.Context, ino uint64) ([]string, error) {
	if _, err := e.GetAttr(ctx, ino); err != nil {
		return nil, err
	}
	var names []string
	lo, hi := schema.XattrPrefix(ino)
	err := e.scan(lo, hi, func(k, _ []byte) error {
		names = append(names, string(k[9:]))
		return nil
	})
	return names, err
}

// RemoveXattr removes xattr name.
func (e *Engine) RemoveXattr(ctx context.Context, ino uint64, name string) error {
	if err := e.writable(); err != nil {
		return err
	}
	if name == XattrExtentSize {
		return e.setExtentShift(ino, schema.MaxExtentShift, 0)
	}
	e.ns.Lock()
	defer e.ns.Unlock()
	t := e.begin()
	n, err := t.inode(ino)
	if err != nil {
		return t.finish(err)
	}
	_, exists, err := e.get(schema.XattrKey(ino, name))
	if err != nil {
		return t.finish(err)
	}
	if !exists {
		return t.finish(ErrNoXattr)
	}
	t.b.Delete(schema.XattrKey(ino, name))
	t.modify(n, func(a *Attr) { a.Ctime = t.now })
	return t.finish(nil)
}

// XattrExtentSize is the virtual attribute that holds a file's extent size
// in bytes (decimal): 4096, 8192, 16384 or 32768 (the default). A file's
// extent size is the unit of its writes: a write of part of an extent
// rewrites the whole extent, so files written in small random pieces
// (databases, VM images) store far fewer bytes with small extents, and
// files read and written in large pieces cost less metadata with large
// ones. On a directory it is the size files and directories created in it
// start with; on a regular file it can change only while the file holds
// no data. Removing it sets the default back. It is not listed: a copy
// that keeps attributes (cp -a, rsync -X) would set it on a file it has
// already written, which fails; a copy into a directory takes the
// directory's.
const XattrExtentSize = "user.ebbfs.extent_size"

// ErrBusy: the extent size of a file that holds data cannot change.
var ErrBusy = errors.New("file holds data: its extent size cannot change")

// extentSizeValue is the attribute's value for n. Caller holds n.mu.
func extentSizeValue(n *inode) []byte { return strconv.AppendUint(nil, n.es(), 10) }

// parseExtentSize returns the shift of an extent size value.
func parseExtentSize(v []byte) (uint8, error) {
	s, err := strconv.ParseUint(strings.TrimSpace(string(v)), 10, 64)
	if err != nil || s == 0 || s&(s-1) != 0 {
		return 0, ErrInvalid
	}
	sh := bits.TrailingZeros64(s)
	if sh < schema.MinExtentShift || sh > schema.MaxExtentShift {
		return 0, ErrInvalid
	}
	return uint8(sh), nil
}

// setExtentShift sets ino's extent size (setxattr and removexattr of
// XattrExtentSize).
func (e *Engine) setExtentShift(ino uint64, shift uint8, flags uint32) error {
	if flags&XattrCreate != 0 {
		return ErrExist // every file and directory has one
	}
	e.ns.Lock()
	defer e.ns.Unlock()
	t := e.begin()
	n, err := t.inode(ino)
	if err != nil {
		return t.finish(err)
	}
	n.mu.Lock()
	old := n.shift
	switch {
	case old == shift:
		n.mu.Unlock()
		return t.finish(nil)
	case n.attr.IsDir():
	case !n.attr.IsRegular():
		err = ErrInvalid
	case n.attr.Size != 0 || len(n.dirty) > 0 || len(n.flushing) > 0 || len(n.res) > 0 || e.ranges.has(n.ino):
		// (A truncation's dead pointers waiting for the cleaner count:
		// their sizes are of the old extent size.)
		err = ErrBusy
	default:
		// No size, but a crash or a pending truncation may have left
		// pointers behind: their indexes mean the old extent size.
		var found bool
		if _, found, err = e.nextDataLocked(n, 0); err == nil && found {
			err = ErrBusy
		}
	}
	if err != nil {
		n.mu.Unlock()
		return t.finish(err)
	}
	n.shift = shift
	n.mu.Unlock()
	t.modify(n, func(a *Attr) { a.Ctime = t.now })
	if err := t.finish(nil); err != nil {
		n.mu.Lock()
		n.shift = old
		n.mu.Unlock()
		return err
	}
	return nil
}
