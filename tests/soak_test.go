package tests

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/s3test"
)

// The chaos soak: several workers change files on the mount and an NBD
// export (qemu-io) with fsync/FLUSH at random, reclamation runs on its own
// schedule, the real S3 server is stalled (SIGSTOP/SIGCONT) or killed and
// restarted on its data, a proxy in front of it fails requests at random,
// and the writer is killed with SIGKILL (or dies at a failpoint) and
// restarted, sometimes with its cache directory wiped. After every restart each file must be one the model of
// acknowledged barriers allows; at the end everything must be exactly as
// written, the store must come back to the live bytes, and fsck
// --verify-data must be clean.

const (
	soakFileWorkers = 3
	soakNBDExports  = 2    // each written by its own qemu-io process
	soakNBDBlocks   = 4096 // 16 MiB exports
	soakNBDID       = 1 << 40
	soakBaseRate    = 0.01 // requests failed by the proxy outside bursts
	soakBurstRate   = 0.25
	// soakMinDeadPercent is [reclaim] min_dead_percent (the default): a
	// segment less dead than this is not repacked.
	soakMinDeadPercent = 10
)

// soakPhase is one writer process and the workload against it.
type soakPhase struct {
	p       *proc
	over    atomic.Bool // the workload is to stop
	calm    atomic.Bool // the chaos is to stop
	killing atomic.Bool // the writer is being killed: errors are expected
}

func (ph *soakPhase) dying() bool { return ph.killing.Load() || ph.p.exited() }

// failed reports whether a worker should stop after err: quietly when the
// writer is dying (a kill or a failpoint), with a test error otherwise.
func (ph *soakPhase) failed(t testing.TB, what string, err error) bool {
	if err == nil {
		return false
	}
	deadline := time.Now().Add(10 * time.Second)
	for !ph.dying() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !ph.dying() {
		t.Errorf("%s: %v (the writer is running)", what, err)
	}
	return true
}

// soakWorker changes the files of its own directory on the mount.
type soakWorker struct {
	t        testing.TB
	e        *env
	rel      string // its directory, relative to the mount
	rng      *rand.Rand
	base     uint64 // file ids are base+n
	next     uint64
	ver      uint64
	files    map[uint64]*soakFile
	ops      map[string]int
	fsyncs   int
	verified int64 // bytes read and checked
}

func newSoakWorker(t *testing.T, e *env, k int, seed uint64) *soakWorker {
	return &soakWorker{t: t, e: e, rel: fmt.Sprintf("w%d", k), rng: rand.New(rand.NewPCG(seed, uint64(100+k))),
		base: uint64(k) << 32, next: 1, files: map[uint64]*soakFile{}, ops: map[string]int{}}
}

func (w *soakWorker) path(name string) string { return w.e.path(w.rel + "/" + name) }

func (w *soakWorker) live() []*soakFile {
	var out []*soakFile
	for _, f := range w.files {
		if f.name != "" {
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// size picks a file size in blocks: mostly small, sometimes more than
// 10 extents (deleted through a tombstone and the cleaner).
func (w *soakWorker) size() int {
	if w.rng.IntN(6) == 0 {
		return 81 + w.rng.IntN(220)
	}
	return 1 + w.rng.IntN(40)
}

// barrier: everything this worker did before a successful fsync is
// durable (the barrier covers every change before it, README).
func (w *soakWorker) barrier() {
	w.fsyncs++
	for id, f := range w.files {
		if f.c.dirty {
			f.durable()
		}
		if f.name == "" && f.dName == "" {
			delete(w.files, id)
		}
	}
}

// run changes files until the phase is over or the writer dies.
func (w *soakWorker) run(ph *soakPhase) {
	for !ph.over.Load() {
		op, err := w.step()
		if ph.failed(w.t, w.rel+" "+op, err) {
			return
		}
		time.Sleep(time.Duration(w.rng.IntN(4)) * time.Millisecond)
	}
}

// step runs one random operation.
func (w *soakWorker) step() (string, error) {
	live := w.live()
	op := "create"
	if len(live) >= 4 {
		switch r := w.rng.IntN(100); {
		case r < 10:
			op = "create"
		case r < 30:
			op = "overwrite"
		case r < 40:
			op = "append"
		case r < 48:
			op = "truncate"
		case r < 54:
			op = "rewrite"
		case r < 62:
			op = "rename"
		case r < 70:
			op = "delete"
		case r < 85:
			op = "verify"
		default:
			op = "fsync"
		}
		if op == "create" && len(live) >= 40 {
			op = "delete"
		}
	}
	w.ops[op]++
	var f *soakFile
	if op != "create" {
		f = live[w.rng.IntN(len(live))]
	}
	switch op {
	case "create":
		id := w.base + w.next
		w.next++
		f = &soakFile{id: id, name: fmt.Sprintf("f%d.0", id), c: newSoakContent(nil)}
		w.files[id] = f
		f.noteName()
		f.c.note(0)
		n, v := w.size(), w.nextVer()
		f.c.write(0, n, v)
		fd, err := os.OpenFile(w.path(f.name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return op, err
		}
		_, err = fd.Write(blocks(id, 0, n, v))
		return op, w.closeMaybeSync(fd, err)
	case "overwrite", "append":
		n := len(f.c.vers)
		idx := n
		if op == "overwrite" {
			idx = w.rng.IntN(n + 4) // sometimes past the end: a hole before it
		}
		k, v := 1+w.rng.IntN(64), w.nextVer()
		f.c.write(idx, k, v)
		fd, err := os.OpenFile(w.path(f.name), os.O_WRONLY, 0)
		if err != nil {
			return op, err
		}
		_, err = fd.WriteAt(blocks(f.id, uint64(idx), k, v), int64(idx)*blockSize)
		return op, w.closeMaybeSync(fd, err)
	case "truncate":
		m := w.rng.IntN(len(f.c.vers) + 9)
		f.c.truncate(m)
		return op, os.Truncate(w.path(f.name), int64(m)*blockSize)
	case "rewrite": // O_TRUNC, then new content
		f.c.truncate(0)
		n, v := w.size(), w.nextVer()
		f.c.write(0, n, v)
		fd, err := os.OpenFile(w.path(f.name), os.O_TRUNC|os.O_WRONLY, 0)
		if err != nil {
			return op, err
		}
		_, err = fd.Write(blocks(f.id, 0, n, v))
		return op, w.closeMaybeSync(fd, err)
	case "rename":
		from := f.name
		_, gen, _ := strings.Cut(from, ".")
		g, _ := strconv.Atoi(gen)
		f.name = fmt.Sprintf("f%d.%d", f.id, g+1)
		f.noteName()
		return op, os.Rename(w.path(from), w.path(f.name))
	case "delete":
		name := f.name
		f.name = ""
		f.noteName()
		if w.rng.IntN(3) > 0 {
			return op, os.Remove(w.path(name))
		}
		// Unlinked while open, written to, then closed: an orphan
		// deleted at its last close.
		fd, err := os.OpenFile(w.path(name), os.O_RDWR, 0)
		if err != nil {
			return op, err
		}
		if err := os.Remove(w.path(name)); err != nil {
			fd.Close()
			return op, err
		}
		_, err = fd.WriteAt(blocks(f.id, 0, 1, w.nextVer()), 0)
		if cerr := fd.Close(); err == nil {
			err = cerr
		}
		return op, err
	case "verify":
		data, err := os.ReadFile(w.path(f.name))
		if err != nil {
			return op, err
		}
		got, perr := soakVersions(f.id, data)
		if perr == nil {
			if d := f.c.exact(got); d != "" {
				perr = fmt.Errorf("%s", d)
			}
		}
		if perr != nil {
			w.t.Errorf("%s/%s read back wrong while the writer runs: %v", w.rel, f.name, perr)
		}
		w.verified += int64(len(data))
		return op, nil
	default: // fsync a file or the directory
		p := w.path(f.name)
		if w.rng.IntN(4) == 0 {
			p = w.e.path(w.rel)
		}
		fd, err := os.Open(p)
		if err != nil {
			return op, err
		}
		err = fd.Sync()
		if cerr := fd.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			w.barrier()
		}
		return op, err
	}
}

func (w *soakWorker) nextVer() uint64 { w.ver++; return w.ver }

// closeMaybeSync fsyncs a written file one time in five, then closes it.
func (w *soakWorker) closeMaybeSync(fd *os.File, err error) error {
	synced := false
	if err == nil && w.rng.IntN(5) == 0 {
		if err = fd.Sync(); err == nil {
			synced = true
		}
	}
	if cerr := fd.Close(); err == nil {
		err = cerr
	}
	if err == nil && synced {
		w.barrier()
	}
	return err
}

// check compares the worker's directory with the model. After a crash
// (strict false) each file may hold its last barrier's state or any one
// reached since, block by block; afterwards the model takes what is
// there as the new durable state. Strict: exactly the current state.
func (w *soakWorker) check(strict bool, when string) {
	t := w.t
	ents, err := os.ReadDir(w.e.path(w.rel))
	if err != nil {
		t.Errorf("%s: list %s: %v", when, w.rel, err)
		return
	}
	found := map[uint64]string{}
	for _, d := range ents {
		id, ok := fileID(d.Name())
		if !ok || w.files[id] == nil {
			t.Errorf("%s: %s/%s exists but the model has no such file", when, w.rel, d.Name())
			continue
		}
		if prev, dup := found[id]; dup {
			t.Errorf("%s: file %d exists as both %s and %s", when, id, prev, d.Name())
		}
		found[id] = d.Name()
	}
	for id, f := range w.files {
		name := found[id]
		switch {
		case strict && name != f.name:
			t.Errorf("%s: %s: file %d is named %q, want %q", when, w.rel, id, name, f.name)
			continue
		case !strict && name != f.dName && !f.pNames[name]:
			t.Errorf("%s: %s: file %d is named %q; the last barrier had %q, names since %v", when, w.rel, id, name, f.dName, f.pNames)
			continue
		}
		if name == "" {
			delete(w.files, id)
			continue
		}
		data, err := os.ReadFile(w.path(name))
		if err != nil {
			t.Errorf("%s: read %s/%s: %v", when, w.rel, name, err)
			continue
		}
		w.verified += int64(len(data))
		got, err := soakVersions(id, data)
		if err != nil {
			t.Errorf("%s: %s/%s: %v", when, w.rel, name, err)
			continue
		}
		var d string
		if strict {
			d = f.c.exact(got)
		} else {
			d = f.c.possible(got, f.dName != "")
		}
		if d != "" {
			t.Errorf("%s: %s/%s: %s", when, w.rel, name, d)
			continue
		}
		f.name = name
		f.c.vers = got
		f.durable()
	}
}

// soakNBD writes to an NBD export through qemu-io.
type soakNBD struct {
	t                             testing.TB
	e                             *env
	name, uri, src                string
	id                            uint64
	rng                           *rand.Rand
	ver                           uint64
	c                             *soakContent
	writes, zeroes, flushes, fuas int
	verified                      int64
}

func (n *soakNBD) run(ph *soakPhase) {
	q, err := n.e.startQemuIO(n.uri)
	if ph.failed(n.t, "start qemu-io", err) {
		return
	}
	defer q.close()
	for !ph.over.Load() {
		var cmd string
		barrier := false
		k := 1 + n.rng.IntN(32)
		idx := n.rng.IntN(soakNBDBlocks - k)
		switch r := n.rng.IntN(100); {
		case r < 60:
			n.ver++
			if err := os.WriteFile(n.src, blocks(n.id, uint64(idx), k, n.ver), 0o600); err != nil {
				n.t.Fatal(err)
			}
			n.c.write(idx, k, n.ver)
			flag := ""
			if n.rng.IntN(8) == 0 {
				flag, barrier = "-f ", true // FUA: a barrier (README)
				n.fuas++
			}
			cmd = fmt.Sprintf("write -q %s-s %s %d %d", flag, n.src, idx*blockSize, k*blockSize)
			n.writes++
		case r < 75:
			n.c.write(idx, k, 0)
			flag := ""
			if n.rng.IntN(2) == 0 {
				flag = "-u " // may unmap
			}
			cmd = fmt.Sprintf("write -q -z %s%d %d", flag, idx*blockSize, k*blockSize)
			n.zeroes++
		default:
			cmd, barrier = "flush", true
			n.flushes++
		}
		out, err := q.do(cmd, 5*time.Minute)
		if err == nil && out != "" {
			err = fmt.Errorf("%s", out)
		}
		if ph.failed(n.t, "qemu-io "+cmd, err) {
			return
		}
		if barrier {
			n.c.durable()
		}
	}
}

// check reads the export through the mount and through NBD (nbdcopy):
// both the same, and what the model allows (strict: exactly).
func (n *soakNBD) check(strict bool, when string) {
	t := n.t
	p := n.e.path(".nbd/" + n.name)
	dropPageCache(t, p)
	viaMount, err := os.ReadFile(p)
	if err != nil {
		t.Errorf("%s: read the export through the mount: %v", when, err)
		return
	}
	copyPath := filepath.Join(n.e.dir, n.name+".raw")
	if r := n.e.run("nbdcopy", n.uri, copyPath); r.code != 0 {
		t.Errorf("%s: nbdcopy from the export: %s", when, r)
		return
	}
	viaNBD := readFile(t, copyPath)
	os.Remove(copyPath)
	n.verified += int64(len(viaMount) + len(viaNBD))
	if !bytes.Equal(viaMount, viaNBD) {
		t.Errorf("%s: export %s reads differently through the mount and through NBD", when, n.name)
	}
	got, err := soakVersions(n.id, viaNBD)
	if err != nil {
		t.Errorf("%s: export %s: %v", when, n.name, err)
		return
	}
	d := n.c.possible(got, true)
	if strict {
		d = n.c.exact(got)
	}
	if d != "" {
		t.Errorf("%s: export %s: %s", when, n.name, d)
		return
	}
	n.c.vers = got
	n.c.durable()
}

// soakFailpoints are points hit all the time under the soak's workload,
// with the largest hit count to arm them at (a crash there instead of a
// SIGKILL; if the count is not reached the SIGKILL comes as planned).
var soakFailpoints = []struct {
	name string
	max  int
}{
	{"segment-after-upload", 400},
	{"barrier-after-journal", 400},
	{"barrier-before-journal", 400},
	{"segment-after-commit", 400},
	{"unlink-tombstone-written", 20},
	{"cleaner-after-commit", 20},
	{"repack-after-upload", 100},
	{"repack-after-repoint", 100},
	{"delete-after-object-delete", 100},
	{"cycle-after-scan", 100},
	{"lsm.publish.manifest-written", 3},
	{"orphan-last-close", 20},
}

// TestSoak runs the chaos soak for 3 minutes (EBBFS_SOAK_DURATION, make
// soak: 1 hour). Asserted: no operation fails while its writer runs (store
// stalls and errors included); after every restart each file and the NBD
// export hold what the model of acknowledged barriers allows; at the end
// exactly what was written; reclamation repacked and deleted segments
// during the run and brings segments/ back to the live bytes; fsck
// --verify-data is clean.
func TestSoak(t *testing.T) {
	if noRun != "" {
		t.Skipf("end-to-end tests need: %s", noRun)
	}
	need(t, "qemu-io", "nbdcopy")
	dur := soakDuration(t)
	seed := e2eSeed(t)
	rng := rand.New(rand.NewPCG(seed, 21))
	killEvery := func() time.Duration {
		if dur >= 10*time.Minute {
			return 2 * time.Minute
		}
		return time.Duration(60+rng.IntN(21)) * time.Second
	}

	srv := s3test.Start(t)
	px := startFaultProxy(t, srv.Endpoint, seed)
	const prefix = "soak"
	e := newEnv(t, withS3(px.endpoint(), srv.Region, srv.Bucket, prefix, srv.AccessKey, srv.SecretKey),
		withEnvVars("EBBFS_TEST_TIME_SCALE=200"))
	e.writeConfig(fmt.Sprintf("\n[reclaim]\nmin_dead_percent = %d\n", soakMinDeadPercent))
	e.init()
	// The server's pid changes when it is killed and restarted.
	var srvMu sync.Mutex
	signalServer := func(sig syscall.Signal) {
		srvMu.Lock()
		defer srvMu.Unlock()
		if err := syscall.Kill(srv.Pid(), sig); err != nil {
			t.Errorf("%v to the S3 server: %v", sig, err)
		}
	}
	defer signalServer(syscall.SIGCONT)
	storeDir := filepath.Join(srv.Dir, "data", srv.Bucket, prefix)
	px.setRate(soakBaseRate)

	workers := make([]*soakWorker, soakFileWorkers)
	for k := range workers {
		workers[k] = newSoakWorker(t, e, k+1, seed)
	}
	nbds := make([]*soakNBD, soakNBDExports)
	for k := range nbds {
		name := fmt.Sprintf("disk%d", k)
		nbds[k] = &soakNBD{t: t, e: e, name: name, uri: "nbd://" + e.nbdAddr + "/" + name, src: filepath.Join(e.dir, name+"-src"),
			id: soakNBDID + uint64(k), rng: rand.New(rand.NewPCG(seed, uint64(200+k))), c: newSoakContent(make([]uint64, soakNBDBlocks))}
	}

	var (
		totals                       reclaimTotals
		kills, stallKills, fpCrashes int
		restarts, wiped              int
		stalls, bursts, srvKills     atomic.Int64
		stalled                      atomic.Int64 // nanoseconds
		fpFired                      []string
		lastOfFinal                  reclaimTotals // the last writer's counters when the workload stopped
	)
	start := time.Now()
	var p *proc
	var procs []*proc // every writer, for its log
	for phase := 1; ; phase++ {
		phaseEnd := start.Add(dur)
		if k := time.Now().Add(killEvery()); k.Before(phaseEnd.Add(-20 * time.Second)) {
			phaseEnd = k
		}
		final := !phaseEnd.Before(start.Add(dur))
		armed := ""
		if !final && (phase == 2 || phase > 2 && rng.IntN(3) == 0) {
			fp := soakFailpoints[rng.IntN(len(soakFailpoints))]
			armed = fmt.Sprintf("%s=%d", fp.name, 1+rng.IntN(fp.max))
		}
		if armed != "" {
			base := e.extraEnv
			e.extraEnv = append(append([]string(nil), base...), "EBBFS_FAILPOINT="+armed)
			p = e.start()
			e.extraEnv = base
		} else {
			p = e.start()
		}
		procs = append(procs, p)
		ph := &soakPhase{p: p}
		if !p.waitUp(mountTimeout, true) {
			fpCrashes++
			soakDied(t, p, armed, &fpFired)
			e.forceUnmount()
			restarts++
			continue
		}
		if phase == 1 {
			for _, w := range workers {
				if err := os.Mkdir(e.path(w.rel), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for _, n := range nbds {
				writeFile(t, e.path(".nbd/"+n.name), nil)
				if err := os.Truncate(e.path(".nbd/"+n.name), soakNBDBlocks*blockSize); err != nil {
					t.Fatal(err)
				}
			}
			e.mustEbbfs("flush")
		} else {
			// After the restart: everything acknowledged is there. An
			// armed failpoint may kill the writer in the middle of the
			// check (reclamation starts at once): the check's failures
			// then say nothing, and the next restart checks again.
			when := fmt.Sprintf("after restart %d", restarts)
			soft := &softTB{TB: t}
			for _, w := range workers {
				w.t = soft
				soft.run(func() { w.check(false, when) })
				w.t = t
			}
			for _, n := range nbds {
				n.t = soft
				soft.run(func() { n.check(false, when) })
				n.t = t
			}
			if len(soft.errs) > 0 && armed != "" && waitExited(p, 10*time.Second) {
				t.Logf("%s: the writer died at its failpoint during the check (%d reads failed); restarting", when, len(soft.errs))
				fpCrashes++
				soakDied(t, p, armed, &fpFired)
				e.forceUnmount()
				restarts++
				continue
			}
			for _, msg := range soft.errs {
				t.Error(msg)
			}
			if t.Failed() {
				t.FailNow()
			}
		}

		var wg sync.WaitGroup
		for _, w := range workers {
			wg.Add(1)
			go func() { defer wg.Done(); w.run(ph) }()
		}
		for _, n := range nbds {
			wg.Add(1)
			go func() { defer wg.Done(); n.run(ph) }()
		}
		var chaosWG sync.WaitGroup
		chaosWG.Add(1)
		go func() {
			defer chaosWG.Done()
			crng := rand.New(rand.NewPCG(seed, uint64(1000+phase)))
			for !ph.calm.Load() {
				for wait := time.Duration(5+crng.IntN(11)) * time.Second; wait > 0 && !ph.calm.Load(); wait -= 100 * time.Millisecond {
					time.Sleep(100 * time.Millisecond)
				}
				if ph.calm.Load() {
					return
				}
				switch r := crng.IntN(100); {
				case r < 45:
					d := time.Duration(2000+crng.IntN(4000)) * time.Millisecond
					signalServer(syscall.SIGSTOP)
					time.Sleep(d)
					signalServer(syscall.SIGCONT)
					stalls.Add(1)
					stalled.Add(int64(d))
				case r < 60:
					// A crash of the server, restarted on the same data.
					srvMu.Lock()
					err := srv.Kill()
					if err == nil {
						time.Sleep(time.Duration(500+crng.IntN(2500)) * time.Millisecond)
						err = srv.Restart()
					}
					srvMu.Unlock()
					if err != nil {
						t.Errorf("kill and restart the S3 server: %v", err)
						return
					}
					srvKills.Add(1)
				default:
					px.setRate(soakBurstRate)
					time.Sleep(time.Duration(3000+crng.IntN(5000)) * time.Millisecond)
					px.setRate(soakBaseRate)
					bursts.Add(1)
				}
			}
		}()

		var last reclaimTotals
		lastScrape := time.Now()
		for time.Now().Before(phaseEnd) && !p.exited() && !t.Failed() {
			time.Sleep(200 * time.Millisecond)
			if time.Since(lastScrape) > 5*time.Second {
				if rt, ok := soakScrape(e); ok {
					last = rt
				}
				lastScrape = time.Now()
			}
		}
		if final || t.Failed() {
			ph.over.Store(true)
			ph.calm.Store(true)
			wg.Wait()
			chaosWG.Wait()
			if rt, ok := soakScrape(e); ok {
				last = rt
			}
			totals.repacks += last.repacks
			totals.deleted += last.deleted
			totals.relocated += last.relocated
			lastOfFinal = last
			break
		}
		ph.calm.Store(true)
		chaosWG.Wait() // the workload goes on meanwhile
		if p.exited() {
			fpCrashes++
		} else {
			if rng.IntN(2) == 0 {
				// Killed during a store stall, with barriers waiting
				// for it; the next writer starts while the store is
				// still stopped and recovers once it answers again.
				signalServer(syscall.SIGSTOP)
				time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
				d := time.Duration(2000+rng.IntN(3000)) * time.Millisecond
				time.AfterFunc(d, func() { signalServer(syscall.SIGCONT) })
				stallKills++
			}
			ph.killing.Store(true)
			p.kill()
			kills++
		}
		ph.over.Store(true)
		waited := make(chan struct{})
		go func() { wg.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-time.After(2 * time.Minute):
			t.Fatalf("the workload did not stop within 2 minutes of the writer's death")
		}
		if code := p.wait(); code != 128+int(syscall.SIGKILL) {
			soakDied(t, p, armed, &fpFired)
		}
		totals.repacks += last.repacks
		totals.deleted += last.deleted
		totals.relocated += last.relocated
		e.forceUnmount()
		restarts++
		if restarts%2 == 0 {
			// Recovery from the store alone.
			if err := os.RemoveAll(e.cache); err != nil {
				t.Fatal(err)
			}
			wiped++
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// The end: no faults; exactly what was written, in the writer that ran
	// last and after a clean restart.
	px.setRate(0)
	for _, w := range workers {
		w.check(true, "at the end")
	}
	for _, n := range nbds {
		n.check(true, "at the end")
	}
	e.mustEbbfs("flush")

	// Reclamation brings segments/ back to the live bytes.
	reclaimStart := time.Now()
	var sp spaceStats
	var got int64
	var objs int
	for round := 1; ; round++ {
		e.mustEbbfs("reclaim", "sweep")
		e.reclaimRun()
		sp = e.space()
		got, objs = segmentBytes(t, storeDir)
		// The repack policy leaves a segment at most min_dead_percent
		// (default 10) dead; every object under segments/ is counted (no
		// orphan left).
		bound := sp.LiveBytes*100/(100-soakMinDeadPercent) + 512<<10
		if sp.TombstonesPending == 0 && sp.DeadSegments == 0 && got <= bound && got <= sp.SegmentBytes+512<<10 {
			if got < sp.LiveBytes {
				t.Errorf("segments/ holds %d bytes, less than the %d live bytes", got, sp.LiveBytes)
			}
			t.Logf("reclaimed to the live bytes in %d rounds (%v): segments/ holds %s in %d objects for %s live (%s fragmented, below the repack threshold)",
				round, time.Since(reclaimStart).Round(time.Millisecond), mibs(got), objs, mibs(sp.LiveBytes), mibs(sp.FragmentedBytes))
			break
		}
		if time.Since(reclaimStart) > 90*time.Second {
			t.Fatalf("segments/ did not come back to the live bytes: %s in %d objects, %+v\n%s", mibs(got), objs, sp, e.ebbfs("space").stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if rt, ok := soakScrape(e); ok {
		t.Logf("the final reclamation: %.0f repacks, %.0f segments deleted", rt.repacks-lastOfFinal.repacks, rt.deleted-lastOfFinal.deleted)
	}
	p.stop()
	p = e.mount()
	procs = append(procs, p)
	for _, w := range workers {
		w.check(true, "after a clean restart")
	}
	for _, n := range nbds {
		n.check(true, "after a clean restart")
	}
	p.stop()
	if r := e.ebbfs("fsck", "--verify-data"); r.code != 0 || !strings.Contains(r.stdout, "consistent") {
		t.Fatalf("fsck --verify-data: %s", r)
	}

	ops := map[string]int{}
	var fsyncs int
	var verified int64
	for _, w := range workers {
		for k, v := range w.ops {
			ops[k] += v
		}
		fsyncs += w.fsyncs
		verified += w.verified
	}
	var nops int
	for _, v := range ops {
		nops += v
	}
	var nw, nf, nz, nfl int
	for _, n := range nbds {
		verified += n.verified
		nw, nf, nz, nfl = nw+n.writes, nf+n.fuas, nz+n.zeroes, nfl+n.flushes
	}
	t.Logf("soak of %v (seed %d): %d file ops %v, %d acknowledged fsyncs; NBD (%d exports): %d writes (%d FUA), %d zero writes, %d flushes; "+
		"%d SIGKILLs (%d during a store stall), %d failpoint crashes %v, %d restarts (%d with the cache wiped); %d store stalls (%v), %d server crashes and restarts, %d error bursts; proxy: %s; "+
		"%.1f MiB verified; reclamation during the run: %.0f repacks (%.0f frames relocated), %.0f segments deleted",
		dur, seed, nops, ops, fsyncs, soakNBDExports, nw, nf, nz, nfl,
		kills, stallKills, fpCrashes, fpFired, restarts, wiped, stalls.Load(), time.Duration(stalled.Load()).Round(time.Millisecond), srvKills.Load(), bursts.Load(), px,
		float64(verified)/mib, totals.repacks, totals.relocated, totals.deleted)
	logged := map[string]int{}
	for _, p := range procs {
		for _, line := range strings.Split(p.out.String(), "\n") {
			if !strings.Contains(line, "level=ERROR") {
				continue
			}
			msg := line
			if _, m, ok := strings.Cut(line, "msg="); ok {
				msg = m
				if i := strings.Index(m, "\" "); i >= 0 {
					msg = m[:i+1]
				}
			}
			logged[msg]++
		}
	}
	t.Logf("the writers logged %d distinct errors: %v", len(logged), logged)
	if kills == 0 {
		t.Errorf("no SIGKILL in %v", dur)
	}
	if totals.repacks == 0 || totals.deleted == 0 {
		t.Errorf("reclamation did not both repack (%.0f) and delete segments (%.0f) during the run", totals.repacks, totals.deleted)
	}
	if stalls.Load()+srvKills.Load() == 0 {
		t.Errorf("the store was neither stalled nor crashed in %v", dur)
	}
}

// softTB collects a check's failures instead of reporting them; Fatal
// ends the check (run recovers it).
type softTB struct {
	testing.TB
	errs []string
}

type softFatal struct{}

func (s *softTB) Helper()                   {}
func (s *softTB) Error(a ...any)            { s.errs = append(s.errs, fmt.Sprint(a...)) }
func (s *softTB) Errorf(f string, a ...any) { s.errs = append(s.errs, fmt.Sprintf(f, a...)) }
func (s *softTB) Fatal(a ...any)            { s.Error(a...); panic(softFatal{}) }
func (s *softTB) Fatalf(f string, a ...any) { s.Errorf(f, a...); panic(softFatal{}) }
func (s *softTB) FailNow()                  { s.Error("FailNow"); panic(softFatal{}) }

// run calls f, ending it quietly at a Fatal.
func (s *softTB) run(f func()) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(softFatal); !ok {
				panic(r)
			}
		}
	}()
	f()
}

// waitExited reports whether p exits within d.
func waitExited(p *proc, d time.Duration) bool {
	for deadline := time.Now().Add(d); !p.exited(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// soakDied checks that a writer that exited by itself died at its armed
// failpoint.
func soakDied(t *testing.T, p *proc, armed string, fired *[]string) {
	t.Helper()
	name := fpName(armed)
	if armed == "" || !crashExitedAt(p, name) {
		t.Fatalf("the writer exited with %d (failpoint armed: %q):\n%s", p.code, armed, tail(p.out.String(), 60))
	}
	*fired = append(*fired, armed)
}
