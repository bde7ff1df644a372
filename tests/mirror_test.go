package tests

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/s3test"
)

func envSeconds(name string, def time.Duration) time.Duration {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return time.Duration(v) * time.Second
	}
	return def
}

// mirrorLoad writes until stop is closed: sequential files of 4 MiB
// (fsynced, the oldest removed past 40, so reclamation has work) paced to
// rate bytes/s, and self-checking random block writes into one 32 MiB
// file, fsynced per round.
func mirrorLoad(t *testing.T, dir string, rate int64, stop <-chan struct{}, log *fsyncLog) *sync.WaitGroup {
	const randBlocks = 32 << 20 / mblock
	log.files = map[string]fileRec{}
	log.blockRounds = make([][]uint64, randBlocks)
	log.roundDone = map[uint64]time.Time{}
	var wg sync.WaitGroup
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	wg.Add(2)
	go func() { // sequential
		defer wg.Done()
		rng := mrand.NewChaCha8([32]byte{1})
		start := time.Now()
		var names []string
		for i := 0; !stopped(); i++ {
			b := make([]byte, 4<<20)
			_, _ = rng.Read(b)
			name := fmt.Sprintf("seq-%05d", i)
			if err := writeSync(filepath.Join(dir, name), b); err != nil {
				return // the writer was killed
			}
			log.mu.Lock()
			log.files[name] = fileRec{sum: sha256.Sum256(b), fsynced: time.Now()}
			log.bytes += int64(len(b))
			total := log.bytes
			log.mu.Unlock()
			names = append(names, name)
			if len(names) > 40 {
				log.mu.Lock()
				delete(log.files, names[0])
				log.mu.Unlock()
				if os.Remove(filepath.Join(dir, names[0])) != nil {
					return
				}
				names = names[1:]
			}
			if ahead := time.Duration(float64(total)/float64(rate)*float64(time.Second)) - time.Since(start); ahead > 0 {
				select { // pacing of the load, not a wait for a condition
				case <-stop:
				case <-time.After(ahead):
				}
			}
		}
	}()
	go func() { // random
		defer wg.Done()
		rng := mrand.New(mrand.NewPCG(2, 3))
		f, err := os.OpenFile(filepath.Join(dir, "rand"), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		for round := uint64(1); !stopped(); round++ {
			var written []uint64
			for range 32 {
				first, n := uint64(rng.IntN(randBlocks-16)), 1+rng.IntN(16)
				buf := make([]byte, n*mblock)
				for i := range n {
					mirrorBlock(buf[i*mblock:(i+1)*mblock], round, first+uint64(i))
					written = append(written, first+uint64(i))
				}
				if _, err := f.WriteAt(buf, int64(first)*mblock); err != nil {
					return
				}
			}
			log.mu.Lock()
			for _, b := range written {
				log.blockRounds[b] = append(log.blockRounds[b], round)
			}
			log.bytes += int64(len(written)) * mblock
			log.mu.Unlock()
			if f.Sync() != nil {
				return
			}
			log.mu.Lock()
			log.roundDone[round] = time.Now()
			log.mu.Unlock()
		}
	}()
	return &wg
}

func writeSync(p string, b []byte) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// TestMirrorS3ToS3 is the mirror's disaster drill: a writer on one S3
// server under sequential and random writes, deletes and reclamation; a
// separate `ebbfs mirror run` copying to a second S3 server; then the
// writer is killed and the first server's data destroyed. The mirror
// must mount read-only with every write fsynced more than the lag before
// the disaster, pass fsck --verify-data, and become a writer with
// --take-over. It reports the lag (p50, p99, max), the throughput, the
// mirror's request cost per GiB written and per idle minute, and the CPU
// time per GiB written of the writer, the mirror, both S3 servers and the
// load (bench/README.md).
func TestMirrorS3ToS3(t *testing.T) {
	primary, second := s3test.Start(t), s3test.Start(t)
	e := newEnv(t, withS3(primary.Endpoint, primary.Region, primary.Bucket, "fs", primary.AccessKey, primary.SecretKey),
		withMirrorProfile(t, second))
	e.init()
	w := e.mount()
	// The mirror's hold record lives 8 minutes: under the load's time
	// scale (20) the writer's grace for dead segments is then about 25 s,
	// longer than the mirror's lag and short enough for reclamation to
	// delete within the load.
	e.extraEnv = append(e.extraEnv, "EBBFS_TEST_READER_TTL=8m")
	mt := mirrorTarget{srv: second, prefix: "m", listen: freeAddr(t)}
	mp := e.startMirror(mt)

	// Idle cost: one small write, caught up, then a counted idle window.
	writeFile(t, e.path("hello"), []byte("hello\n"))
	fsyncFile(t, e.path("hello"))
	waitMirrorCaughtUp(t, mt.listen)
	idle := envSeconds("EBBFS_MIRROR_IDLE", 30*time.Second)
	before := mustMirror(t, mt.listen)
	time.Sleep(idle) // a measurement window: the requests of an idle mirror are counted over it
	after := mustMirror(t, mt.listen)
	perMin := func(m map[string]int64, n map[string]int64) string {
		var parts []string
		for op, v := range n {
			if d := v - m[op]; d > 0 && op != "bytes_up" && op != "bytes_down" {
				parts = append(parts, fmt.Sprintf("%s %.1f", op, float64(d)*float64(time.Minute)/float64(idle)))
			}
		}
		return strings.Join(parts, ", ")
	}
	t.Logf("idle mirror, per minute (counted over %s, %d journals written by the writer meanwhile): source: %s; mirror store: %s",
		idle, after.Journal-before.Journal, perMin(before.SourceRequests, after.SourceRequests), perMin(before.MirrorRequests, after.MirrorRequests))
	// The load runs reclamation 20 times faster (a grace of 3 s), so that
	// deletions happen within it.
	w.stop()
	e.extraEnv = append(e.extraEnv, "EBBFS_TEST_TIME_SCALE=20")
	w = e.mount()

	// The load, with the lag sampled.
	var flog fsyncLog
	stop := make(chan struct{})
	loadDur := envSeconds("EBBFS_MIRROR_LOAD", 40*time.Second)
	start := time.Now()
	// CPU time of each process over the load: the writer, the mirror,
	// both S3 servers, and this test (the load's writes, the kernel's
	// FUSE work for them).
	cpuProcs := []struct {
		name string
		pid  int
	}{{"writer", w.cmd.Process.Pid}, {"mirror", mp.cmd.Process.Pid}, {"source S3", primary.Pid()}, {"mirror S3", second.Pid()}, {"load (test)", os.Getpid()}}
	cpuStart := make([]float64, len(cpuProcs))
	for i, c := range cpuProcs {
		cpuStart[i] = procCPUSeconds(t, c.pid)
	}
	wg := mirrorLoad(t, e.mnt, 50<<20, stop, &flog)
	type sample struct {
		at  time.Time
		lag float64
		b   int64
	}
	var samples []sample
	for time.Since(start) < loadDur {
		time.Sleep(250 * time.Millisecond) // sampling period
		r, err := getMirror(mt.listen)
		if err != nil {
			t.Fatalf("mirror status: %v", err)
		}
		samples = append(samples, sample{time.Now(), r.LagSeconds, r.LagBytes})
	}
	atDisaster := mustMirror(t, mt.listen)
	disaster := time.Now()
	cpuUsed := make([]float64, len(cpuProcs))
	for i, c := range cpuProcs {
		cpuUsed[i] = procCPUSeconds(t, c.pid) - cpuStart[i]
	}
	w.kill()
	close(stop)
	wg.Wait()
	e.forceUnmount()
	if err := primary.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(primary.Dir); err != nil {
		t.Fatal(err)
	}
	var lags []float64
	var maxBytes int64
	recent := 0.0
	for _, s := range samples {
		lags = append(lags, s.lag)
		maxBytes = max(maxBytes, s.b)
		if disaster.Sub(s.at) < 3*time.Second {
			recent = max(recent, s.lag)
		}
	}
	flog.mu.Lock()
	written := flog.bytes
	flog.mu.Unlock()
	gib := float64(written) / (1 << 30)
	t.Logf("load: %.0f MiB written in %s (%.1f MiB/s); mirror lag over %d samples: p50 %.2fs, p99 %.2fs, max %.2fs; lag bytes max %.1f MiB; %d deletions waiting for the retention",
		float64(written)/(1<<20), loadDur, float64(written)/(1<<20)/loadDur.Seconds(), len(lags),
		percentile(lags, 0.5), percentile(lags, 0.99), percentile(lags, 1), float64(maxBytes)/(1<<20), atDisaster.PendingDeletes)
	var cpuParts []string
	cpuTotal := 0.0
	for i, c := range cpuProcs {
		cpuTotal += cpuUsed[i]
		cpuParts = append(cpuParts, fmt.Sprintf("%s %.1f", c.name, cpuUsed[i]/gib))
	}
	t.Logf("CPU seconds per GiB written: %s; total %.1f (at 50 MiB/s: %.2f cores)",
		strings.Join(cpuParts, ", "), cpuTotal/gib, cpuTotal/gib*50/1024)
	t.Logf("mirror requests per GiB written: source: %s; mirror store: %s",
		perGiB(after.SourceRequests, atDisaster.SourceRequests, gib), perGiB(after.MirrorRequests, atDisaster.MirrorRequests, gib))
	if atDisaster.PendingDeletes == 0 {
		t.Errorf("no deletion reached the mirror's queue: reclamation did not run under the load")
	}
	stopProc(t, mp)

	// The mirror, on the second server alone.
	cutoff := disaster.Add(-time.Duration((recent + 0.5) * float64(time.Second)))
	t.Logf("disaster cutoff: %.2fs before the writer was killed (the lag then, plus a sampling period)", disaster.Sub(cutoff).Seconds())
	me := newEnv(t, withS3(second.Endpoint, second.Region, second.Bucket, "m", second.AccessKey, second.SecretKey))
	ro := me.mount("--read-only")
	checkMirrorHolds(t, me.mnt, &flog, cutoff)
	ro.stop()
	r := me.ebbfs("fsck", "--verify-data")
	if r.code != 0 || !strings.Contains(r.stdout, "consistent") {
		t.Fatalf("fsck --verify-data on the mirror: %s", r)
	}
	tw := me.mount("--take-over")
	writeFile(t, me.path("after-disaster"), []byte("written on the mirror\n"))
	fsyncFile(t, me.path("after-disaster"))
	if got := readFile(t, me.path("after-disaster")); string(got) != "written on the mirror\n" {
		t.Fatalf("the taken-over mirror read back %q", got)
	}
	tw.stop()
}

// procCPUSeconds is the user and system CPU time process pid has used
// (/proc/PID/stat, in clock ticks of 1/100 s).
func procCPUSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("CPU time of process %d: %v", pid, err)
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis (state is field 3, utime 14, stime 15).
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return float64(utime+stime) / 100
}

func mustMirror(t *testing.T, addr string) mirrorReply {
	t.Helper()
	r, err := getMirror(addr)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func perGiB(a, b map[string]int64, gib float64) string {
	var parts []string
	for op, v := range b {
		if d := v - a[op]; d > 0 && op != "bytes_up" && op != "bytes_down" {
			parts = append(parts, fmt.Sprintf("%s %.0f", op, float64(d)/gib))
		}
	}
	return strings.Join(parts, ", ")
}

// waitMirrorCaughtUp waits until the mirror's lag is under 2 s with
// nothing left to copy.
func waitMirrorCaughtUp(t *testing.T, addr string) mirrorReply {
	t.Helper()
	var last mirrorReply
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		r, err := getMirror(addr)
		if err == nil && r.LagSeconds < 2 && r.LagBytes == 0 && r.Journal > 0 {
			return r
		}
		last = r
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the mirror did not catch up: %+v", last)
	return last
}

// checkMirrorHolds checks the mounted mirror against the load's log:
// every sequential file fsynced before cutoff and alive at the end is
// there byte for byte; every block of the random file is one of ours and
// at least as new as the newest round that wrote it and was fsynced
// before cutoff.
func checkMirrorHolds(t *testing.T, dir string, flog *fsyncLog, cutoff time.Time) {
	t.Helper()
	flog.mu.Lock()
	defer flog.mu.Unlock()
	checked := 0
	for name, rec := range flog.files {
		if !rec.fsynced.Before(cutoff) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("%s (fsynced %s before the disaster's cutoff) is not in the mirror: %v", name, cutoff.Sub(rec.fsynced), err)
		}
		if sha256.Sum256(b) != rec.sum {
			t.Fatalf("%s differs in the mirror", name)
		}
		checked++
	}
	b, err := os.ReadFile(filepath.Join(dir, "rand"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	blocks, older := 0, 0
	for i, rounds := range flog.blockRounds {
		var want uint64
		for _, r := range rounds {
			if done, ok := flog.roundDone[r]; ok && done.Before(cutoff) {
				want = max(want, r)
			}
		}
		var got int64
		if off := i * mblock; off+mblock <= len(b) {
			got = mirrorBlockRound(b[off:off+mblock], uint64(i))
		} else if off < len(b) {
			got = mirrorBlockRound(append(bytes.Clone(b[off:]), make([]byte, off+mblock-len(b))...), uint64(i))
		}
		if got < 0 {
			t.Fatalf("block %d of the random file in the mirror is not one the load wrote", i)
		}
		if uint64(got) < want {
			older++
		}
		if want > 0 {
			blocks++
		}
	}
	if older > 0 {
		t.Fatalf("%d blocks of the random file in the mirror are older than what was fsynced before the cutoff", older)
	}
	t.Logf("the mirror holds the %d sequential files and %d random-file blocks fsynced before the cutoff", checked, blocks)
}

// stopProc stops a process that is not a mount with SIGTERM and requires
// exit 0.
func stopProc(t *testing.T, p *proc) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, p.out.String())
	}
}
