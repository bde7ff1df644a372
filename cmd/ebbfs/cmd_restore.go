package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/internal/admin"
	"ebbfs.dev/ebbfs/internal/daemon"
	"ebbfs.dev/ebbfs/internal/telemetry"
)

func newCheckpointRestoreCmd(g *globalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "restore NAME",
		Short: "Make the filesystem's current state the checkpoint's, in place",
		Long: `Roll the filesystem back to checkpoint NAME, in place: every file,
directory and attribute becomes what it was in the checkpoint. First a
persistent checkpoint of the state being replaced is made (named in the
output): restoring it undoes the restore, deleting it lets reclamation
free what only that state referenced.

Through the running writer (its admin socket), or, when none runs, on the
filesystem opened as the writer for the restore. Refused on a replica.
Open files that the checkpoint's state does not hold read ESTALE after
the restore; files open across it that it changed read the restored
contents and refuse writes (ESTALE). Writes made while it runs to files
it changes are lost.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkpoint.ValidName(name); err != nil {
				return &usageError{err}
			}
			c, err := g.load()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var rep telemetry.RestoreReply
			err = adminClient(c).Do(ctx, http.MethodPost, telemetry.RouteRestore, telemetry.RestoreRequest{Name: name}, &rep)
			if errors.Is(err, admin.ErrNotRunning) {
				log, lerr := g.logger()
				if lerr != nil {
					return lerr
				}
				rep, err = daemon.RestoreOffline(ctx, daemon.Options{Config: c, Version: versionString(), Log: log, Unlock: unlock}, name)
			}
			if err != nil {
				return err
			}
			return emit(cmd.OutOrStdout(), asJSON, rep, func(w io.Writer) { printRestore(w, rep) })
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printRestore(w io.Writer, r telemetry.RestoreReply) {
	fmt.Fprintf(w, "restored checkpoint %s (manifest %d) in %.1f s\n", r.Checkpoint, r.Manifest, r.Seconds)
	fmt.Fprintf(w, "the state before is checkpoint %s (persistent): restore it to undo, delete it to reclaim its space\n", r.PreRestore)
	fmt.Fprintf(w, "inodes: %d changed, %d brought back, %d removed; live bytes %d -> %d; segments: %d live again, %d now dead\n",
		r.InodesChanged, r.InodesAdded, r.InodesRemoved, r.LiveBytesBefore, r.LiveBytesAfter, r.SegmentsRevived, r.SegmentsDead)
}
