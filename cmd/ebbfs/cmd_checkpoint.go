package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/internal/admin"
	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/internal/telemetry"
	"ebbfs.dev/ebbfs/objstore"
)

func newCheckpointCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "checkpoint",
		Short: "Create, list, show, delete and restore checkpoints",
		Long: `A checkpoint pins a published manifest and so every segment it references.
A persistent checkpoint pauses segment deletion and repack while it exists
(dead bytes keep being counted and are reclaimed once it is deleted); an
ephemeral one expires unless renewed and only lengthens the grace period.
create needs the running writer; list, info and delete also work without
one (they read the records in the store directly). restore rolls the
filesystem back to a checkpoint, through the running writer or, when none
runs, by opening the filesystem for it.`,
	}
	var ttl time.Duration
	var persistent, createJSON bool
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a checkpoint of everything written so far",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			req := telemetry.CheckpointRequest{Name: args[0], Kind: checkpoint.Ephemeral, TTLSeconds: ttl.Seconds()}
			if persistent && cmd.Flags().Changed("ttl") {
				return &usageError{errors.New("--persistent keeps a checkpoint until deleted; --ttl makes it expire: give one of them")}
			}
			if persistent {
				req = telemetry.CheckpointRequest{Name: args[0], Kind: checkpoint.Persistent}
			} else if ttl <= 0 {
				return &usageError{errors.New("give --persistent or a positive --ttl")}
			}
			var rec checkpoint.Record
			if err := adminClient(c).Do(context.Background(), http.MethodPost, telemetry.RouteCheckpoints, req, &rec); err != nil {
				return err
			}
			return emit(cmd.OutOrStdout(), createJSON, rec, func(w io.Writer) { printCheckpoints(w, []checkpoint.Record{rec}) })
		},
	}
	create.Flags().BoolVar(&createJSON, "json", false, "print JSON")
	create.Flags().BoolVar(&persistent, "persistent", false, "keep until deleted (pauses segment deletion and repack)")
	create.Flags().DurationVar(&ttl, "ttl", 0, "lifetime of an ephemeral checkpoint (e.g. 10m)")

	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List checkpoints",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			recs, err := listCheckpoints(context.Background(), c)
			if err != nil {
				return err
			}
			return emit(cmd.OutOrStdout(), asJSON, recs, func(w io.Writer) { printCheckpoints(w, recs) })
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	info := newCheckpointInfoCmd(g)

	del := newCheckpointDeleteCmd(g)
	cmd.AddCommand(create, list, info, del, newCheckpointRestoreCmd(g))
	return cmd
}

func newCheckpointDeleteCmd(g *globalFlags) *cobra.Command {
	var force bool
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a checkpoint (reclamation catches up afterwards)",
		Long: `Delete a checkpoint record. The record of a running replica, standby or
checkpoint reader (reader-*), and a checkpoint such a reader is serving
(run --checkpoint), are refused unless --force: delete says what it would
break.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			ctx := context.Background()
			// A list that fails (a malformed record, which an operator
			// deletes to mend it) leaves the guard blind, not the delete.
			recs, err := listCheckpoints(ctx, c)
			if err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "ebbfs: cannot tell whether a running reader needs %s (listing the checkpoints: %v); deleting it\n", args[0], err)
			}
			if risk := checkpoint.DeleteRisk(recs, args[0], time.Now()); risk != "" {
				if !force {
					return fmt.Errorf("not deleted: %s; give --force to delete it anyway", risk)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "ebbfs: deleting anyway (--force): %s\n", risk)
			}
			err = adminClient(c).Do(ctx, http.MethodDelete, telemetry.RouteCheckpoints+"/"+url.PathEscape(args[0]), nil, nil)
			if errors.Is(err, admin.ErrNotRunning) {
				var st objstore.Store
				if st, err = openStore(ctx, c); err == nil {
					err = checkpoint.Delete(ctx, st, args[0])
				}
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted checkpoint %s\n", args[0])
			return nil
		},
	}
	del.Flags().BoolVar(&force, "force", false, "delete even a checkpoint a running reader needs")
	return del
}

// listCheckpoints lists the records through the running process, or
// from the store when none runs.
func listCheckpoints(ctx context.Context, c *config.Config) ([]checkpoint.Record, error) {
	var recs []checkpoint.Record
	err := adminClient(c).Do(ctx, http.MethodGet, telemetry.RouteCheckpoints, nil, &recs)
	if !errors.Is(err, admin.ErrNotRunning) {
		return recs, err
	}
	st, err := openStore(ctx, c)
	if err != nil {
		return nil, err
	}
	return checkpoint.List(ctx, st)
}

func printCheckpoints(w io.Writer, recs []checkpoint.Record) {
	if len(recs) == 0 {
		fmt.Fprintln(w, "no checkpoints")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tMANIFEST\tCREATED\tEXPIRES")
	for _, r := range recs {
		exp := "-"
		if !r.ExpireTime.IsZero() {
			exp = r.ExpireTime.Local().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", r.Name, r.Kind, r.ManifestSeq, r.CreateTime.Local().Format(time.RFC3339), exp)
	}
	tw.Flush()
}

// printCheckpoint prints one checkpoint record for `checkpoint info`.
func printCheckpoint(w io.Writer, r checkpoint.Record) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "name\t%s\n", r.Name)
	fmt.Fprintf(tw, "kind\t%s\n", r.Kind)
	fmt.Fprintf(tw, "manifest\t%d\n", r.ManifestSeq)
	fmt.Fprintf(tw, "created\t%s\n", r.CreateTime.Local().Format(time.RFC3339))
	switch {
	case r.ExpireTime.IsZero():
		fmt.Fprintf(tw, "expires\tnever (deletion and repack are paused while it exists)\n")
	case r.ExpireTime.Before(time.Now()):
		fmt.Fprintf(tw, "expires\t%s (expired; the next cycle ignores it)\n", r.ExpireTime.Local().Format(time.RFC3339))
	default:
		fmt.Fprintf(tw, "expires\t%s (in %s unless renewed)\n", r.ExpireTime.Local().Format(time.RFC3339), time.Until(r.ExpireTime).Round(time.Second))
	}
	tw.Flush()
}

func newCheckpointInfoCmd(g *globalFlags) *cobra.Command {
	var infoJSON bool
	info := &cobra.Command{
		Use:   "info NAME",
		Short: "Show one checkpoint",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			ctx := context.Background()
			var rec checkpoint.Record
			err = adminClient(c).Do(ctx, http.MethodGet, telemetry.RouteCheckpoints+"/"+url.PathEscape(args[0]), nil, &rec)
			if errors.Is(err, admin.ErrNotRunning) {
				var st objstore.Store
				if st, err = openStore(ctx, c); err == nil {
					rec, err = checkpoint.Get(ctx, st, args[0])
				}
			}
			if err != nil {
				return err
			}
			return emit(cmd.OutOrStdout(), infoJSON, rec, func(w io.Writer) { printCheckpoint(w, rec) })
		},
	}
	info.Flags().BoolVar(&infoJSON, "json", false, "print JSON")
	return info
}
