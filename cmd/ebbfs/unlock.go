package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/objstore"
)

// unlock opens the store and unwraps the keys. It writes nothing: a wrong
// password fails before anything but the descriptor has been read.
func unlock(ctx context.Context, c *config.Config) (objstore.Store, *keys.Keys, error) {
	pw, src, err := c.Password()
	if err != nil {
		return nil, nil, err
	}
	if pf := c.Encryption.PasswordFile; pf != "" {
		if fi, err := os.Stat(pf); err == nil && fi.Mode().Perm()&0o077 != 0 {
			slog.Warn("the password file is readable by other users; chmod 600 it", "file", pf, "mode", fi.Mode().Perm())
		}
	}
	st, err := openStore(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	k, err := fs.Unlock(ctx, st, pw)
	if err != nil {
		if errors.Is(err, keys.ErrWrongPassword) {
			return nil, nil, &exitError{exitWrongPass, fmt.Errorf("wrong password: the password from %s does not unlock the filesystem in %s", src, c.Storage.URL)}
		}
		return nil, nil, fmt.Errorf("unlocking %s: %w", c.Storage.URL, err)
	}
	return st, k, nil
}
