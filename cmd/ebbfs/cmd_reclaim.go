package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/internal/monitor"
	"ebbfs.dev/ebbfs/internal/telemetry"
	"ebbfs.dev/ebbfs/reclaim"
)

func newReclaimCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reclaim",
		Short: "Run reclamation now in the running writer",
		Long: `The writer reclaims space on its own (a cycle when dead bytes appear,
an orphan sweep every 24 h). These commands run a step now and print its
summary. Safety rules (deadlines, checkpoints) are the same as always.`,
	}
	var asJSON bool
	run := &cobra.Command{
		Use:   "run",
		Short: "Run a reclamation cycle (dead-segment deletion and repack)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			var st reclaim.CycleStats
			cl := adminClient(c)
			if err := withReclaimProgress(cl, "cycle", func() error {
				return cl.Do(context.Background(), http.MethodPost, telemetry.RouteReclaimRun, struct{}{}, &st)
			}); err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), st)
			}
			var space *telemetry.SpaceReply
			if st.Paused {
				var rep telemetry.SpaceReply
				if adminClient(c).Do(context.Background(), http.MethodGet, telemetry.RouteSpace, nil, &rep) == nil {
					space = &rep
				}
			}
			printCycle(cmd.OutOrStdout(), st, space)
			return nil
		},
	}
	run.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	var sweepJSON bool
	sweep := &cobra.Command{
		Use:   "sweep",
		Short: "Run the orphan sweep (lists segments/ and removes unreferenced objects)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			var st reclaim.SweepStats
			cl := adminClient(c)
			if err := withReclaimProgress(cl, "sweep", func() error {
				return cl.Do(context.Background(), http.MethodPost, telemetry.RouteReclaimSweep, struct{}{}, &st)
			}); err != nil {
				return err
			}
			if sweepJSON {
				return printJSON(cmd.OutOrStdout(), st)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "sweep: %d listed, %d without counter, %d deleted (%s), %d unreadable kept, %d referenced, complete=%v, took %s\n",
				st.Listed, st.Counterless, st.Deleted, monitor.HumanBytes(st.DeletedBytes), st.Unreadable, st.Referenced, st.Complete, st.Duration.Round(time.Millisecond))
			return nil
		},
	}
	sweep.Flags().BoolVar(&sweepJSON, "json", false, "print JSON")
	cmd.AddCommand(run, sweep)
	return cmd
}

// printCycle prints a cycle's summary and what it left undone, and why.
func printCycle(w io.Writer, st reclaim.CycleStats, space *telemetry.SpaceReply) {
	fmt.Fprintf(w, "cycle: %d counters scanned, %d dead, %d deleted (%s freed), %d repacks (%d failed), %d frames relocated, took %s\n",
		st.Counters, st.Dead, st.Deleted, monitor.HumanBytes(st.BytesFreed), st.Repacks, st.RepackFailed, st.RelocatedFrames, st.Duration.Round(time.Millisecond))
	if st.Paused {
		for _, name := range st.PinnedBy {
			held := ""
			if space != nil {
				held = fmt.Sprintf(", holding %s", monitor.HumanBytes(space.Pinned[name]))
			}
			fmt.Fprintf(w, "not done: deletion and repack are paused by persistent checkpoint %s%s (delete it to resume: ebbfs checkpoint delete %s)\n", name, held, name)
		}
	} else if st.Blocked != "" {
		fmt.Fprintf(w, "not done: nothing reclaimed: %s\n", st.Blocked)
	}
	if st.Waiting > 0 {
		fmt.Fprintf(w, "not done: %d dead segments (%s) wait for their deadline, the first in %s (the grace period that lets readers finish)\n",
			st.Waiting, monitor.HumanBytes(st.WaitingBytes), st.NextDeadline.Round(time.Second))
	}
	if st.Cooling > 0 {
		fmt.Fprintf(w, "not done: %d fragmented segments are still losing frames (cooling) and are repacked once settled, the first in %s\n",
			st.Cooling, st.CoolIn.Round(time.Second))
	}
}
