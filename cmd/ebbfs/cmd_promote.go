package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/internal/daemon"
)

func newPromoteCmd(g *globalFlags) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "promote",
		Short: "Make the standby running with this config the writer (a planned switch-over)",
		Long: `Ask the standby (ebbfs run --standby) running with this configuration to
become the writer: it asks the writer for a handover; the writer refuses
new writes, makes everything written durable, releases its lease to this
standby and goes on as a standby itself; this standby takes the lease and
its mount accepts writes in place. Nothing acknowledged is lost; writes
are refused (EROFS) from the writer's final barrier until the standby
accepts them, and promote prints how long the whole switch took.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runPromote(cmd.OutOrStdout(), g, timeout) },
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Minute, "give up after this long")
	return cmd
}

// runPromote asks the standby for the switch-over and reports it.
func runPromote(out io.Writer, g *globalFlags, timeout time.Duration) error {
	c, err := g.load()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var res daemon.PromoteResult
	if err := adminClient(c).Do(ctx, "POST", daemon.RoutePromote, nil, &res); err != nil {
		return err
	}
	fmt.Fprintf(out, "promoted: this process is the writer (epoch %d); the switch-over took %.2fs from the request to writes being accepted here\n", res.Epoch, res.TookSec)
	return nil
}
