package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/internal/daemon"
)

type runFlags struct {
	readOnly   bool
	takeOver   bool
	standby    bool
	mountpoint string
	checkpoint string
}

func newRunCmd(g *globalFlags) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the writer (or, with --read-only, a reader) in the foreground",
		Long: `Open the filesystem, mount it at [mount] path, serve NBD exports (the regular
files in /.nbd/) and the admin endpoint, and run until SIGINT, SIGTERM or
umount. Every path to exit runs a final durability barrier first. Only one
writer may run against a store at a time: a second one is refused while the
first holds the writer lease.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			if f.mountpoint != "" {
				abs, err := filepath.Abs(f.mountpoint)
				if err != nil {
					return err
				}
				c.Mount.Path = abs
			}
			if err := c.ValidateForRun(); err != nil {
				return fmt.Errorf("config %s: %w", c.Path, err)
			}
			if err := f.check(); err != nil {
				return err
			}
			if f.checkpoint != "" {
				if err := checkpoint.ValidName(f.checkpoint); err != nil {
					return &usageError{fmt.Errorf("--checkpoint: %w", err)}
				}
				f.readOnly = true // a checkpoint is served read-only
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			// Signals are caught from the start so that an early SIGTERM
			// still goes through the orderly path.
			sigs := make(chan os.Signal, 4)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
			defer signal.Stop(sigs)
			return daemon.Run(daemon.Options{Config: c, ReadOnly: f.readOnly || f.standby, Standby: f.standby, TakeOver: f.takeOver, Checkpoint: f.checkpoint,
				Version: versionString(), Log: log, Unlock: unlock, Signals: sigs})
		},
	}
	cmd.Flags().BoolVar(&f.readOnly, "read-only", false, "run a read-only replica that follows the writer; writes fail with EROFS")
	cmd.Flags().BoolVar(&f.standby, "standby", false, "run a standby writer: a replica that becomes the writer in place when the writer shows no sign of life for [ha] takeover_after (see README)")
	cmd.Flags().BoolVar(&f.takeOver, "take-over", false, "take the writer lease at once from a writer that crashed or is cut off on another machine (it is fenced; see README)")
	cmd.Flags().StringVar(&f.mountpoint, "mountpoint", "", "mount here instead of [mount] path")
	cmd.Flags().StringVar(&f.checkpoint, "checkpoint", "", "serve the state of checkpoint NAME read-only (does not follow the writer)")
	return cmd
}

// check refuses flags that contradict each other.
func (f *runFlags) check() error {
	switch {
	case f.takeOver && (f.readOnly || f.checkpoint != ""):
		return &usageError{errors.New("--take-over is for a writer; a replica takes no lease")}
	case f.standby && (f.readOnly || f.takeOver || f.checkpoint != ""):
		return &usageError{errors.New("--standby runs a replica that takes over by itself; it goes with none of --read-only, --take-over, --checkpoint")}
	case f.readOnly && f.checkpoint != "":
		return &usageError{errors.New("--read-only runs a replica that follows the writer; --checkpoint serves one fixed checkpoint (read-only too): give one of them")}
	}
	return nil
}
