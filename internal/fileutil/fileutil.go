// Package fileutil writes local files the one way ebbfs does it: a whole
// file appears under its name at once or not at all.
package fileutil

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Options tune WriteAtomic.
type Options struct {
	// Perm is the new file's mode (default 0o600).
	Perm os.FileMode
	// Durable fsyncs the file before the rename and the directory after
	// it, so that the new content survives a power loss. Caches that can
	// lose an entry leave it off.
	Durable bool
	// TempPrefix names the temporary file (default ".tmp-"); a directory's
	// owner can sweep leftovers by it.
	TempPrefix string
	// MkdirAll creates the directory (0o700) when it is missing.
	MkdirAll bool
}

// WriteAtomic writes data to path through a temporary file in the same
// directory and a rename.
func WriteAtomic(path string, data []byte, o Options) error {
	if o.Perm == 0 {
		o.Perm = 0o600
	}
	if o.TempPrefix == "" {
		o.TempPrefix = ".tmp-"
	}
	dir := filepath.Dir(path)
	var rnd [8]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails
	tmp := filepath.Join(dir, o.TempPrefix+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, o.Perm)
	if errors.Is(err, fs.ErrNotExist) && o.MkdirAll {
		if err = os.MkdirAll(dir, 0o700); err == nil {
			f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, o.Perm)
		}
	}
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil && o.Durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if o.Durable {
		return SyncDir(dir)
	}
	return nil
}

// SyncDir fsyncs a directory, making the names created or removed in it
// durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}
