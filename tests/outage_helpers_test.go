package tests

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Helpers of the store outage tests (outage_test.go): a workload of file
// writes, reads, fsyncs and metadata operations through the mount and of
// NBD writes, reads and flushes through qemu-io, with a model of what each
// wrote, and a record of every error an application saw.

// appErrors collects the errors the workload's applications saw.
type appErrors struct {
	mu   sync.Mutex
	errs []string
}

func (a *appErrors) add(format string, args ...any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.errs = append(a.errs, fmt.Sprintf("%s %s", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...)))
}

func (a *appErrors) list() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.errs...)
}

// fsyncRecord is one fsync's start and duration.
type fsyncRecord struct {
	start time.Time
	took  time.Duration
}

// workload runs file workers and an NBD worker against a mount until
// stopped.
type workload struct {
	e       *env
	errs    *appErrors
	stopped chan struct{}
	wg      sync.WaitGroup

	mu     sync.Mutex
	files  map[string][]byte // name -> content last written (write returned)
	dirs   map[string]bool   // directories made (and renamed into place)
	fsyncs []fsyncRecord
	nbd    map[int]byte // region -> pattern of the last acknowledged write
	nbdOps int          // qemu-io runs that succeeded
	ops    int          // file operations that succeeded
	cached int          // reads of cached files and metadata operations that succeeded

	cachedOp      string    // what the cached worker is doing now
	cachedOpSince time.Time // since when
}

const (
	nbdExport  = "disk0"
	nbdSize    = 16 << 20
	nbdRegion  = 256 << 10 // regions are this far apart
	nbdWrite   = 64 << 10  // and this long
	nbdRegions = nbdSize / nbdRegion
)

func newWorkload(e *env) *workload {
	return &workload{e: e, errs: &appErrors{}, stopped: make(chan struct{}),
		files: map[string][]byte{}, dirs: map[string]bool{}, nbd: map[int]byte{}}
}

// cachedFiles are written, fsynced and read once before the workers
// start: their data is in the caches.
const cachedFiles = 6

// start creates the NBD export and the cached files and starts the
// workers: fileWorkers that write, read, fsync and rename, one that
// writes and reads but never fsyncs, one that reads the cached files and
// runs metadata operations, and the NBD worker.
func (w *workload) start(fileWorkers int) {
	t := w.e.t
	t.Helper()
	if r := w.e.run("truncate", "-s", strconv.Itoa(nbdSize), w.e.path(".nbd/"+nbdExport)); r.code != 0 {
		t.Fatalf("truncate: %s", r)
	}
	for i := range cachedFiles {
		name := fmt.Sprintf("f%d.0", 900+i)
		data := blocks(uint64(900+i), 0, 8+i*4, 1)
		writeFile(t, w.e.path(name), data)
		fsyncFile(t, w.e.path(name))
		w.files[name] = data
	}
	w.e.mustEbbfs("flush")
	for i := range cachedFiles {
		readFile(t, w.e.path(fmt.Sprintf("f%d.0", 900+i)))
	}
	for i := range fileWorkers {
		w.wg.Add(1)
		go w.fileWorker(i, true)
	}
	w.wg.Add(3)
	go w.fileWorker(fileWorkers, false)
	go w.cachedWorker()
	go w.nbdWorker()
}

// duringOutage writes a file and fsyncs it, and writes the last NBD
// region and flushes it with qemu-io, both in the background; the
// returned function waits for both (at most d) and reports what each
// returned and when. Both are recorded in the model.
// duringResult is what the fsync and the NBD FLUSH of duringOutage
// returned, and when.
type duringResult struct {
	fsyncErr, flushErr   error
	fsyncDone, flushDone time.Time
}

func (w *workload) duringOutage(d time.Duration) func() duringResult {
	type res struct {
		err  error
		done time.Time
	}
	fs, fl := make(chan res, 1), make(chan res, 1)
	name, data := "f950.0", blocks(950, 0, 12, 1)
	go func() {
		err := os.WriteFile(w.e.path(name), data, 0o644)
		if err == nil {
			var f *os.File
			if f, err = os.OpenFile(w.e.path(name), os.O_RDWR, 0); err == nil {
				err = f.Sync()
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
		}
		fs <- res{err, time.Now()}
	}()
	const pat = 0xee
	go func() {
		cmd := w.e.command(context.Background(), "qemu-io", "-f", "raw",
			"-c", fmt.Sprintf("write -P %d %d %d", pat, (nbdRegions-1)*nbdRegion, nbdWrite),
			"-c", "flush", "nbd://"+w.e.nbdAddr+"/"+nbdExport)
		out, err := cmd.CombinedOutput()
		if err == nil && (bytes.Contains(out, []byte("failed")) || bytes.Contains(out, []byte("rror"))) {
			err = fmt.Errorf("qemu-io: %s", out)
		}
		fl <- res{err, time.Now()}
	}()
	return func() duringResult {
		timeout := time.After(d)
		var a, b res
		for i := 0; i < 2; i++ {
			select {
			case a = <-fs:
				if a.err == nil {
					w.mu.Lock()
					w.files[name] = data
					w.mu.Unlock()
				}
			case b = <-fl:
				if b.err == nil {
					w.mu.Lock()
					w.nbd[nbdRegions-1] = pat
					w.mu.Unlock()
				}
			case <-timeout:
				w.e.t.Fatalf("the fsync and NBD FLUSH started during the outage did not both return within %s of its end", d)
			}
		}
		return duringResult{fsyncErr: a.err, flushErr: b.err, fsyncDone: a.done, flushDone: b.done}
	}
}

// cachedWorker reads the cached files and makes, renames, lists and stats
// directories.
func (w *workload) cachedWorker() {
	defer w.wg.Done()
	r := rand.New(rand.NewPCG(77, uint64(time.Now().UnixNano())))
	for n := 0; w.running(); n++ {
		w.pause(r)
		if n%4 == 3 {
			d := w.e.path(fmt.Sprintf("c-%d", n))
			w.cachedDoing("metadata operations on " + d)
			if err := w.metadataOps(d); err != nil {
				w.errs.add("%v", err)
				continue
			}
		} else {
			id := 900 + r.IntN(cachedFiles)
			name := fmt.Sprintf("f%d.0", id)
			w.mu.Lock()
			want := w.files[name]
			w.mu.Unlock()
			w.cachedDoing("read of " + name)
			got, err := os.ReadFile(w.e.path(name))
			if err != nil || !bytes.Equal(got, want) {
				w.errs.add("read cached %s: %v (%d bytes, want %d)", name, err, len(got), len(want))
				continue
			}
		}
		w.mu.Lock()
		w.cached++
		w.cachedOp = ""
		w.mu.Unlock()
	}
}

// cachedDoing records the operation the cached worker starts.
func (w *workload) cachedDoing(op string) {
	w.mu.Lock()
	w.cachedOp, w.cachedOpSince = op, time.Now()
	w.mu.Unlock()
}

// cachedStuck says what the cached worker has been doing, and for how
// long, if it is in an operation.
func (w *workload) cachedStuck() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cachedOp == "" {
		return "between operations"
	}
	return fmt.Sprintf("in the %s for %s", w.cachedOp, time.Since(w.cachedOpSince).Round(time.Millisecond))
}

// metadataOps makes directory d under a temporary name, renames it into
// place, lists the root and stats d.
func (w *workload) metadataOps(d string) error {
	if err := os.Mkdir(d+".tmp", 0o755); err != nil {
		return fmt.Errorf("mkdir: %w", err)
	}
	if err := os.Rename(d+".tmp", d); err != nil {
		return fmt.Errorf("rename dir: %w", err)
	}
	if _, err := os.ReadDir(w.e.mnt); err != nil {
		return fmt.Errorf("readdir: %w", err)
	}
	if _, err := os.Stat(d); err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	w.mu.Lock()
	w.dirs[filepath.Base(d)] = true
	w.mu.Unlock()
	return nil
}

// stop asks the workers to finish their current operation and waits for
// them (an operation blocked on the store may take a while).
func (w *workload) stop(d time.Duration) {
	w.e.t.Helper()
	close(w.stopped)
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		w.e.t.Fatalf("the workload did not finish within %s of being stopped (an operation hangs)", d)
	}
}

func (w *workload) running() bool {
	select {
	case <-w.stopped:
		return false
	default:
		return true
	}
}

func (w *workload) pause(r *rand.Rand) {
	select {
	case <-w.stopped:
	case <-time.After(time.Duration(50+r.IntN(150)) * time.Millisecond):
	}
}

// fileWorker writes, overwrites, reads back, fsyncs and renames its own
// files and makes directories, through the mount.
func (w *workload) fileWorker(id int, fsyncs bool) {
	defer w.wg.Done()
	r := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	ver := uint64(0)
	for n := 0; w.running(); n++ {
		w.pause(r)
		k := r.IntN(6)
		fid := uint64(id*100 + k)
		name := fmt.Sprintf("f%d.0", fid)
		p := w.e.path(name)
		switch op := r.IntN(10); {
		case op < 4: // write a whole new version, sometimes through a rename
			ver++
			data := blocks(fid, 0, 1+r.IntN(48), ver)
			target := p
			if op == 0 {
				target = w.e.path(fmt.Sprintf("tmp-%d", id))
			}
			if err := os.WriteFile(target, data, 0o644); err != nil {
				w.errs.add("write %s: %v", name, err)
				continue
			}
			if op == 0 {
				if err := os.Rename(target, p); err != nil {
					w.errs.add("rename onto %s: %v", name, err)
					continue
				}
			}
			w.mu.Lock()
			w.files[name] = data
			w.ops++
			w.mu.Unlock()
		case op < 7: // read back and compare
			w.mu.Lock()
			want, ok := w.files[name]
			w.mu.Unlock()
			if !ok {
				continue
			}
			got, err := os.ReadFile(p)
			if err != nil {
				w.errs.add("read %s: %v", name, err)
				continue
			}
			if !bytes.Equal(got, want) {
				w.errs.add("read %s: %d bytes, not the %d last written (%v)", name, len(got), len(want), checkContent(fid, got))
				continue
			}
			w.mu.Lock()
			w.ops++
			w.mu.Unlock()
		case op < 9: // fsync
			if !fsyncs {
				continue
			}
			w.mu.Lock()
			_, ok := w.files[name]
			w.mu.Unlock()
			if !ok {
				continue
			}
			start := time.Now()
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err == nil {
				err = f.Sync()
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				w.errs.add("fsync %s: %v", name, err)
				continue
			}
			w.mu.Lock()
			w.fsyncs = append(w.fsyncs, fsyncRecord{start, time.Since(start)})
			w.ops++
			w.mu.Unlock()
		default: // metadata: a directory, listed and stat'ed
			if err := w.metadataOps(w.e.path(fmt.Sprintf("d%d-%d", id, n))); err != nil {
				w.errs.add("%v", err)
				continue
			}
			w.mu.Lock()
			w.ops++
			w.mu.Unlock()
		}
	}
}

// nbdWorker writes a pattern to one region, reads back another, and
// flushes, through qemu-io against the NBD export; a run that succeeded
// acknowledged its write.
func (w *workload) nbdWorker() {
	defer w.wg.Done()
	r := rand.New(rand.NewPCG(99, uint64(time.Now().UnixNano())))
	uri := "nbd://" + w.e.nbdAddr + "/" + nbdExport
	for n := 1; w.running(); n++ {
		w.pause(r)
		// The last region is the test's own (duringOutage).
		wr, rd := r.IntN(nbdRegions-1), r.IntN(nbdRegions-1)
		pat := byte(n%250 + 1)
		w.mu.Lock()
		rdPat := w.nbd[rd]
		w.mu.Unlock()
		if rd == wr {
			rdPat = pat
		}
		// No timeout: a FLUSH may wait for the store as long as it is away;
		// the test's own limits catch a hang.
		cmd := w.e.command(context.Background(), "qemu-io", "-f", "raw",
			"-c", fmt.Sprintf("write -P %d %d %d", pat, wr*nbdRegion, nbdWrite),
			"-c", fmt.Sprintf("read -P %d %d %d", rdPat, rd*nbdRegion, nbdWrite),
			"-c", "flush", uri)
		out, err := cmd.CombinedOutput()
		if err != nil || bytes.Contains(out, []byte("failed")) || bytes.Contains(out, []byte("rror")) ||
			bytes.Contains(out, []byte("Pattern verification")) {
			w.errs.add("qemu-io (write region %d, read region %d): %v\n%s", wr, rd, err, out)
			continue
		}
		w.mu.Lock()
		w.nbd[wr] = pat
		w.nbdOps++
		w.mu.Unlock()
	}
}

// verify compares the mount with the model: every file, directory and NBD
// region.
func (w *workload) verify(when string) {
	t := w.e.t
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	bad := 0
	for name, want := range w.files {
		got, err := os.ReadFile(w.e.path(name))
		if err != nil || !bytes.Equal(got, want) {
			bad++
			id, _ := fileID(name)
			t.Errorf("%s: %s: err %v, %d bytes, want the %d last written (%v)", when, name, err, len(got), len(want), checkContent(id, got))
		}
	}
	for d := range w.dirs {
		if fi, err := os.Stat(w.e.path(d)); err != nil || !fi.IsDir() {
			bad++
			t.Errorf("%s: directory %s: %v", when, d, err)
		}
	}
	img, err := os.ReadFile(w.e.path(".nbd/" + nbdExport))
	if err != nil || len(img) != nbdSize {
		t.Fatalf("%s: the NBD export's file: %v (%d bytes)", when, err, len(img))
	}
	for reg := range nbdRegions {
		want := bytes.Repeat([]byte{w.nbd[reg]}, nbdWrite)
		if got := img[reg*nbdRegion : reg*nbdRegion+nbdWrite]; !bytes.Equal(got, want) {
			bad++
			t.Errorf("%s: NBD region %d does not hold pattern %d (first byte %d)", when, reg, w.nbd[reg], got[0])
		}
	}
	t.Logf("%s: %d files (%d bytes), %d directories, %d NBD regions checked, %d wrong",
		when, len(w.files), w.bytes(), len(w.dirs), nbdRegions, bad)
}

func (w *workload) bytes() (n int) {
	for _, b := range w.files {
		n += len(b)
	}
	return n
}

// fsyncAll fsyncs every file of the model; each must succeed.
func (w *workload) fsyncAll() {
	w.e.t.Helper()
	w.mu.Lock()
	names := make([]string, 0, len(w.files))
	for n := range w.files {
		names = append(names, n)
	}
	w.mu.Unlock()
	for _, n := range names {
		fsyncFile(w.e.t, w.e.path(n))
	}
}

// statusSays runs `ebbfs status` and reports whether its output contains s.
func (e *env) statusSays(s string) (bool, string) {
	e.t.Helper()
	r := e.ebbfs("status")
	if r.code != 0 {
		e.t.Errorf("ebbfs status failed: %s", r)
	}
	return strings.Contains(r.stdout, s), r.stdout
}

// setLink takes the namespace's end of h's veth pair down or up: packets
// between the two hosts are dropped (taking this host's end down would
// remove its route, and they would go out by the default route instead).
func (h *netnsHost) setLink(t *testing.T, up bool) {
	t.Helper()
	state := "down"
	if up {
		state = "up"
	}
	ipCmd(t, "-n", h.name, "link", "set", "ebp"+strings.TrimPrefix(h.name, "ebbfs-e2e-"), state)
}

// nsexecPrefix is the command prefix that runs a program in h's network
// namespace only.
func (h *netnsHost) nsexecPrefix() []string {
	return []string{"nsenter", "--net=/run/netns/" + h.name}
}

// opCount is the number of operations the workload completed so far.
func (w *workload) opCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ops + w.nbdOps + w.cached
}

// cachedCount is the number of cached reads and metadata operations so far.
func (w *workload) cachedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cached
}
