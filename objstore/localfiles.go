package objstore

import (
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"ebbfs.dev/ebbfs/internal/directio"
	"ebbfs.dev/ebbfs/internal/worker"
)

// openFiles keeps the files of recently read segment objects open, so that
// a random read of a frame costs one pread rather than an open, a stat, a
// fadvise, a pread and a close (the open and stat were a tenth of the
// writer's CPU on cold 4 KiB random reads). A GetRange or ReadSpan that
// the page cache does not hold goes past it, through the file's
// directio.File; a ReadRange (into the caller's buffer, which need not be
// aligned) through the page cache.
//
// Only small reads (at most localRandomRead bytes) of keys under
// openFilesPrefix use it. Those objects are immutable: written once,
// deleted whole. Their files are opened with kernel read-ahead off, which
// suits random reads; sequential readers ask for runs of frames, which are
// larger, and open their own file as before.
//
// A file is kept for openFilesTTL after it was opened, then closed by a
// sweeper (a worker started with the first kept file, stopped by close), so that an object another process deleted gives its space back
// within that time. This process's own Put or Delete of a key closes its
// file at once (after the last read in flight), so deleted space never
// waits on the cache here and a replaced object is never read through the
// old file.
type openFiles struct {
	mu       sync.Mutex
	m        map[string]*openFile
	sweeping bool           // the sweeper has files to sweep
	sweeper  *worker.Worker // nil until the first file is kept, and after close
	closed   bool
	// forgets counts forget calls: a file opened while one ran may be
	// the one it meant to close, and is used once but not kept.
	forgets uint64
}

type openFile struct {
	f      *os.File
	direct directio.File // f's file again, in O_DIRECT mode, for reads not in the page cache
	size   int64
	opened time.Time
	refs   int
	gone   bool // out of the map: closed by the last release
}

// openFilesMax bounds the files kept open (up to twice as many
// descriptors, with their directio.Files; Go raises the soft RLIMIT_NOFILE to
// the hard one, which is far above this on any current distribution). A
// 1 GiB file written at once spans about 80 segments: with 64 kept, a
// random read opened one for every sixth read, and a GetRange of a 4 KiB
// piece was slower on average than with 256 (bench/README.md).
const (
	openFilesPrefix = "segments/"
	openFilesMax    = 256
	openFilesTTL    = time.Second
)

// acquire returns key's open file with a reference taken, opening it with
// open when the cache has none that is fresh. A file opened while this
// process replaced or deleted any kept object (a forget ran) is returned
// for this read only, not kept: it may be the old object's.
func (c *openFiles) acquire(key string, open func() (*os.File, int64, error)) (*openFile, error) {
	c.mu.Lock()
	if e := c.m[key]; e != nil && time.Since(e.opened) < openFilesTTL {
		e.refs++
		c.mu.Unlock()
		return e, nil
	}
	forgets, closed := c.forgets, c.closed
	c.mu.Unlock()
	f, size, err := open()
	if err != nil {
		return nil, err
	}
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM)
	e := &openFile{f: f, size: size, opened: time.Now(), refs: 1}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.forgets != forgets || closed || c.closed {
		e.gone = true // used once, not kept
		return e, nil
	}
	if c.m == nil {
		c.m = make(map[string]*openFile)
	}
	if old := c.m[key]; old != nil {
		c.dropLocked(key, old)
	}
	if len(c.m) >= openFilesMax {
		var oldestKey string
		var oldest *openFile
		for k, o := range c.m {
			if oldest == nil || o.opened.Before(oldest.opened) {
				oldestKey, oldest = k, o
			}
		}
		c.dropLocked(oldestKey, oldest)
	}
	c.m[key] = e
	e.refs++ // the map's reference
	if !c.sweeping {
		c.sweeping = true
		if c.sweeper == nil {
			c.sweeper = worker.Start("objstore-local-sweep", nil, c.sweepLoop)
		}
		c.sweeper.Notify()
	}
	return e, nil
}

// release gives back a reference acquire took.
func (c *openFiles) release(e *openFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unrefLocked(e)
}

func (c *openFiles) unrefLocked(e *openFile) {
	e.refs--
	if e.refs == 0 {
		e.direct.Close()
		_ = e.f.Close()
	}
}

// dropLocked takes e out of the map; its file closes after its last read.
func (c *openFiles) dropLocked(key string, e *openFile) {
	if e.gone {
		return
	}
	delete(c.m, key)
	e.gone = true
	c.unrefLocked(e)
}

// forget closes key's file, if it is open here: the object was replaced or
// deleted.
func (c *openFiles) forget(key string) {
	if !strings.HasPrefix(key, openFilesPrefix) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgets++
	if e := c.m[key]; e != nil {
		c.dropLocked(key, e)
	}
}

// sweepLoop is the sweeper: woken by the first file kept, it sweeps
// openFilesTTL later, then every openFilesTTL/2 while any file is open,
// and sleeps again once none is.
func (c *openFiles) sweepLoop(w *worker.Worker) {
	for w.Wait(0) {
		wait := openFilesTTL
		for w.Wait(wait) && c.sweep() {
			wait = openFilesTTL / 2
		}
	}
}

// sweep closes the files older than openFilesTTL and reports whether any
// is left open.
func (c *openFiles) sweep() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		if time.Since(e.opened) >= openFilesTTL {
			c.dropLocked(k, e)
		}
	}
	if len(c.m) == 0 {
		c.sweeping = false
		return false
	}
	return true
}

// close stops the sweeper and closes every kept file (each after its
// last read in flight); later reads open their files for themselves.
func (c *openFiles) close() {
	c.mu.Lock()
	c.closed = true
	w := c.sweeper
	c.sweeper = nil
	for k, e := range c.m {
		c.dropLocked(k, e)
	}
	c.sweeping = false
	c.mu.Unlock()
	if w != nil {
		w.Close()
	}
}

// open returns how many files are open here (tests).
func (c *openFiles) open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
