package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"ebbfs.dev/ebbfs/internal/admin"
	"ebbfs.dev/ebbfs/internal/stats"
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
			cl := adminClient(c)
			tty := !plain && isTerminal(os.Stdout) && isTerminal(os.Stdin)
			if tty {
				return runTUI(cl, interval)
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return monitorPlain(ctx, cl, cmd.OutOrStdout(), interval, count)
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "time between samples")
	cmd.Flags().IntVar(&count, "count", 0, "without a terminal: stop after this many samples (0: until interrupted)")
	cmd.Flags().BoolVar(&plain, "plain", false, "print one line per sample even on a terminal")
	return cmd
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// fetchState gets one monitorState.
func fetchState(ctx context.Context, cl *admin.Client) (monitorState, error) {
	var st monitorState
	err := cl.Do(ctx, http.MethodGet, routeMonitor, nil, &st)
	return st, err
}

// monitorPlain prints one line per sample.
func monitorPlain(ctx context.Context, cl *admin.Client, w io.Writer, interval time.Duration, count int) error {
	var prev *monitorState
	for n := 0; count == 0 || n < count; n++ {
		if n > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(interval):
			}
		}
		rctx, cancel := context.WithTimeout(ctx, interval+10*time.Second)
		st, err := fetchState(rctx, cl)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		fmt.Fprintln(w, plainLine(prev, &st))
		prev = &st
	}
	return nil
}

// rates are the per-second figures between two samples.
type rates struct {
	readB, writeB, readOps, writeOps float64
	req, up, down                    float64
	byKind                           map[string]float64
	barriers, extents                float64
	barrierLat                       stats.HistogramSnapshot // observations in the window
}

func rateOf(prev, cur *monitorState) rates {
	r := rates{byKind: map[string]float64{}}
	if prev == nil {
		r.barrierLat = cur.Engine.BarrierLatency
		return r
	}
	dt := cur.At.Sub(prev.At).Seconds()
	if dt <= 0 {
		return r
	}
	per := func(a, b float64) float64 { return math.Max(0, (a-b)/dt) }
	r.readB = per(ioSum(cur, "read", true), ioSum(prev, "read", true))
	r.writeB = per(ioSum(cur, "write", true), ioSum(prev, "write", true))
	r.readOps = per(ioSum(cur, "read", false), ioSum(prev, "read", false))
	r.writeOps = per(ioSum(cur, "write", false), ioSum(prev, "write", false))
	r.req = per(float64(cur.StoreRequests.Requests()), float64(prev.StoreRequests.Requests()))
	r.up = per(float64(cur.StoreRequests.BytesUp), float64(prev.StoreRequests.BytesUp))
	r.down = per(float64(cur.StoreRequests.BytesDown), float64(prev.StoreRequests.BytesDown))
	c, p := countsByOp(cur.StoreRequests), countsByOp(prev.StoreRequests)
	for k := range c {
		r.byKind[k] = per(float64(c[k]), float64(p[k]))
	}
	r.barriers = per(float64(cur.Engine.Barriers), float64(prev.Engine.Barriers))
	r.extents = per(float64(cur.Engine.ExtentsCleaned), float64(prev.Engine.ExtentsCleaned))
	r.barrierLat = cur.Engine.BarrierLatency.Sub(prev.Engine.BarrierLatency)
	return r
}

// ioSum adds FUSE and NBD counts (or bytes) of op.
func ioSum(st *monitorState, op string, bytes bool) float64 {
	v := 0.0
	for _, m := range []map[string]stats.OpSnapshot{st.FUSE, st.NBDOps} {
		if bytes {
			v += float64(m[op].Bytes)
		} else {
			v += float64(m[op].Count)
		}
	}
	return v
}

func plainLine(prev, cur *monitorState) string {
	r := rateOf(prev, cur)
	line := fmt.Sprintf("%s %s read=%s/s write=%s/s req/s=%.1f up=%s/s down=%s/s barriers=%d",
		cur.At.Local().Format(time.TimeOnly), cur.Role, humanBytes(int64(r.readB)), humanBytes(int64(r.writeB)),
		r.req, humanBytes(int64(r.up)), humanBytes(int64(r.down)), cur.Engine.Barriers)
	if cur.Replica != nil {
		line += fmt.Sprintf(" lag=%s", secs(cur.Replica.LagSeconds))
	}
	if sp := cur.Space; sp != nil {
		line += fmt.Sprintf(" live=%s stored=%s fragmented=%s dead=%s awaiting=%s tombstones=%d",
			humanBytes(sp.LiveBytes), humanBytes(sp.SegmentBytes), humanBytes(sp.FragmentedBytes),
			humanBytes(sp.DeadBytes), humanBytes(sp.AwaitingBytes), sp.TombstonesPending)
	}
	if a := cur.Reclaim; a != nil {
		line += " cycle=" + a.Phase
		if t := cur.ReclaimTotals; t != nil {
			line += fmt.Sprintf(" deleted=%d freed=%s", t.Deleted, humanBytes(int64(t.BytesFreed)))
		}
	}
	return line
}

// secs renders seconds as a rounded duration.
func secs(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// until renders t relative to now ("in 5s", "3s ago", "never").
func until(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := t.Sub(now)
	if d >= 0 {
		return "in " + secs(d.Seconds())
	}
	return secs(-d.Seconds()) + " ago"
}

// Keys of admin.Status.Extra filled by the process (GET /v1/status keeps
// them for scripts; the monitor reads /v1/monitor).
const (
	extraStoreRequests = "store_requests"
	extraBytesUp       = "store_bytes_up"
	extraBytesDown     = "store_bytes_down"
	extraLiveBytes     = "live_bytes"
	extraReclaimCycles = "reclaim_cycles"
	extraReplica       = "replica" // replicaState of a following replica
	// Set while every store request fails: since when, and the last error.
	extraStoreUnreachableSince   = "store_unreachable_since"
	extraStoreLastError          = "store_last_error"
	extraCacheDirFree            = "cache_dir_free"
	extraCacheDirFloor           = "cache_dir_floor"
	extraCacheDirReserveReleased = "cache_dir_reserve_released"
	extraMetadataFailed          = "metadata_failed"
)
