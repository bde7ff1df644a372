package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/daemon"
	"ebbfs.dev/ebbfs/internal/keys"
)

func newInitCmd(g *globalFlags) *cobra.Command {
	var cipher string
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create a new filesystem in the configured store (refuses if one exists)",
		Long: `Create a new, empty ebbfs filesystem in the object store named by
[storage] url. The password comes from [encryption] password_file or the
EBBFS_PASSWORD environment variable and must have at least 8 characters.
init refuses to touch a store that already holds a filesystem.

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
	return cmd
}
