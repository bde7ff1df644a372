package fs

import "context"

// Allocate reserves [off, off+length). ebbfs stores no zeroes, so this only
// extends the size unless keepSize is set.
func (e *Engine) Allocate(ctx context.Context, ino uint64, off, length int64, keepSize bool) error {
	if err := e.writable(); err != nil {
		return err
	}
	if off < 0 || length <= 0 {
		return ErrInvalid
	}
	if off+length > MaxFileSize {
		return ErrFileTooBig
	}
	a, err := e.GetAttr(ctx, ino)
	if err != nil {
		return err
	}
	if !a.IsRegular() {
		return ErrInvalid
	}
	if keepSize || uint64(off+length) <= a.Size {
		return nil
	}
	_, err = e.SetAttr(ctx, ino, SetAttr{Valid: SetSize, Size: uint64(off + length)})
	return err
}
