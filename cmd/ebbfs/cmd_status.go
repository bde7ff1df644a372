package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/internal/telemetry"
)

func newStatusCmd(g *globalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the running writer's status",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st, err := adminClient(c).Status(ctx)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				b, _ := json.MarshalIndent(st, "", "  ")
				fmt.Fprintln(out, string(b))
				return nil
			}
			mode := "writer"
			if st.ReadOnly {
				mode = "reader (read-only)"
			}
			fmt.Fprintf(out, "ebbfs %s, pid %d, %s, up %s\n", st.Version, st.PID, mode, time.Duration(st.UptimeSec*float64(time.Second)).Truncate(time.Second))
			fmt.Fprintf(out, "store:      %s\n", st.Store)
			if st.FSUUID != "" {
				fmt.Fprintf(out, "filesystem: %s\n", st.FSUUID)
			}
			fmt.Fprintf(out, "mountpoint: %s\n", st.Mountpoint)
			for _, a := range st.NBD {
				fmt.Fprintf(out, "nbd:        %s\n", a)
			}
			for _, a := range st.Admin {
				fmt.Fprintf(out, "admin:      %s\n", a)
			}
			if st.LastError != "" {
				fmt.Fprintf(out, "last barrier error: %s\n", st.LastError)
			}
			if since, ok := st.Extra[telemetry.ExtraStoreUnreachableSince].(string); ok {
				fmt.Fprintf(out, "STORE UNREACHABLE since %s; last error: %v\n", since, st.Extra[telemetry.ExtraStoreLastError])
			}
			free, ok1 := st.Extra[telemetry.ExtraCacheDirFree].(float64)
			floor, ok2 := st.Extra[telemetry.ExtraCacheDirFloor].(float64)
			if failed, ok := st.Extra[telemetry.ExtraMetadataFailed].(string); ok {
				fmt.Fprintf(out, "STOPPED: %s; every operation fails with EIO and nothing more is acknowledged; stop this writer and start it with a healthy cache directory (everything fsynced is in the store)\n", failed)
			}
			if released, _ := st.Extra[telemetry.ExtraCacheDirReserveReleased].(bool); released {
				fmt.Fprintf(out, "CACHE DIRECTORY FULL: %.1f MiB free, the metadata store's emergency reserve is in use; everything that adds metadata fails with ENOSPC until there is room (fsync of earlier writes goes on)\n", free/(1<<20))
			} else if ok1 && ok2 && free < floor {
				fmt.Fprintf(out, "CACHE DIRECTORY FULL: %.1f MiB free, new writes need %.1f MiB; they fail with ENOSPC until there is room\n", free/(1<<20), floor/(1<<20))
			}
			if r, ok := st.Extra[telemetry.ExtraReplica].(map[string]any); ok {
				fmt.Fprintf(out, "replica:    serves journal %v (manifest %v), %.1fs behind the newest durable state\n",
					r["served_seq"], r["manifest"], r["lag_seconds"])
				if e, ok := r["error"].(string); ok && e != "" {
					fmt.Fprintf(out, "replica:    the last probe of the store failed: %s\n", e)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
