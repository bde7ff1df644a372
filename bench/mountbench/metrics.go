package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// storeCounters are ebbfs's object-store counters, from its /metrics.
type storeCounters struct {
	up, down int64 // payload bytes
	requests int64 // every operation, every key space
	puts     int64 // put, every key space
	gets     int64 // get and get_range on segments/
	skipped  int64 // frame bytes the disk cache left out (queue full)
}

func (c storeCounters) sub(o storeCounters) storeCounters {
	return storeCounters{up: c.up - o.up, down: c.down - o.down, requests: c.requests - o.requests, puts: c.puts - o.puts, gets: c.gets - o.gets, skipped: c.skipped - o.skipped}
}

// scrapeStore reads ebbfs's /metrics over its admin unix socket.
func scrapeStore(sock string) (storeCounters, error) {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := cl.Get("http://ebbfs/metrics")
	if err != nil {
		return storeCounters{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return storeCounters{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	var c storeCounters
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name := line[:i]
		switch {
		case name == `ebbfs_store_bytes_total{direction="up"}`:
			c.up = int64(v)
		case name == `ebbfs_store_bytes_total{direction="down"}`:
			c.down = int64(v)
		case name == "ebbfs_cache_disk_skipped_bytes_total":
			c.skipped = int64(v)
		case strings.HasPrefix(name, "ebbfs_store_requests_total{"):
			c.requests += int64(v)
			if strings.Contains(name, `op="put"`) {
				c.puts += int64(v)
			}
			if strings.Contains(name, `space="segments"`) &&
				(strings.Contains(name, `op="get"`) || strings.Contains(name, `op="get_range"`)) {
				c.gets += int64(v)
			}
		}
	}
	return c, sc.Err()
}
