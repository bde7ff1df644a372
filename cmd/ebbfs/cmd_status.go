package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"ebbfs.dev/ebbfs/internal/admin"
	"ebbfs.dev/ebbfs/internal/monitor"
	"ebbfs.dev/ebbfs/internal/telemetry"
)

func newStatusCmd(g *globalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the running process's health and status",
		Long: `Show the running writer's or reader's health first (role, lease, last
barrier, dirty bytes, replicas, store, damage, cache disk), then its
addresses and alarms. When no process answers, say what a crashed one
left behind (a dead mount, a stale socket, an unreleased lease) and how
to recover, and exit 1.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out := cmd.OutOrStdout()
			st, err := adminClient(c).Status(ctx)
			if errors.Is(err, admin.ErrNotRunning) {
				left := leftBehind(ctx, c)
				if asJSON {
					if perr := printJSON(out, notRunning{Running: false, LeftBehind: left}); perr != nil {
						return perr
					}
				} else {
					printLeftBehind(out, left)
				}
				return err
			}
			if err != nil {
				return err
			}
			h, _ := statusHealth(st)
			if asJSON {
				return printJSON(out, statusJSON(st, h))
			}
			printStatus(out, st, h)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// statusHealth decodes the health summary from a status reply.
func statusHealth(st admin.Status) (telemetry.Health, bool) {
	var h telemetry.Health
	raw, ok := st.Extra[telemetry.ExtraHealth]
	if !ok {
		return h, false
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return h, false
	}
	return h, json.Unmarshal(b, &h) == nil
}

// statusJSON is `status --json`: the status fields, the health summary,
// and what other subsystems added under "extra".
func statusJSON(st admin.Status, h telemetry.Health) map[string]any {
	m, _ := jsonStyle(reflect.ValueOf(st))
	out := m.(map[string]any)
	hv, _ := jsonStyle(reflect.ValueOf(h))
	out["health"] = hv
	if ex, ok := out["extra"].(map[string]any); ok {
		delete(ex, telemetry.ExtraHealth)
	}
	out["running"] = true
	return out
}

// termWidth is the width of the terminal on stdout, or def.
func termWidth(def int) int {
	if w, _, err := term.GetSize(int(os.Stdout.Fd())); err == nil && w >= 40 {
		return w
	}
	return def
}

func printStatus(out io.Writer, st admin.Status, h telemetry.Health) {
	if h.Role != "" {
		label := "health:     "
		for _, l := range monitor.FitParts(monitor.HealthParts(h, time.Now()), monitor.HealthSep, "", termWidth(100)-len(label)) {
			fmt.Fprintf(out, "%s%s\n", label, l)
			label = strings.Repeat(" ", len(label))
		}
	}
	mode := "writer"
	if st.ReadOnly {
		mode = "reader (read-only)"
	}
	if h.HA != nil && h.HA.Role == telemetry.RoleStandby {
		mode = "standby writer (read-only until it takes over)"
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
	fmt.Fprintf(out, "barriers:   %d (%d failed), %d by ebbfs flush\n", h.Barriers, h.BarrierFailures, st.Flushes)
	printHA(out, h.HA)
	printDamage(out, st)
	if h.Fenced != "" {
		fmt.Fprintf(out, "FENCED: %s; this process acknowledges nothing more: stop it\n", h.Fenced)
	}
	printAlarms(out, st)
}

// printAlarms prints what needs the operator's attention.
func printAlarms(out io.Writer, st admin.Status) {
	if st.LastError != "" {
		fmt.Fprintf(out, "last flush error: %s\n", st.LastError)
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
	if r, ok := st.Extra["mirror"].(map[string]any); ok {
		printMirror(out, r)
	}
	if r, ok := st.Extra[telemetry.ExtraReplica].(map[string]any); ok {
		fmt.Fprintf(out, "replica:    serves journal %v (manifest %v), %.1fs behind the newest durable state\n",
			r["served_seq"], r["manifest"], r["lag_seconds"])
		if e, ok := r["error"].(string); ok && e != "" {
			fmt.Fprintf(out, "replica:    the last probe of the store failed: %s\n", e)
		}
	}
}

// printMirror prints the writer's mirror line: how far behind it can be,
// in seconds and bytes, and what it has done.
func printMirror(out io.Writer, r map[string]any) {
	fmt.Fprintf(out, "mirror:     %.1fs and %s behind the writer's durable state; journal %v copied, %v deletions waiting for the retention\n",
		r["lag_seconds"], fmtMirrorBytes(r["lag_bytes"]), r["journal"], r["pending_deletes"])
	if e, _ := r["last_error"].(string); e != "" {
		fmt.Fprintf(out, "mirror:     the last round failed: %s\n", e)
	}
}

func fmtMirrorBytes(v any) string {
	f, _ := v.(float64)
	return fmt.Sprintf("%.1f MiB", f/(1<<20))
}

// printHA prints a standby's watch, or a writer's standbys.
func printHA(out io.Writer, ha *telemetry.HAStatus) {
	switch {
	case ha == nil:
	case ha.Role == telemetry.RoleStandby && ha.Armed:
		fmt.Fprintf(out, "standby:    armed; writer %s (epoch %d) last seen alive %.1fs ago, takes over after %.0fs\n",
			ha.Writer, ha.Epoch, ha.SinceSignOfLifeSec, ha.TakeoverAfterSec)
	case ha.Role == telemetry.RoleStandby:
		fmt.Fprintf(out, "standby:    not armed yet (the writer %s has not heartbeated for it); last seen alive %.1fs ago\n",
			ha.Writer, ha.SinceSignOfLifeSec)
	case ha.Role == telemetry.RoleWriter && len(ha.Standbys) > 0:
		fmt.Fprintf(out, "standbys:   %s; heartbeat every %.2fs\n", strings.Join(ha.Standbys, ", "), ha.HeartbeatEverySec)
	}
	if ha != nil && ha.Failovers > 0 {
		fmt.Fprintf(out, "failovers:  %d (this process took over at %s)\n", ha.Failovers, ha.Promoted.Format(time.RFC3339))
	}
}
