package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"ebbfs.dev/ebbfs/internal/monitor"
)

func newMonitorCmd(g *globalFlags) *cobra.Command {
	var interval time.Duration
	var count int
	var plain bool
	cmd := &cobra.Command{
		Use:   "monitor",
		Short: "Watch the running writer or reader: I/O, store traffic, footprint, reclamation, durability",
		Long: `Watch the running writer (or reader) over its admin socket.

On a terminal, a full-screen view shows the process's role and uptime (a
replica's lag), I/O and store traffic as sparklines over the last two
minutes, the segment footprint by state, what every reclamation stage is
doing right now (tombstone cleaner, cycle, repack jobs, orphan sweep,
metadata GC, checkpoints) and durability (barriers, dirty bytes, caches,
memory). Keys: q quit, ? help, tab / shift+tab move between panels,
r run a reclamation cycle now, s run an orphan sweep now (both ask to
confirm). It follows terminal resizes and works over SSH.

Without a terminal (a pipe, or --plain) it prints one line per sample;
--count stops after N samples.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			if interval < 100*time.Millisecond {
				return &usageError{fmt.Errorf("--interval %s is below 100ms", interval)}
			}
			tty := !plain && isTerminal(os.Stdout) && isTerminal(os.Stdin)
			if count < 0 || (count > 0 && tty) {
				return &usageError{fmt.Errorf("--count %d: give a positive count, for the line-per-sample output (add --plain on a terminal)", count)}
			}
			cl := adminClient(c)
			if tty {
				return monitor.RunTUI(cl, interval)
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return monitor.Plain(ctx, cl, cmd.OutOrStdout(), interval, count)
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "time between samples")
	cmd.Flags().IntVar(&count, "count", 0, "without a terminal: stop after this many samples (0: until interrupted)")
	cmd.Flags().BoolVar(&plain, "plain", false, "print one line per sample even on a terminal")
	return cmd
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
