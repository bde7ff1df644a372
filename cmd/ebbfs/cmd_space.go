package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/internal/monitor"
	"ebbfs.dev/ebbfs/internal/telemetry"
)

func newSpaceCmd(g *globalFlags) *cobra.Command {
	var asJSON, cost bool
	cmd := &cobra.Command{
		Use:   "space",
		Short: "Show where the filesystem's bytes are (live, fragmented, dead, pinned)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			var rep telemetry.SpaceReply
			if err := adminClient(c).Do(context.Background(), http.MethodGet, telemetry.RouteSpace, nil, &rep); err != nil {
				return err
			}
			if cost {
				return spaceCost(cmd.OutOrStdout(), c, rep, asJSON)
			}
			return emit(cmd.OutOrStdout(), asJSON, rep, func(w io.Writer) { printSpace(w, rep) })
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&cost, "cost", false, "also estimate the monthly bill from the footprint and request rates ([pricing]; with --json, only the estimate)")
	return cmd
}

func printSpace(w io.Writer, r telemetry.SpaceReply) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "live data\t%s\n", monitor.HumanBytes(r.LiveBytes))
	fmt.Fprintf(tw, "segments\t%d, %s stored\n", r.SegmentCount, monitor.HumanBytes(r.SegmentBytes))
	fmt.Fprintf(tw, "fragmented (repack's work)\t%s\n", monitor.HumanBytes(r.FragmentedBytes))
	fmt.Fprintf(tw, "dead segments (deletion's work)\t%d, %s\n", r.DeadSegments, monitor.HumanBytes(r.DeadBytes))
	if r.AwaitingSegments > 0 {
		fmt.Fprintf(tw, "awaiting their deadline\t%d, %s, first due %s\n", r.AwaitingSegments, monitor.HumanBytes(r.AwaitingBytes), r.EarliestDeadline.Local().Format(time.RFC3339))
	}
	if r.HeldBy != "" {
		fmt.Fprintf(tw, "held back by ttl checkpoint %s\t%s awaiting: dead segments wait %s (its span + 30 s) while it lives; it expires %s\n",
			r.HeldBy, monitor.HumanBytes(r.AwaitingBytes), r.HeldGrace.Round(time.Second), r.HeldUntil.Local().Format(time.RFC3339))
	}
	for name, b := range r.Pinned {
		fmt.Fprintf(tw, "pinned by checkpoint %s\t%s\n", name, monitor.HumanBytes(b))
	}
	if r.CheckpointError != "" {
		fmt.Fprintf(tw, "checkpoints\tunreadable: %s\n", r.CheckpointError)
	}
	fmt.Fprintf(tw, "deleted files awaiting the cleaner\t%d, %s\n", r.TombstonesPending, monitor.HumanBytes(r.TombstoneBytes))
	if r.MetaError != "" {
		fmt.Fprintf(tw, "metadata objects\tunknown: %s\n", r.MetaError)
	} else {
		fmt.Fprintf(tw, "metadata objects\t%d, %s\n", r.MetaObjects, monitor.HumanBytes(r.MetaBytes))
	}
	if !r.LastSweep.IsZero() {
		fmt.Fprintf(tw, "last orphan sweep\t%s\n", r.LastSweep.Local().Format(time.RFC3339))
	}
	if !r.NextSweep.IsZero() {
		fmt.Fprintf(tw, "next orphan sweep\t%s\n", r.NextSweep.Local().Format(time.RFC3339))
	}
	tw.Flush()
}
