package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/fs"
)

func newFsckCmd(g *globalFlags) *cobra.Command {
	var verifyData bool
	cmd := &cobra.Command{
		Use:   "fsck",
		Short: "Check the filesystem in the store for consistency",
		Long: `Check the durable state of the filesystem from the store alone: the
namespace, every segment counter against the pointers that reference it, and
that every pointer's segment and frame exist. --verify-data also reads and
authenticates every live frame. fsck rebuilds the metadata in a temporary
directory, takes no lease and writes nothing to the store; it checks what was
made durable (run 'ebbfs flush' first to include the latest writes).
Exits 0 when the filesystem is consistent, 1 otherwise.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			ctx := context.Background()
			st, k, err := unlock(ctx, c)
			if err != nil {
				return err
			}
			rep, err := fs.Fsck(ctx, st, k, fs.FsckOptions{VerifyData: verifyData, Logger: log})
			if err != nil {
				return fmt.Errorf("fsck: %w", err)
			}
			fmt.Fprint(cmd.OutOrStdout(), rep.String())
			if !rep.OK() {
				return fmt.Errorf("fsck found %d problem(s) in %s", len(rep.Problems), c.Storage.URL)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&verifyData, "verify-data", false, "also read and authenticate every live frame")
	return cmd
}
