package main

import (
	"context"
	"encoding/json"
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
		Short: "Create, list, show and delete checkpoints",
		Long: `A checkpoint pins a published manifest and so every segment it references.
A persistent checkpoint pauses segment deletion and repack while it exists
(dead bytes keep being counted and are reclaimed once it is deleted); an
ephemeral one expires unless renewed and only lengthens the grace period.
create needs the running writer; list, info and delete also work without
one (they read the records in the store directly).`,
	}
	var ttl time.Duration
	var persistent bool
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
			if persistent {
				req = telemetry.CheckpointRequest{Name: args[0], Kind: checkpoint.Persistent}
			} else if ttl <= 0 {
				return &usageError{errors.New("give --persistent or a positive --ttl")}
			}
			var rec checkpoint.Record
			if err := adminClient(c).Do(context.Background(), http.MethodPost, telemetry.RouteCheckpoints, req, &rec); err != nil {
				return err
			}
			printCheckpoints(cmd.OutOrStdout(), []checkpoint.Record{rec})
			return nil
		},
	}
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
			ctx := context.Background()
			var recs []checkpoint.Record
			err = adminClient(c).Do(ctx, http.MethodGet, telemetry.RouteCheckpoints, nil, &recs)
			if errors.Is(err, admin.ErrNotRunning) {
				recs, err = storeCheckpoints(ctx, c)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), recs)
			}
			printCheckpoints(cmd.OutOrStdout(), recs)
			return nil
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")

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
			return printJSON(cmd.OutOrStdout(), rec)
		},
	}

	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a checkpoint (reclamation catches up afterwards)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			ctx := context.Background()
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
	cmd.AddCommand(create, list, info, del)
	return cmd
}

func storeCheckpoints(ctx context.Context, c *config.Config) ([]checkpoint.Record, error) {
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

func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}
