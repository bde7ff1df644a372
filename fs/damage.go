package fs

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"ebbfs.dev/ebbfs/segment"
)

// Damage: a read that finds a frame which does not authenticate fails
// with EIO (CONVENTIONS: corruption is reported, not hidden). The engine
// names what was lost: the file's paths (every name of a hard-linked
// inode) and the byte range of the extent, in the error the FUSE layer
// logs, in one log line per damaged extent, and in Damage, which status,
// the monitor and the web page show as an alarm until the process ends.

// ByteRange is a range of a file's bytes.
type ByteRange struct {
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
}

func (r ByteRange) String() string { return fmt.Sprintf("[%d,%d)", r.Offset, r.Offset+r.Length) }

// DamagedFile is a file a read found damaged: its extents' frames in the
// store do not authenticate.
type DamagedFile struct {
	Ino uint64 `json:"ino"`
	// Paths are the file's names when the damage was found (none: it
	// was unlinked while open).
	Paths []string `json:"paths,omitempty"`
	// Ranges are the damaged byte ranges found so far (at most
	// maxDamageRanges), in order.
	Ranges []ByteRange `json:"ranges"`
	// Object is the store object of the first damaged frame found.
	Object      string    `json:"object,omitempty"`
	FailedReads uint64    `json:"failed_reads"`
	FirstSeen   time.Time `json:"first_seen"`
	LastSeen    time.Time `json:"last_seen"`
}

// Name is how a report names the file: its paths, or its inode.
func (d *DamagedFile) Name() string {
	if len(d.Paths) == 0 {
		return fmt.Sprintf("inode %d (no name: unlinked while open)", d.Ino)
	}
	return strings.Join(d.Paths, ", ")
}

// Bounds of what the engine remembers of damage (the log has the rest).
const (
	maxDamagedFiles = 64
	maxDamageRanges = 16
)

// damageLog is what reads found damaged since the process started.
type damageLog struct {
	mu    sync.Mutex
	files map[uint64]*DamagedFile
}

// DamageError is the error of a read of damaged data: what the read
// failed on, with the file's paths and byte range.
type DamageError struct {
	Paths []string
	Ino   uint64
	Range ByteRange
	Err   error // wraps segment.ErrCorrupt
}

func (e *DamageError) Error() string {
	name := fmt.Sprintf("inode %d", e.Ino)
	if len(e.Paths) > 0 {
		name = strings.Join(e.Paths, ", ") + fmt.Sprintf(" (inode %d)", e.Ino)
	}
	return fmt.Sprintf("damaged data in %s, bytes %s: %v", name, e.Range, e.Err)
}

func (e *DamageError) Unwrap() error { return e.Err }

// Damage returns the files reads found damaged since the process
// started, oldest first.
func (e *Engine) Damage() []DamagedFile {
	e.damage.mu.Lock()
	defer e.damage.mu.Unlock()
	out := make([]DamagedFile, 0, len(e.damage.files))
	for _, d := range e.damage.files {
		c := *d
		c.Paths = append([]string(nil), d.Paths...)
		c.Ranges = append([]ByteRange(nil), d.Ranges...)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].FirstSeen.Before(out[j].FirstSeen) })
	return out
}

// readFailed returns err, a read of n bytes at off of ino failed with,
// naming the file and the damaged range if it is corruption (and
// recording and logging that once per range).
func (e *Engine) readFailed(ino uint64, off int64, n int, err error) error {
	var ce *segment.CorruptError
	if err == nil || !errors.Is(err, segment.ErrCorrupt) || !errors.As(err, &ce) {
		return err
	}
	rng := e.damagedRange(ino, off, n, ce)
	paths, known, full := e.damagePaths(ino)
	if !known && !full { // past maxDamagedFiles the log line names the inode only
		ps, perr := inodePaths(e.scan, map[uint64]bool{ino: true})
		if perr != nil {
			e.log.Warn("damaged file: its paths could not be listed", "ino", ino, "err", perr)
		}
		paths = ps[ino]
	}
	now := e.clk.Now()
	e.damage.mu.Lock()
	d := e.damage.files[ino]
	if d == nil && len(e.damage.files) < maxDamagedFiles {
		if e.damage.files == nil {
			e.damage.files = map[uint64]*DamagedFile{}
		}
		d = &DamagedFile{Ino: ino, Paths: paths, Object: ce.Key, FirstSeen: now}
		e.damage.files[ino] = d
	}
	fresh := d != nil // past maxDamagedFiles, the EIO line alone says it
	if d != nil {
		d.FailedReads++
		d.LastSeen = now
		for _, r := range d.Ranges {
			fresh = fresh && r != rng
		}
		if fresh && len(d.Ranges) < maxDamageRanges {
			d.Ranges = append(d.Ranges, rng)
		}
	}
	e.damage.mu.Unlock()
	if fresh {
		e.log.Error("damaged file: a frame in the store does not authenticate; reads of this range fail with EIO",
			"path", strings.Join(paths, ", "), "ino", ino, "bytes", rng.String(), "object", ce.Key, "object_offset", ce.Offset)
	}
	return &DamageError{Paths: paths, Ino: ino, Range: rng, Err: err}
}

// damagePaths returns the paths recorded for ino, if it is known damaged,
// and whether the record of damaged files is full.
func (e *Engine) damagePaths(ino uint64) (paths []string, known, full bool) {
	e.damage.mu.Lock()
	defer e.damage.mu.Unlock()
	if d := e.damage.files[ino]; d != nil {
		return d.Paths, true, false
	}
	return nil, false, len(e.damage.files) >= maxDamagedFiles
}

// damagedRange finds the extent of ino, among those a read of n bytes at
// off covers, whose frame ce names, and returns its byte range; failing
// that, the range read.
func (e *Engine) damagedRange(ino uint64, off int64, n int, ce *segment.CorruptError) ByteRange {
	read := ByteRange{Offset: off, Length: int64(n)}
	rec, err := e.getRecord(ino)
	if err != nil || n <= 0 || off < 0 {
		return read
	}
	shift := rec.Shift()
	last := uint64(off+int64(n)-1) >> shift
	for idx := uint64(off) >> shift; idx <= last; idx++ {
		x, ok, err := e.visibleExtent(ino, idx)
		if err != nil {
			return read
		}
		if !ok {
			continue
		}
		names := func(p segment.Pointer) bool {
			return segment.Key(p.Segment) == ce.Key && (ce.Offset < 0 || int64(p.Offset) == ce.Offset)
		}
		start := int64(idx << shift)
		// The newest piece the frame holds: a patch's bytes, or the base's.
		for i := len(x.Patches) - 1; i >= 0; i-- {
			if pt := x.Patches[i]; pt.HasFrame() && names(pt.Ptr) {
				return ByteRange{Offset: start + int64(pt.At), Length: int64(pt.End - pt.At)}
			}
		}
		if x.HasBase() && names(x.Base) {
			return ByteRange{Offset: start, Length: int64(x.Base.PlainLen)}
		}
	}
	return read
}
