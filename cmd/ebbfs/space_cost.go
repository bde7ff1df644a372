package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	"ebbfs.dev/ebbfs/internal/admin"
	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/internal/monitor"
	"ebbfs.dev/ebbfs/internal/telemetry"
)

// secondsPerMonth is the month the estimate bills: 30 days.
const secondsPerMonth = 30 * 24 * 3600

// costEstimate is `ebbfs space --cost`: a month of the footprint and of
// the request rates the running process has had since it started, at the
// configured prices. JSON: sizes in bytes, durations in seconds.
type costEstimate struct {
	Currency            string  `json:"currency"`
	StoredBytes         int64   `json:"stored_bytes"`
	StorageCost         float64 `json:"storage_cost"`
	WriteRequests       float64 `json:"write_requests_per_month"` // PUT, LIST, multi-object DELETE (POST)
	WriteCost           float64 `json:"write_cost"`
	ReadRequests        float64 `json:"read_requests_per_month"` // GET, ranged GET, HEAD
	ReadCost            float64 `json:"read_cost"`
	DeleteRequests      float64 `json:"delete_requests_per_month"` // free on S3
	Total               float64 `json:"total"`
	MeasuredOverSeconds float64 `json:"measured_over_seconds"`
}

// estimateCost prices a month of sp's footprint and of the request rates
// of st (cumulative since the process started) under p.
func estimateCost(sp telemetry.SpaceReply, st telemetry.State, p config.Pricing) costEstimate {
	c := costEstimate{Currency: p.Currency, StoredBytes: sp.SegmentBytes + sp.MetaBytes, MeasuredOverSeconds: st.UptimeSec}
	c.StorageCost = float64(c.StoredBytes) / (1 << 30) * p.StoragePerGBMonth
	if up := st.UptimeSec; up > 0 {
		n := st.StoreRequests
		perMonth := func(v int64) float64 { return float64(v) / up * secondsPerMonth }
		c.WriteRequests = perMonth(n.Put + n.List + n.DeleteMany)
		c.ReadRequests = perMonth(n.Get + n.GetRange + n.Head)
		c.DeleteRequests = perMonth(n.Delete)
	}
	c.WriteCost = c.WriteRequests / 1000 * p.WritePer1000
	c.ReadCost = c.ReadRequests / 1000 * p.ReadPer1000
	c.Total = c.StorageCost + c.WriteCost + c.ReadCost
	return c
}

// fetchCost asks the running process for its footprint and request
// counts and prices them.
func fetchCost(ctx context.Context, cl *admin.Client, sp telemetry.SpaceReply, p config.Pricing) (costEstimate, error) {
	var st telemetry.State
	if err := cl.Do(ctx, http.MethodGet, telemetry.RouteMonitor, nil, &st); err != nil {
		return costEstimate{}, err
	}
	return estimateCost(sp, st, p), nil
}

func printCost(w io.Writer, c costEstimate, p config.Pricing) {
	fmt.Fprintf(w, "\nestimated monthly cost (approximate; prices from [pricing], default S3 Standard):\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "storage\t%s at %g %s per GiB-month\t%.2f %s\n", monitor.HumanBytes(c.StoredBytes), p.StoragePerGBMonth, c.Currency, c.StorageCost, c.Currency)
	fmt.Fprintf(tw, "PUT, LIST, POST\t%.0f a month at %g per 1,000\t%.2f %s\n", c.WriteRequests, p.WritePer1000, c.WriteCost, c.Currency)
	fmt.Fprintf(tw, "GET, HEAD\t%.0f a month at %g per 1,000\t%.2f %s\n", c.ReadRequests, p.ReadPer1000, c.ReadCost, c.Currency)
	fmt.Fprintf(tw, "DELETE\t%.0f a month, free\t0.00 %s\n", c.DeleteRequests, c.Currency)
	fmt.Fprintf(tw, "total\t\t%.2f %s\n", c.Total, c.Currency)
	tw.Flush()
	fmt.Fprintf(w, "request rates as measured over this process's %s; data transfer out and free tiers not included\n",
		time.Duration(c.MeasuredOverSeconds*float64(time.Second)).Round(time.Second))
	if c.MeasuredOverSeconds < 3600 {
		fmt.Fprintln(w, "(under an hour: the start's own requests weigh heavily; the rates settle as the process runs)")
	}
}

// spaceCost is space --cost: the space report and the estimate, or with
// asJSON the estimate alone.
func spaceCost(w io.Writer, c *config.Config, rep telemetry.SpaceReply, asJSON bool) error {
	est, err := fetchCost(context.Background(), adminClient(c), rep, c.Pricing)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(w, est)
	}
	printSpace(w, rep)
	printCost(w, est, c.Pricing)
	return nil
}
