package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/internal/monitor"
	"ebbfs.dev/ebbfs/internal/telemetry"
	"ebbfs.dev/ebbfs/objstore"
)

func newTraceCmd(g *globalFlags) *cobra.Command {
	var o traceOpts
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "Stream the store requests the running process sends, with their purpose, size and latency",
		Long: `Stream every object-store request the running writer or reader sends from
now on: when, the operation, its purpose (why it was sent), the object, the
bytes and the latency. --purpose and --op keep only those (comma-separated).
Ctrl-C or --duration ends it and prints a summary by purpose and operation.
Purposes: ` + purposeList() + `.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if o.duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, o.duration)
				defer cancel()
			}
			q := url.Values{}
			if o.purpose != "" {
				q.Set("purpose", o.purpose)
			}
			if o.op != "" {
				q.Set("op", o.op)
			}
			path := telemetry.RouteTrace
			if len(q) > 0 {
				path += "?" + q.Encode()
			}
			body, err := adminClient(c).Stream(ctx, path)
			if err != nil {
				return err
			}
			defer body.Close()
			fmt.Fprintln(cmd.ErrOrStderr(), "tracing the store requests of the running process; Ctrl-C stops and prints a summary")
			sum := newTraceSummary()
			err = readTrace(ctx, body, cmd.OutOrStdout(), o, sum)
			sum.print(cmd.OutOrStdout(), o.asJSON)
			return err
		},
	}
	cmd.Flags().StringVar(&o.purpose, "purpose", "", "keep only these purposes (comma-separated)")
	cmd.Flags().StringVar(&o.op, "op", "", "keep only these operations: put, get, get_range, head, delete, delete_many, list (comma-separated)")
	cmd.Flags().DurationVar(&o.duration, "duration", 0, "stop after this long (default: at Ctrl-C)")
	cmd.Flags().BoolVar(&o.asJSON, "json", false, "print each request and the summary as JSON, a line each")
	cmd.Flags().BoolVar(&o.summary, "summary-only", false, "print only the summary at the end")
	return cmd
}

type traceOpts struct {
	purpose, op     string
	duration        time.Duration
	asJSON, summary bool
}

func purposeList() string {
	var s []string
	for _, p := range objstore.Purposes {
		s = append(s, string(p))
	}
	return strings.Join(s, ", ")
}

// readTrace prints each request as it arrives and adds it to sum, until
// the stream ends or ctx does.
func readTrace(ctx context.Context, body io.Reader, out io.Writer, o traceOpts, sum *traceSummary) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	w := bufio.NewWriter(out)
	defer w.Flush()
	for sc.Scan() {
		var ln telemetry.TraceLine
		if err := json.Unmarshal(sc.Bytes(), &ln); err != nil {
			return fmt.Errorf("trace: bad line from the process: %w", err)
		}
		sum.add(ln)
		switch {
		case o.summary:
		case o.asJSON:
			w.Write(sc.Bytes())
			w.WriteByte('\n')
		default:
			errStr := ""
			if ln.Error != "" {
				errStr = "  ERROR " + ln.Error
			}
			fmt.Fprintf(w, "%s %-11s %-14s %10s %9s  %s%s\n", ln.At.Local().Format("15:04:05.000"), ln.Op, ln.Purpose,
				monitor.HumanBytes(ln.Bytes), fmtLatency(ln.LatencySeconds), ln.Key, errStr)
		}
		if len(sc.Bytes()) > 0 && !o.summary {
			w.Flush()
		}
	}
	if ctx.Err() != nil {
		return nil // Ctrl-C or --duration: the summary follows
	}
	if err := sc.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("trace: %w", err)
	}
	return errors.New("trace: the process ended the stream (it stopped)")
}

func fmtLatency(sec float64) string {
	if sec < 1 {
		return fmt.Sprintf("%.2fms", sec*1000)
	}
	return fmt.Sprintf("%.2fs", sec)
}

// traceSummary tallies the requests seen by purpose and operation.
type traceSummary struct {
	start   time.Time
	rows    map[[2]string]*traceRow
	dropped uint64
}

// traceRow is one purpose and operation's tally; JSON like every
// summary: sizes in bytes, durations in seconds.
type traceRow struct {
	Purpose           string  `json:"purpose"`
	Op                string  `json:"op"`
	Requests          int64   `json:"requests"`
	Errors            int64   `json:"errors"`
	Bytes             int64   `json:"bytes"`
	LatencySumSeconds float64 `json:"latency_sum_seconds"`
	LatencyMaxSeconds float64 `json:"latency_max_seconds"`
}

func newTraceSummary() *traceSummary {
	return &traceSummary{start: time.Now(), rows: map[[2]string]*traceRow{}}
}

func (s *traceSummary) add(ln telemetry.TraceLine) {
	k := [2]string{string(ln.Purpose), ln.Op}
	r := s.rows[k]
	if r == nil {
		r = &traceRow{Purpose: k[0], Op: k[1]}
		s.rows[k] = r
	}
	r.Requests++
	if ln.Error != "" {
		r.Errors++
	}
	r.Bytes += ln.Bytes
	r.LatencySumSeconds += ln.LatencySeconds
	r.LatencyMaxSeconds = max(r.LatencyMaxSeconds, ln.LatencySeconds)
	s.dropped = max(s.dropped, ln.Dropped)
}

func (s *traceSummary) sorted() []traceRow {
	out := make([]traceRow, 0, len(s.rows))
	for _, r := range s.rows {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Purpose != out[j].Purpose {
			return out[i].Purpose < out[j].Purpose
		}
		return out[i].Op < out[j].Op
	})
	return out
}

// print writes the summary: a table, or one JSON object.
func (s *traceSummary) print(w io.Writer, asJSON bool) {
	rows := s.sorted()
	if asJSON {
		b, _ := json.Marshal(struct {
			Summary         []traceRow `json:"summary"`
			DurationSeconds float64    `json:"duration_seconds"`
			Dropped         uint64     `json:"dropped,omitempty"`
		}{rows, time.Since(s.start).Seconds(), s.dropped})
		fmt.Fprintln(w, string(b))
		return
	}
	fmt.Fprintf(w, "\nsummary over %s:\n", time.Since(s.start).Round(time.Millisecond))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "purpose\top\trequests\terrors\tbytes\tmean latency\tmax latency\t")
	var n int64
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t\n", r.Purpose, r.Op, r.Requests, r.Errors, monitor.HumanBytes(r.Bytes),
			fmtLatency(r.LatencySumSeconds/float64(r.Requests)), fmtLatency(r.LatencyMaxSeconds))
		n += r.Requests
	}
	tw.Flush()
	fmt.Fprintf(w, "%d request(s)", n)
	if s.dropped > 0 {
		fmt.Fprintf(w, "; %d more not shown: this trace did not keep up", s.dropped)
	}
	fmt.Fprintln(w)
}
