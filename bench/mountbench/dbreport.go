package main

import (
	"fmt"
	"io"
	"strings"
)

// Issue 35's targets for the db group, on both ebbfs targets: pgbench's
// TPS at least pgbenchTarget times the passthrough's, and a SQLite
// rollback-journal commit at most sqliteJournalTarget times as long as on
// the plain disk (ext4).
const (
	pgbenchTarget       = 0.5
	sqliteJournalTarget = 2.5
)

// dbRows are the db group's rows of the tables.
func dbRows(o options) []row {
	d := o.db
	return []row{
		{"pgbench", fmt.Sprintf("pgbench -s%d -c%d %v, TPS", d.pgScale, d.pgClients, d.pgTime), true, pgbenchTarget},
		{"sqlitewal", fmt.Sprintf("SQLite WAL, %d commits", d.walCommits), true, 0},
		{"sqlitejournal", fmt.Sprintf("SQLite rollback journal, %d commits", d.journalCommits), true, 0},
		{"vmrandwrite", "ext4 on NBD: fio 4KiB randwrite+fsync", true, 0},
		{"vmrandread", "ext4 on NBD: fio 4KiB randread x16", true, 0},
	}
}

// reportDB prints the db group: each target's rate, its ratio to the
// passthrough and to the disk, the store requests per commit (or per fio
// write) for the ebbfs targets, and issue 35's targets.
func (b *bench) reportDB(w io.Writer) {
	if len(b.res["pgbench"]) == 0 && len(b.res["sqlitewal"]) == 0 {
		return
	}
	d := b.o.db
	fmt.Fprintf(w, "\ndatabases and a VM's disk (issue 35), each on every target:\n")
	fmt.Fprintf(w, "  pgbench: PostgreSQL's data directory on the target (fsync, synchronous_commit, full_page_writes on), pgbench -i -s %d\n", d.pgScale)
	fmt.Fprintf(w, "    and a CHECKPOINT first, then TPC-B-like transactions, %d clients, 2 threads, for %v\n", d.pgClients, d.pgTime)
	fmt.Fprintln(w, "  SQLite: the sqlite3 shell committing one 100-byte INSERT per transaction, synchronous=FULL; integrity_check after")
	fmt.Fprintf(w, "  ext4 on NBD: an export of %s (ebbfs's own; qemu-nbd of an image file on the others) through nbdfuse and a loop device,\n", formatSize(d.vmSize))
	fmt.Fprintf(w, "    fio on a %s file for %v each: psync 4KiB random writes each followed by fsync; O_DIRECT random reads, libaio depth 16\n", formatSize(d.vmFile), d.vmTime)
	const f = "%-38s %-12s %10s %9s %8s %8s %11s %12s\n"
	fmt.Fprintf(w, f, "workload", "target", "ops/s", "ms/op", "x/pt", "x/disk", "PUTs/commit", "reqs/commit")
	fmt.Fprintln(w, strings.Repeat("-", 38+1+12+1+10+1+9+1+8+1+8+1+11+1+12))
	for _, r := range dbRows(b.o) {
		m := b.res[r.key]
		if len(m) == 0 {
			continue
		}
		for _, t := range b.targets {
			v, ok := m[t.name]
			if !ok {
				continue
			}
			ms, xpt, xdisk, puts, reqs := "-", "-", "-", "-", "-"
			if v.err == nil && v.n > 0 {
				ms = fmt.Sprintf("%.2f", 1000/v.n)
			}
			if x, ok := ratio(m, t.name); ok {
				xpt = fmt.Sprintf("%.2fx", x)
			}
			if x, ok := ratioTo(m, t.name, "disk"); ok {
				xdisk = fmt.Sprintf("%.2fx", x)
			}
			if v.err == nil && v.store != nil && v.count > 0 {
				puts = fmt.Sprintf("%.2f", float64(v.store.puts)/float64(v.count))
				reqs = fmt.Sprintf("%.2f", float64(v.store.requests)/float64(v.count))
			}
			fmt.Fprintf(w, f, r.label, t.name, number(r.key, v, true), ms, xpt, xdisk, puts, reqs)
		}
	}
	fmt.Fprintln(w, "(x/pt, x/disk: rate over the passthrough's, the disk's; requests: every object-store request of the ebbfs process")
	fmt.Fprintln(w, " meanwhile, from its /metrics, over the transactions committed (pgbench, SQLite) or fio's writes and reads)")
	for _, name := range []string{"ebbfs", "ebbfs-s3"} {
		if !b.hasTarget(name) {
			continue
		}
		var parts []string
		if m := b.res["pgbench"]; len(m) > 0 {
			x, ok := ratio(m, name)
			parts = append(parts, fmt.Sprintf("pgbench %s >= %.1fx the passthrough %s", fmtRatio(x, ok), pgbenchTarget, verdict(ok && x >= pgbenchTarget)))
		}
		if m := b.res["sqlitejournal"]; len(m) > 0 {
			x, ok := ratioTo(m, name, "disk")
			lat := 0.0
			if ok && x > 0 {
				lat = 1 / x
			}
			parts = append(parts, fmt.Sprintf("SQLite rollback-journal commit latency %.2fx <= %.1fx the disk's %s",
				lat, sqliteJournalTarget, verdict(ok && x > 0 && lat <= sqliteJournalTarget)))
		}
		fmt.Fprintf(w, "%s: %s\n", name, strings.Join(parts, "; "))
	}
}

// ratioTo is ratio against another target than the passthrough.
func ratioTo(m map[string]result, name, ref string) (float64, bool) {
	a, ok1 := m[name]
	p, ok2 := m[ref]
	if !ok1 || !ok2 || a.err != nil || p.err != nil || p.n <= 0 {
		return 0, false
	}
	return a.n / p.n, true
}

func fmtRatio(x float64, ok bool) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.2fx", x)
}
