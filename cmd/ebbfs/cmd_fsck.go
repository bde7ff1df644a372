package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/fs"
)

func newFsckCmd(g *globalFlags) *cobra.Command {
	var verifyData, listDamaged, asJSON bool
	cmd := &cobra.Command{
		Use:   "fsck",
		Short: "Check the filesystem in the store for consistency",
		Long: `Check the durable state of the filesystem from the store alone: the
namespace, every segment counter against the pointers that reference it, and
that every pointer's segment and frame exist. --verify-data also reads and
authenticates every live frame, and names each damaged file by its paths and
byte range; --list-damaged (which implies --verify-data) prints only the
damaged files, one path a line, and the report on stderr. fsck rebuilds the metadata in a temporary
directory, takes no lease and writes nothing to the store; it checks what was
made durable (run 'ebbfs flush' first to include the latest writes).
Exits 0 when the filesystem is consistent, 1 otherwise.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if listDamaged && asJSON {
				return fmt.Errorf("fsck: --list-damaged prints paths, --json a report: give one of them")
			}
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
			pr := newProgress("fsck")
			rep, err := fs.Fsck(ctx, st, k, fs.FsckOptions{VerifyData: verifyData || listDamaged, Logger: log, Progress: func(p fs.FsckProgress) {
				pr.update(p.Phase, p.Done, p.Total, p.DoneBytes, p.TotalBytes, p.Total == 0 || p.Done == p.Total)
			}})
			pr.done()
			if err != nil {
				return fmt.Errorf("fsck: %w", err)
			}
			if listDamaged {
				for _, p := range rep.DamagedFiles() {
					fmt.Fprintln(cmd.OutOrStdout(), p)
				}
				fmt.Fprint(cmd.ErrOrStderr(), rep.String())
			} else if err := emit(cmd.OutOrStdout(), asJSON, rep, func(w io.Writer) { fmt.Fprint(w, rep.String()) }); err != nil {
				return err
			}
			if !rep.OK() {
				return fmt.Errorf("fsck found %d problem(s) in %s", len(rep.Problems), c.Storage.URL)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&verifyData, "verify-data", false, "also read and authenticate every live frame")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&listDamaged, "list-damaged", false, "print the damaged files, one path a line (implies --verify-data)")
	return cmd
}
