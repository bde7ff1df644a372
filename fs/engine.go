package fs

import (
	"context"
	"errors"

)

// Engine is an open ebbfs filesystem. All methods are safe for concurrent use.
// (Temporary stub bodies; the real engine replaces this file.)
type Engine struct{ opts Options }

var errStub = errors.New("fs: engine not implemented yet")

// Open opens (recovering if needed) the filesystem described by o.
func Open(ctx context.Context, o Options) (*Engine, error) { return nil, errStub }

// Close runs a final barrier (writer) and releases everything.
func (e *Engine) Close(ctx context.Context) error { return errStub }

// ReadOnly reports whether the engine refuses writes.
func (e *Engine) ReadOnly() bool { return e.opts.ReadOnly }

func (e *Engine) Lookup(ctx context.Context, parent uint64, name string) (Attr, error) {
	return Attr{}, errStub
}
func (e *Engine) GetAttr(ctx context.Context, ino uint64) (Attr, error) { return Attr{}, errStub }
func (e *Engine) SetAttr(ctx context.Context, ino uint64, in SetAttr) (Attr, error) {
	return Attr{}, errStub
}
func (e *Engine) Create(ctx context.Context, parent uint64, name string, mode, uid, gid uint32) (Attr, error) {
	return Attr{}, errStub
}
func (e *Engine) Mknod(ctx context.Context, parent uint64, name string, mode, rdev, uid, gid uint32) (Attr, error) {
	return Attr{}, errStub
}
func (e *Engine) Mkdir(ctx context.Context, parent uint64, name string, mode, uid, gid uint32) (Attr, error) {
	return Attr{}, errStub
}
func (e *Engine) Symlink(ctx context.Context, parent uint64, name, target string, uid, gid uint32) (Attr, error) {
	return Attr{}, errStub
}
func (e *Engine) Readlink(ctx context.Context, ino uint64) (string, error) { return "", errStub }
func (e *Engine) Link(ctx context.Context, ino, newParent uint64, newName string) (Attr, error) {
	return Attr{}, errStub
}
func (e *Engine) Unlink(ctx context.Context, parent uint64, name string) error { return errStub }
func (e *Engine) Rmdir(ctx context.Context, parent uint64, name string) error  { return errStub }
func (e *Engine) Rename(ctx context.Context, oldParent uint64, oldName string, newParent uint64, newName string, flags uint32) error {
	return errStub
}
func (e *Engine) ReadDir(ctx context.Context, ino uint64) ([]DirEntry, error) { return nil, errStub }
func (e *Engine) Open(ctx context.Context, ino uint64) error                  { return errStub }
func (e *Engine) Release(ctx context.Context, ino uint64) error               { return errStub }
func (e *Engine) Read(ctx context.Context, ino uint64, p []byte, off int64) (int, error) {
	return 0, errStub
}
func (e *Engine) Write(ctx context.Context, ino uint64, p []byte, off int64) (int, error) {
	return 0, errStub
}
func (e *Engine) Barrier(ctx context.Context) error { return errStub }
func (e *Engine) Punch(ctx context.Context, ino uint64, off, length int64) error {
	return errStub
}
func (e *Engine) Allocate(ctx context.Context, ino uint64, off, length int64, keepSize bool) error {
	return errStub
}
func (e *Engine) SeekData(ctx context.Context, ino uint64, off int64) (int64, error) {
	return 0, errStub
}
func (e *Engine) SeekHole(ctx context.Context, ino uint64, off int64) (int64, error) {
	return 0, errStub
}
func (e *Engine) GetXattr(ctx context.Context, ino uint64, name string) ([]byte, error) {
	return nil, errStub
}
func (e *Engine) SetXattr(ctx context.Context, ino uint64, name string, value []byte, flags uint32) error {
	return errStub
}
func (e *Engine) ListXattr(ctx context.Context, ino uint64) ([]string, error) { return nil, errStub }
func (e *Engine) RemoveXattr(ctx context.Context, ino uint64, name string) error {
	return errStub
}
func (e *Engine) StatFS(ctx context.Context) (StatFS, error) { return StatFS{}, errStub }
