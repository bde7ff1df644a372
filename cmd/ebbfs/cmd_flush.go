package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/internal/admin"
	"ebbfs.dev/ebbfs/internal/config"
)

func adminClient(c *config.Config) *admin.Client {
	return admin.NewClient(c.Admin.UnixSocket, c.AdminListen())
}

func newFlushCmd(g *globalFlags) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "flush",
		Short: "Ask the running writer to make everything written so far durable",
		Long: `Run a durability barrier in the running writer (over its admin socket):
when flush exits 0, every write that completed before it started is in the
object store. Exits non-zero if no writer runs or the barrier fails. A
read-only replica or checkpoint reader writes nothing: flush says so and
exits 0 without a barrier.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			cl := adminClient(c)
			st, err := cl.Status(ctx)
			if err != nil {
				return err
			}
			if st.ReadOnly {
				fmt.Fprintf(cmd.OutOrStdout(), "nothing to flush: the process at %s is read-only (it writes nothing); flush the writer instead\n", st.Mountpoint)
				return nil
			}
			if err := cl.Flush(ctx); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "flushed")
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "give up after this long")
	return cmd
}
