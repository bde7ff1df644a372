package main

import (
	"math"
	"testing"

	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/internal/telemetry"
	"ebbfs.dev/ebbfs/objstore"
)

// TestEstimateCost: 10 GiB stored and, over a day, 1,000 PUTs, 100 LISTs,
// 10,000 GETs and 500 DELETEs, at the S3 Standard defaults.
func TestEstimateCost(t *testing.T) {
	var sp telemetry.SpaceReply
	sp.SegmentBytes, sp.MetaBytes = 9<<30, 1<<30
	st := telemetry.State{UptimeSec: 86400, StoreRequests: objstore.Counts{Put: 1000, List: 100, Get: 4000, GetRange: 6000, Delete: 500}}
	p := config.Default().Pricing
	c := estimateCost(sp, st, p)
	near := func(what string, got, want float64) {
		if math.Abs(got-want) > 1e-9*math.Max(1, want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	near("storage", c.StorageCost, 10*0.023)
	near("write requests", c.WriteRequests, 1100*30)
	near("write cost", c.WriteCost, 33*0.005)
	near("read requests", c.ReadRequests, 10000*30)
	near("read cost", c.ReadCost, 300*0.0004)
	near("deletes", c.DeleteRequests, 15000)
	near("total", c.Total, 0.23+0.165+0.12)
	if c.Currency != "USD" || c.StoredBytes != 10<<30 {
		t.Errorf("%+v", c)
	}
}
