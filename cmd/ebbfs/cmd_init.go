package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/internal/daemon"
	"ebbfs.dev/ebbfs/internal/keys"
)

func newInitCmd(g *globalFlags) *cobra.Command {
	var cipher string
	var create bool
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create a new filesystem in the configured store (refuses if one exists)",
		Long: `Create a new, empty ebbfs filesystem in the object store named by
[storage] url. The password comes from [encryption] password_file or the
EBBFS_PASSWORD environment variable and must have at least 8 characters.
init refuses to touch a store that already holds a filesystem, a
password file that other users can read (chmod 600 it), and a local store
directory that does not exist (a typo would make a new filesystem): give
--create to have init make it.

--cipher chooses the AEAD that seals the new filesystem's frames and
metadata: xaes-256-gcm (the default where the CPU has AES instructions,
about twice as fast there) or xchacha20-poly1305 (the default without
them). It is recorded in the filesystem and cannot be changed later.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, pw, src, err := g.loadWithPassword()
			if err != nil {
				return err
			}
			if len(pw) < keys.MinPasswordLen {
				return fmt.Errorf("the password from %s is too short: at least %d characters are required", src, keys.MinPasswordLen)
			}
			ciph, err := keys.ParseCipher(cipher)
			if err != nil {
				return &usageError{fmt.Errorf("--cipher: %w", err)}
			}
			if err := checkInitSafe(c, create); err != nil {
				return err
			}
			ctx := context.Background()
			st, err := openStore(ctx, c)
			if err != nil {
				return err
			}
			k, err := fs.InitCipher(ctx, st, pw, ciph)
			if err != nil {
				if errors.Is(err, keys.ErrShortPassword) {
					return fmt.Errorf("the password from %s: %w", src, err)
				}
				return fmt.Errorf("%s: %w", c.Storage.URL, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "initialized ebbfs filesystem %s in %s (cipher %s)\n", daemon.UUIDString(k.UUID), c.Storage.URL, ciph)
			return nil
		},
	}
	cmd.Flags().StringVar(&cipher, "cipher", "auto", "frame cipher: auto, xaes-256-gcm or xchacha20-poly1305")
	cmd.Flags().BoolVar(&create, "create", false, "create the local store directory (file:// URL) if it does not exist")
	return cmd
}

// checkInitSafe refuses what init must not do silently: read a password
// file other users can read, or create a local store directory that does
// not exist (unless create).
func checkInitSafe(c *config.Config, create bool) error {
	if pf := c.Encryption.PasswordFile; pf != "" {
		if fi, err := os.Stat(pf); err == nil && fi.Mode().Perm()&0o077 != 0 {
			return fmt.Errorf("the password file %s is readable or writable by other users (mode %04o): chmod 600 %s first", pf, fi.Mode().Perm(), pf)
		}
	}
	dir := c.StoreDir()
	if dir == "" {
		return nil
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if !create {
			return fmt.Errorf("the store directory %s does not exist: check storage.url, or give --create to make it", dir)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("creating the store directory: %w", err)
		}
		fmt.Fprintf(os.Stderr, "ebbfs: created the store directory %s\n", dir)
	} else if err != nil {
		return fmt.Errorf("the store directory: %w", err)
	}
	return nil
}
