package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/internal/admin"
)

// Keys of admin.Status.Extra filled by the writer and read by monitor.
const (
	extraStoreRequests = "store_requests"
	extraBytesUp       = "store_bytes_up"
	extraBytesDown     = "store_bytes_down"
	extraLiveBytes     = "live_bytes"
	extraReclaimCycles = "reclaim_cycles"
)

func newMonitorCmd(g *globalFlags) *cobra.Command {
	var interval time.Duration
	var count int
	cmd := &cobra.Command{
		Use:   "monitor",
		Short: "Watch the running writer: store traffic, space, barriers",
		Long: `Poll the running writer's status and space report every --interval and
show rates since the previous sample. On a terminal the screen is redrawn;
otherwise one line is printed per sample. --count stops after N samples.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			if interval < 100*time.Millisecond {
				return &usageError{fmt.Errorf("--interval %s is below 100ms", interval)}
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return monitor(ctx, adminClient(c), cmd.OutOrStdout(), interval, count, isTerminal(os.Stdout))
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "time between samples")
	cmd.Flags().IntVar(&count, "count", 0, "stop after this many samples (0: until interrupted)")
	return cmd
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

type sample struct {
	at    time.Time
	st    admin.Status
	space *spaceReply
}

func extraInt(st admin.Status, k string) int64 {
	switch v := st.Extra[k].(type) {
	case float64:
		return int64(v)
	case int64:
		return v
	case int:
		return int64(v)
	}
	return 0
}

func monitor(ctx context.Context, cl *admin.Client, w io.Writer, interval time.Duration, count int, tty bool) error {
	var prev *sample
	for n := 0; count == 0 || n < count; n++ {
		if n > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(interval):
			}
		}
		rctx, cancel := context.WithTimeout(ctx, interval+10*time.Second)
		st, err := cl.Status(rctx)
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		s := &sample{at: time.Now(), st: st}
		if !st.ReadOnly {
			var sp spaceReply
			if err := cl.Do(rctx, http.MethodGet, routeSpace, nil, &sp); err == nil {
				s.space = &sp
			}
		}
		cancel()
		renderSample(w, prev, s, tty)
		prev = s
	}
	return nil
}

func renderSample(w io.Writer, prev, s *sample, tty bool) {
	rate := func(k string) float64 {
		if prev == nil {
			return 0
		}
		dt := s.at.Sub(prev.at).Seconds()
		if dt <= 0 {
			return 0
		}
		return float64(extraInt(s.st, k)-extraInt(prev.st, k)) / dt
	}
	if !tty {
		line := fmt.Sprintf("%s live=%s req/s=%.1f up=%s/s down=%s/s barriers=%d",
			s.at.Format(time.TimeOnly), humanBytes(extraInt(s.st, extraLiveBytes)), rate(extraStoreRequests),
			humanBytes(int64(rate(extraBytesUp))), humanBytes(int64(rate(extraBytesDown))), s.st.Barriers)
		if s.space != nil {
			line += fmt.Sprintf(" stored=%s dead=%s fragmented=%s", humanBytes(s.space.SegmentBytes), humanBytes(s.space.DeadBytes), humanBytes(s.space.FragmentedBytes))
		}
		fmt.Fprintln(w, line)
		return
	}
	fmt.Fprint(w, "\x1b[H\x1b[2J")
	mode := "writer"
	if s.st.ReadOnly {
		mode = "reader"
	}
	fmt.Fprintf(w, "ebbfs %s  %s pid %d  up %s  %s\n\n", s.st.Version, mode, s.st.PID,
		time.Duration(s.st.UptimeSec*float64(time.Second)).Truncate(time.Second), s.at.Format(time.TimeOnly))
	fmt.Fprintf(w, "  mountpoint  %s\n  store       %s\n\n", s.st.Mountpoint, s.st.Store)
	fmt.Fprintf(w, "  store requests  %8.1f /s   up %10s/s   down %10s/s\n", rate(extraStoreRequests),
		humanBytes(int64(rate(extraBytesUp))), humanBytes(int64(rate(extraBytesDown))))
	fmt.Fprintf(w, "  barriers (CLI)  %8d      last %s\n", s.st.Barriers, ago(s.st.LastBarrier))
	if s.st.LastError != "" {
		fmt.Fprintf(w, "  last barrier error: %s\n", s.st.LastError)
	}
	fmt.Fprintf(w, "  reclaim cycles  %8d\n\n", extraInt(s.st, extraReclaimCycles))
	if s.space != nil {
		printSpace(w, *s.space)
	}
	fmt.Fprintln(w, "\n(Ctrl-C to quit)")
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return time.Since(t).Truncate(time.Second).String() + " ago"
}
