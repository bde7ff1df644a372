package main

import (
	"strings"
	"testing"
)

const pgbenchOut = `pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: <builtin: TPC-B (sort of)>
scaling factor: 10
query mode: simple
number of clients: 8
number of threads: 2
maximum number of tries: 1
duration: 60 s
number of transactions actually processed: 7632
number of failed transactions: %s
latency average = 62.900 ms
initial connection time = 12.345 ms
tps = 127.187266 (without initial connection time)
`

func TestParsePgbench(t *testing.T) {
	tps, n, err := parsePgbench(replaceFailed("0 (0.000%)"))
	if err != nil || n != 7632 || tps < 127.18 || tps > 127.19 {
		t.Fatalf("parsePgbench = %v, %d, %v; want 127.187266, 7632, nil", tps, n, err)
	}
	if _, _, err := parsePgbench(replaceFailed("3 (0.039%)")); err == nil {
		t.Fatal("failed transactions were not an error")
	}
	if _, _, err := parsePgbench("pgbench: error: connection to server failed\n"); err == nil {
		t.Fatal("output without a tps line was not an error")
	}
}

func replaceFailed(s string) string { return strings.Replace(pgbenchOut, "%s", s, 1) }
