package fs

import (
	"context"

	"ebbfs.dev/ebbfs/lsm/schema"
)

// MaxXattrValue is the largest xattr value (Linux's limit).
const MaxXattrValue = 64 << 10

// GetXattr returns the value of xattr name.
func (e *Engine) GetXattr(ctx context.Context, ino uint64, name string) ([]byte, error) {
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
