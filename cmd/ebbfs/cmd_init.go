package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/keys"
)

func newInitCmd(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "init",
		Short: "Create a new filesystem in the configured store (refuses if one exists)",
		Long: `Create a new, empty ebbfs filesystem in the object store named by
[storage] url. The password comes from [encryption] password_file or the
EBBFS_PASSWORD environment variable and must have at least 8 characters.
init refuses to touch a store that already holds a filesystem.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			if _, err := g.logger(); err != nil {
				return err
			}
			pw, src, err := c.Password()
			if err != nil {
				return err
			}
			if len(pw) < keys.MinPasswordLen {
				return fmt.Errorf("the password from %s is too short: at least %d characters are required", src, keys.MinPasswordLen)
			}
			ctx := context.Background()
			st, err := openStore(ctx, c)
			if err != nil {
				return err
			}
			k, err := fs.Init(ctx, st, pw)
			if err != nil {
				if errors.Is(err, keys.ErrShortPassword) {
					return fmt.Errorf("the password from %s: %w", src, err)
				}
				return fmt.Errorf("%s: %w", c.Storage.URL, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "initialized ebbfs filesystem %s in %s\n", uuidString(k.UUID), c.Storage.URL)
			return nil
		},
	}
}

func uuidString(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
