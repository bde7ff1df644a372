// Package monitor shows a running ebbfs process's telemetry.State in a
// terminal: a full-screen view of panels (a bubbletea program) or one
// line per sample.
package monitor

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"ebbfs.dev/ebbfs/internal/admin"
	"ebbfs.dev/ebbfs/internal/stats"
	"ebbfs.dev/ebbfs/internal/telemetry"
)

// fetchState gets one telemetry.State.
func fetchState(ctx context.Context, cl *admin.Client) (telemetry.State, error) {
	var st telemetry.State
	err := cl.Do(ctx, http.MethodGet, telemetry.RouteMonitor, nil, &st)
	return st, err
}

// Plain prints one line per sample of the process behind cl, every
// interval, until ctx ends or after count samples (0: no limit).
func Plain(ctx context.Context, cl *admin.Client, w io.Writer, interval time.Duration, count int) error {
	var prev *telemetry.State
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

func rateOf(prev, cur *telemetry.State) rates {
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
	c, p := telemetry.CountsByOp(cur.StoreRequests), telemetry.CountsByOp(prev.StoreRequests)
	for k := range c {
		r.byKind[k] = per(float64(c[k]), float64(p[k]))
	}
	r.barriers = per(float64(cur.Engine.Barriers), float64(prev.Engine.Barriers))
	r.extents = per(float64(cur.Engine.ExtentsCleaned), float64(prev.Engine.ExtentsCleaned))
	r.barrierLat = cur.Engine.BarrierLatency.Sub(prev.Engine.BarrierLatency)
	return r
}

// ioSum adds FUSE and NBD counts (or bytes) of op.
func ioSum(st *telemetry.State, op string, bytes bool) float64 {
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

func plainLine(prev, cur *telemetry.State) string {
	r := rateOf(prev, cur)
	line := fmt.Sprintf("%s %s read=%s/s write=%s/s req/s=%.1f up=%s/s down=%s/s barriers=%d",
		cur.At.Local().Format(time.TimeOnly), cur.Role, HumanBytes(int64(r.readB)), HumanBytes(int64(r.writeB)),
		r.req, HumanBytes(int64(r.up)), HumanBytes(int64(r.down)), cur.Engine.Barriers)
	if cur.Replica != nil {
		line += fmt.Sprintf(" lag=%s", secs(cur.Replica.LagSeconds))
	}
	if sp := cur.Space; sp != nil {
		line += fmt.Sprintf(" live=%s stored=%s fragmented=%s dead=%s awaiting=%s tombstones=%d",
			HumanBytes(sp.LiveBytes), HumanBytes(sp.SegmentBytes), HumanBytes(sp.FragmentedBytes),
			HumanBytes(sp.DeadBytes), HumanBytes(sp.AwaitingBytes), sp.TombstonesPending)
	}
	if a := cur.Reclaim; a != nil {
		line += " cycle=" + a.Phase
		if t := cur.ReclaimTotals; t != nil {
			line += fmt.Sprintf(" deleted=%d freed=%s", t.Deleted, HumanBytes(int64(t.BytesFreed)))
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

// HumanBytes renders n in binary units ("1.5 MiB").
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
