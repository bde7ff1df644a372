package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// amend changes this round's last result of key on t (what a workload
// learns after its measurement: a failed verification, the settling).
func (b *bench) amend(key string, t *target, f func(*result)) {
	rs := b.all[key][t.name]
	if len(rs) > 0 {
		f(&rs[len(rs)-1])
	}
}

// roundFile is the name of key's file on t in this round. The files of
// the fsync and overwrite workloads stay until the end of the run: deleted,
// they would be reclaimed while a later workload counts store requests or
// sizes.
func (b *bench) roundFile(key string, t *target) string {
	name := key
	if n := len(b.all[key][t.name]); n > 0 {
		name += fmt.Sprintf(".r%d", n+1)
	}
	return filepath.Join(t.dir, name)
}

// dbFile creates path, empty, and on an ebbfs target gives it the extent
// size of -db-extent-size.
func (b *bench) dbFile(path string, t *target) error {
	if b.o.dbExtentSize == 0 || t.segs == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	f.Close()
	return unix.Setxattr(path, "user.ebbfs.extent_size", []byte(strconv.Itoa(b.o.dbExtentSize)), 0)
}

// fsyncGroup runs the 4 KiB pwrite+fsync loop, then reads the file back
// and checks it (not timed).
func (b *bench) fsyncGroup(t *target) {
	path := b.roundFile("fsync4k", t)
	if err := b.dbFile(path, t); err != nil {
		b.measure("fsync4k", t, func() (float64, error) { return 0, err })
		return
	}
	r := b.measureTry("fsync4k", t, func() (float64, error) { return fsyncLoop(b.pat, path, b.o.fsyncs) }, false)
	if r.err != nil {
		return
	}
	if err := verifyFile(path, int64(b.o.fsyncs)*pageSize, b.pat.fill); err != nil {
		err = fmt.Errorf("verifying the file after the loop: %w", err)
		fmt.Fprintf(os.Stderr, "  %-12s ERROR: %v\n", t.name, err)
		b.amend("fsync4k", t, func(r *result) { r.err = err })
	}
	if r.store != nil {
		fmt.Fprintf(os.Stderr, "  %-12s store requests per fsync: %.2f PUT, %.2f in all\n", t.name,
			float64(r.store.puts)/float64(b.o.fsyncs), float64(r.store.requests)/float64(b.o.fsyncs))
	}
}

// overwriteStats are the random-overwrite workload's figures beyond its
// rate. Store sizes are the object bytes under the store's segments/
// above what it held before the file was written (base), so that what
// other workloads left there does not count.
type overwriteStats struct {
	written    int64         // bytes the timed pwrites wrote
	elapsed    time.Duration // the timed part: pwrites and fsyncs
	base       int64         // segments/ bytes before the file was written
	file       int64         // segments/ growth once the file was written and fsynced
	peak, end  int64         // growth: the most sampled during the timed part, and at its end
	settled    int64         // growth at the end of the settling
	settleTime time.Duration // from the end of the timed part to below 1.1x the file (or to -rw-settle)
	settleOK   bool          // below 1.1x the file within -rw-settle
	samples    int
	upSettle   int64 // bytes uploaded from the start of the timed part to the end of the settling
	store      bool  // the target has a store (the fields above beyond elapsed are set)
}

// settleLimit is the store size, as a multiple of the file, the settling
// waits for (issue 12's target after settling).
const settleLimit = 1.1

// overwriteGroup: write the file sequentially and fsync it (not timed),
// then the random pwrites with their fsyncs (timed), sampling the store's
// size every second; then wait for the store to shrink back and check the
// whole file against the model of what was written.
func (b *bench) overwriteGroup(t *target) {
	const key = "overwrite"
	path := b.roundFile(key, t)
	fail := func(err error) { b.measure(key, t, func() (float64, error) { return 0, err }) }
	plan := newOverwritePlan(b.o.seed, b.o.rwSize, b.o.rwWrites, b.o.rwFsyncEvery)
	st := &overwriteStats{written: int64(len(plan.offs)) * pageSize, store: t.segs != ""}
	size := func() int64 { return dirBytes(t.segs) - st.base }
	if st.store {
		if _, err := os.Stat(t.segs); err != nil && !os.IsNotExist(err) {
			fail(err)
			return
		}
		st.base = dirBytes(t.segs)
	}
	if err := b.dbFile(path, t); err != nil {
		fail(err)
		return
	}
	t0 := time.Now()
	if _, err := seqWrite(b.pat, path, b.o.rwSize); err != nil {
		fail(fmt.Errorf("writing the file before the overwrites: %w", err))
		return
	}
	prep := fmt.Sprintf("wrote and fsynced the %s file in %v (not timed)", formatSize(b.o.rwSize), time.Since(t0).Round(time.Millisecond))
	if st.store {
		st.file = size()
		prep += fmt.Sprintf("; store +%s (%s before)", mib(st.file), mib(st.base))
		// The file is fsynced, so its data is in segments/: if it is not,
		// the harness is looking at the wrong directory.
		if st.file < b.o.rwSize*9/10 {
			fail(fmt.Errorf("the store's segments/ (%s) grew by %s after the fsync of a %s file: wrong directory?", t.segs, mib(st.file), formatSize(b.o.rwSize)))
			return
		}
	}
	fmt.Fprintf(os.Stderr, "  %-12s %s\n", t.name, prep)

	r := b.measureTry(key, t, func() (float64, error) {
		stop, done := make(chan struct{}), make(chan struct{})
		if st.store {
			go func() {
				defer close(done)
				tick := time.NewTicker(time.Second)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						st.peak = max(st.peak, size())
						st.samples++
					}
				}
			}()
		} else {
			close(done)
		}
		n, el, err := plan.run(b.pat, path)
		close(stop)
		<-done
		st.elapsed = el
		if st.store {
			st.end = size()
			st.peak = max(st.peak, st.end)
			st.samples++
		}
		return n, err
	}, false)
	b.amend(key, t, func(r *result) { r.ow = st })
	if r.err != nil {
		return
	}

	if st.store {
		b.overwriteSettle(t, st, r, size)
	}

	err := dropCaches()
	if err == nil {
		err = plan.verify(b.pat, path)
	}
	if err != nil {
		err = fmt.Errorf("verifying the file after the overwrites: %w", err)
		fmt.Fprintf(os.Stderr, "  %-12s ERROR: %v\n", t.name, err)
		b.amend(key, t, func(r *result) { r.err = err })
	} else {
		fmt.Fprintf(os.Stderr, "  %-12s every page of the file verified against the model\n", t.name)
	}
}

// overwriteSettle waits (up to -rw-settle) for reclamation to bring the
// store back near the file's size after the overwrites, and prints what the
// store held at its peak, at the end and once settled.
func (b *bench) overwriteSettle(t *target, st *overwriteStats, r result, size func() int64) {
	var up0 storeCounters
	var scrapeErr error
	if t.sock != "" {
		up0, scrapeErr = scrapeStore(t.sock)
	}
	limit := int64(settleLimit * float64(b.o.rwSize))
	start := time.Now()
	st.settled = st.end
	for {
		if st.settled < limit {
			st.settleOK = true
			break
		}
		if time.Since(start) >= b.o.rwSettle {
			break
		}
		time.Sleep(time.Second)
		st.settled = size()
	}
	st.settleTime = time.Since(start)
	if scrapeErr == nil && r.store != nil {
		if up1, err := scrapeStore(t.sock); err == nil {
			st.upSettle = r.store.up + up1.up - up0.up
		}
	}
	x := func(n int64) string { return fmt.Sprintf("%.2fx", float64(n)/float64(b.o.rwSize)) }
	line := fmt.Sprintf("store / file: peak %s, end %s; ", x(st.peak), x(st.end))
	switch {
	case st.settleOK:
		line += fmt.Sprintf("below %.1fx after %v (%s)", settleLimit, st.settleTime.Round(time.Second), x(st.settled))
	case b.o.rwSettle == 0:
		line += "no settling (-rw-settle 0)"
	default:
		line += fmt.Sprintf("still %s after %v", x(st.settled), st.settleTime.Round(time.Second))
	}
	if r.store != nil {
		line += fmt.Sprintf("; uploaded / written %.2fx", float64(r.store.up)/float64(st.written))
	}
	fmt.Fprintf(os.Stderr, "  %-12s %s\n", t.name, line)
}
