package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/keys"
)

func newUpgradeCmd(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "upgrade",
		Short: "Move the filesystem to this build's store format",
		Long: fmt.Sprintf(`Move the filesystem's descriptor to store format %d (docs/FORMAT.md). Format 3
lets the writer seal extents of data that does not compress in 4 KiB pieces,
so that small random reads read only what they need; format 4 lets an
extent's value hold patches, so that a write into part of an extent can be
stored as only its bytes (docs/PATCHES.md). The password comes from the
configuration and is checked first; upgrade prints what changes for the
filesystem. Nothing else is rewritten: data already stored stays as it is
and reads as before, and the writer uses the new format from its next start.

Builds that do not know format %d refuse to mount the filesystem once it is
upgraded: upgrade after every machine that mounts it (writer and replicas)
runs this build.`, keys.FormatVersion, keys.FormatVersion),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, pw, src, err := g.loadWithPassword()
			if err != nil {
				return err
			}
			ctx := context.Background()
			st, err := openStore(ctx, c)
			if err != nil {
				return err
			}
			from, to, err := fs.Upgrade(ctx, st, pw)
			if err != nil {
				if errors.Is(err, keys.ErrWrongPassword) {
					return &exitError{exitWrongPass, fmt.Errorf("wrong password: the password from %s does not unlock the filesystem in %s", src, c.Storage.URL)}
				}
				return err
			}
			if from == to {
				fmt.Fprintf(cmd.OutOrStdout(), "%s is already at store format %d\n", c.Storage.URL, to)
				return nil
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "upgraded %s from store format %d to %d; a running writer uses it from its next start\n", c.Storage.URL, from, to)
			for _, l := range keys.UpgradeChanges(from) {
				fmt.Fprintf(out, "  %s\n", l)
			}
			return nil
		},
	}
}
