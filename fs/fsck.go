package fs

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"

	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
	"ebbfs.dev/ebbfs/segread"
)

// FsckOptions configure a consistency check.
type FsckOptions struct {
	VerifyData bool   // also authenticate every live frame
	TempDir    string // where the metadata is rebuilt (default: os.TempDir)
	Logger     *slog.Logger
	// Progress, if set, is called as the check goes: at the start of each
	// metadata scan (done and total 0), then after each segment checked
	// with the segments and their bytes done so far and in all.
	Progress func(FsckProgress)
}

// FsckProgress is how far a check has gone.
type FsckProgress struct {
	Phase                 string // "inodes", ..., "segments"
	Done, Total           int64  // segments
	DoneBytes, TotalBytes int64  // their object bytes
}

func (o *FsckOptions) progress(p FsckProgress) {
	if o.Progress != nil {
		o.Progress(p)
	}
}

// FsckReport is the outcome of a check.
type FsckReport struct {
	Inodes, Dirents, Extents, Segments int
	LiveBytes                          int64
	FramesVerified                     int
	Problems                           []string // inconsistencies: fsck fails
	Orphans                            []string // counter-less segment objects (reclaimable, not an error)
	// Damaged are the extents whose frames do not authenticate
	// (VerifyData), with the paths of their files; each is a problem too.
	Damaged []DamagedExtent
}

// DamagedExtent is an extent whose frame in the store does not
// authenticate: the file's bytes [Offset, Offset+Length) are lost.
type DamagedExtent struct {
	Ino    uint64
	Extent uint64
	Paths  []string // every name of the file; none: unlinked while open
	Range  ByteRange
	Object string // the segment object
	At     int64  // the frame's offset in it
	Err    string
}

// DamagedFiles lists the damaged files, one name a line's worth: every
// path of each (a hard-linked file has several), or "inode N" for one
// without a name; sorted, each once.
func (r *FsckReport) DamagedFiles() []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range r.Damaged {
		names := d.Paths
		if len(names) == 0 {
			names = []string{fmt.Sprintf("inode %d (no name: unlinked while open)", d.Ino)}
		}
		for _, n := range names {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out
}

// OK reports whether no inconsistency was found.
func (r *FsckReport) OK() bool { return len(r.Problems) == 0 }

func (r *FsckReport) problem(format string, args ...any) {
	if len(r.Problems) < 10000 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

// String renders the report for people.
func (r *FsckReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "inodes %d, dirents %d, extents %d, segments %d, live bytes %d", r.Inodes, r.Dirents, r.Extents, r.Segments, r.LiveBytes)
	if r.FramesVerified > 0 {
		fmt.Fprintf(&b, ", frames verified %d", r.FramesVerified)
	}
	b.WriteString("\n")
	for _, o := range r.Orphans {
		fmt.Fprintf(&b, "note: segment object without a counter (the orphan sweep reclaims it): %s\n", o)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "PROBLEM: %s\n", p)
	}
	if r.OK() {
		b.WriteString("filesystem is consistent\n")
	} else {
		fmt.Fprintf(&b, "%d problem(s) found\n", len(r.Problems))
	}
	return b.String()
}

// Fsck checks the durable state of the filesystem in s: it rebuilds the
// metadata from the store alone (read-only, no lease) and checks the
// namespace, the segment counters against the pointers, and that every
// pointer's segment and frame exist.
func Fsck(ctx context.Context, s objstore.Store, k *keys.Keys, o FsckOptions) (*FsckReport, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	dir, err := os.MkdirTemp(o.TempDir, "ebbfs-fsck-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	db, err := lsm.Open(ctx, lsm.Options{Dir: dir, Store: s, Keys: k, Logger: o.Logger, ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("fsck: recovering metadata from the store: %w", err)
	}
	defer db.Close()
	return check(ctx, db, s, k, o)
}

// Check runs the same checks against this engine's current local metadata.
func (e *Engine) Check(ctx context.Context, verifyData bool) (*FsckReport, error) {
	return check(ctx, e.db, e.opts.Store, e.opts.Keys, FsckOptions{VerifyData: verifyData, Logger: e.log})
}

// fsckInode is what the check keeps of each inode: a million of them take
// 32 bytes each, not the whole record's 128.
type fsckInode struct {
	rec    fsckRec
	links  uint32 // dirents naming it
	dirs   uint32 // subdirectories (for directories)
	seen   bool   // reached from a parent dirent
	rooted bool   // a directory whose parent chain is known to reach the root
}

// fsckRec is the part of an inode record the checks read.
type fsckRec struct {
	Mode, Nlink uint32
	Parent      uint64
	Shift       uint8 // log2 of the extent size
}

// metaScanner is the one metadata read the check makes (*lsm.DB
// provides it; tests inject failing scans).
type metaScanner interface {
	Scan(lower, upper []byte, f func(k, v []byte) error) error
}

// fsckRef is one pointer into a segment, with the frame it names.
type fsckRef struct {
	id segment.FrameID
	p  segment.Pointer
}

// checker holds the state of one check as it goes through the metadata.
type checker struct {
	db       metaScanner
	r        *FsckReport
	inodes   map[uint64]*fsckInode
	orphans  map[uint64]bool
	tombs    map[uint64]bool
	live     map[uint64]int64     // frame bytes the pointers reference, by segment
	refs     map[uint64][]fsckRef // the pointers, by segment
	counters map[uint64][3]int64  // live, total, size, by segment
	patches  bool                 // the descriptor format allows patched values (keys.Keys.Patches)
}

func check(ctx context.Context, db metaScanner, s objstore.Store, k *keys.Keys, o FsckOptions) (*FsckReport, error) {
	c := &checker{db: db, r: &FsckReport{}, patches: k.Patches}
	steps := []struct {
		what string // what a step scans; "" for a check that scans nothing
		f    func() error
	}{
		{"inodes", c.scanInodes},
		{"orphans", func() error { return c.scanMarks(schema.POrphan, &c.orphans) }},
		{"tombstones", func() error { return c.scanMarks(schema.PTombstone, &c.tombs) }},
		{"dirents", c.scanDirents},
		{"", func() error { c.checkTree(); return nil }},
		{"extents", c.scanExtents},
		{"counters", c.scanCounters},
	}
	// A failed scan fails the check: a report without the scan's records
	// would call the filesystem consistent without having looked.
	for _, st := range steps {
		if st.what != "" {
			o.progress(FsckProgress{Phase: st.what})
		}
		if err := st.f(); err != nil {
			return nil, fmt.Errorf("fsck: scanning %s: %w", st.what, err)
		}
	}
	c.checkCounters()
	if err := c.checkSegments(ctx, s, k, o); err != nil {
		return nil, err
	}
	if err := c.nameDamage(); err != nil {
		return nil, fmt.Errorf("fsck: naming the damaged files: %w", err)
	}
	sort.Strings(c.r.Orphans)
	return c.r, nil
}

func (c *checker) scan(prefix byte, f func(k, v []byte) error) error {
	lo, hi := schema.PrefixRange(prefix)
	return c.db.Scan(lo, hi, f)
}

// scanInodes loads every inode record.
func (c *checker) scanInodes() error {
	c.inodes = map[uint64]*fsckInode{}
	err := c.scan(schema.PInode, func(key, v []byte) error {
		ino, err := schema.ParseU64Key(key, schema.PInode)
		if err != nil {
			c.r.problem("malformed inode key %x", key)
			return nil
		}
		rec, err := schema.UnmarshalInode(v)
		if err != nil {
			c.r.problem("inode %d: malformed record", ino)
			return nil
		}
		c.inodes[ino] = &fsckInode{rec: fsckRec{Mode: rec.Mode, Nlink: rec.Nlink, Parent: rec.Parent, Shift: rec.Shift()}}
		return nil
	})
	c.r.Inodes = len(c.inodes)
	return err
}

// scanMarks collects the inode numbers of the keys under prefix (orphan
// and tombstone marks).
func (c *checker) scanMarks(prefix byte, into *map[uint64]bool) error {
	m := map[uint64]bool{}
	*into = m
	return c.scan(prefix, func(key, _ []byte) error {
		if ino, err := schema.ParseU64Key(key, prefix); err == nil {
			m[ino] = true
		}
		return nil
	})
}

// scanDirents checks each dirent against the inodes it joins and counts
// the names of each inode.
func (c *checker) scanDirents() error {
	r := c.r
	if root := c.inodes[RootIno]; root == nil {
		r.problem("root directory (inode 1) is missing")
	} else {
		root.seen = true
	}
	return c.scan(schema.PDirent, func(key, v []byte) error {
		r.Dirents++
		parent, name, err := schema.ParseDirentKey(key)
		if err != nil {
			r.problem("malformed dirent key %x", key)
			return nil
		}
		d, err := schema.UnmarshalDirent(v)
		if err != nil {
			r.problem("dirent %d/%q: malformed value", parent, name)
			return nil
		}
		p := c.inodes[parent]
		if p == nil || p.rec.Mode&ModeType != ModeDir {
			r.problem("dirent %q lives in %d, which is not a directory", name, parent)
		}
		n := c.inodes[d.Ino]
		if n == nil {
			r.problem("dirent %d/%q points at missing inode %d", parent, name, d.Ino)
			return nil
		}
		if n.rec.Mode&ModeType != d.Type {
			r.problem("dirent %d/%q type %o differs from inode %d type %o", parent, name, d.Type, d.Ino, n.rec.Mode&ModeType)
		}
		n.links++
		if d.Type == ModeDir {
			if p != nil {
				p.dirs++
			}
			if n.seen && d.Ino != RootIno {
				r.problem("directory %d has more than one name", d.Ino)
			}
			n.seen = true
			if n.rec.Parent != parent {
				r.problem("directory %d is named in %d but records parent %d", d.Ino, parent, n.rec.Parent)
			}
		}
		return nil
	})
}

// checkTree checks link counts, and that every directory reaches the root.
func (c *checker) checkTree() {
	inos := make([]uint64, 0, len(c.inodes))
	for ino := range c.inodes {
		inos = append(inos, ino)
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	for _, ino := range inos {
		n := c.inodes[ino]
		if n.rec.Mode&ModeType == ModeDir {
			c.checkDir(ino, n)
			continue
		}
		if n.rec.Nlink != n.links {
			c.r.problem("inode %d has nlink %d but %d names", ino, n.rec.Nlink, n.links)
		}
		if n.links == 0 && !c.orphans[ino] {
			c.r.problem("inode %d has no name and is not an orphan", ino)
		}
	}
}

// checkDir checks one directory's link count and names, and that its
// parent chain reaches the root (no cycles). Directories found to reach
// it end later walks (linear in the directories, not in directories times
// depth).
func (c *checker) checkDir(ino uint64, n *fsckInode) {
	if n.rec.Nlink != 2+n.dirs {
		c.r.problem("directory %d has nlink %d, want %d", ino, n.rec.Nlink, 2+n.dirs)
	}
	if ino != RootIno && n.links != 1 {
		c.r.problem("directory %d is named %d times", ino, n.links)
	}
	cur, ok := ino, false
	var chain []*fsckInode
	for steps := 0; steps <= len(c.inodes); steps++ {
		if cur == RootIno {
			ok = true
			break
		}
		p := c.inodes[cur]
		if p == nil {
			break
		}
		if p.rooted {
			ok = true
			break
		}
		chain = append(chain, p)
		cur = p.rec.Parent
	}
	if !ok {
		c.r.problem("directory %d does not reach the root through its parents (cycle or detached)", ino)
		return
	}
	for _, p := range chain {
		p.rooted = true
	}
}

// scanExtents reads every extent value, adding the bytes of each of its
// frames to the frame's segment's sum.
func (c *checker) scanExtents() error {
	r := c.r
	c.live, c.refs = map[uint64]int64{}, map[uint64][]fsckRef{}
	return c.scan(schema.PExtent, func(key, v []byte) error {
		r.Extents++
		ino, idx, err := schema.ParseExtentKey(key)
		if err != nil {
			r.problem("malformed extent key %x", key)
			return nil
		}
		x, err := segment.UnmarshalExtent(v)
		if err != nil {
			r.problem("extent %d/%d: %v", ino, idx, err)
			return nil
		}
		if c.inodes[ino] == nil && !c.tombs[ino] {
			r.problem("extent %d/%d belongs to no inode and no tombstone", ino, idx)
		}
		if x.Patched() && !c.patches {
			r.problem("extent %d/%d holds %d patches in a filesystem whose descriptor format predates patches", ino, idx, len(x.Patches))
		}
		if n := c.inodes[ino]; n != nil && !c.tombs[ino] && uint64(x.End()) > uint64(1)<<n.rec.Shift {
			r.problem("extent %d/%d holds %d bytes, more than the file's extent size %d", ino, idx, x.End(), uint64(1)<<n.rec.Shift)
		}
		// Every frame of the value, base and patches, is live in its
		// segment and must be listed and authenticate there.
		for p := range x.Frames() {
			c.live[p.Segment] += int64(p.Length)
			c.refs[p.Segment] = append(c.refs[p.Segment], fsckRef{segment.FrameID{Ino: ino, Extent: idx, Gen: p.Gen}, p})
		}
		return nil
	})
}

// scanCounters reads every segment counter.
func (c *checker) scanCounters() error {
	c.counters = map[uint64][3]int64{}
	return c.scan(schema.PCounter, func(key, v []byte) error {
		seg, err := schema.ParseU64Key(key, schema.PCounter)
		if err != nil {
			c.r.problem("malformed counter key %x", key)
			return nil
		}
		l, t, sz, err := lsm.DecodeCounter(v)
		if err != nil {
			c.r.problem("counter of segment %016x: %v", seg, err)
			return nil
		}
		c.counters[seg] = [3]int64{l, t, sz}
		return nil
	})
}

// checkCounters compares each counter with the pointers into its segment.
func (c *checker) checkCounters() {
	r := c.r
	r.Segments = len(c.counters)
	for seg, n := range c.counters {
		r.LiveBytes += n[0]
		if n[0] != c.live[seg] {
			r.problem("segment %016x: counter says %d live bytes, pointers reference %d", seg, n[0], c.live[seg])
		}
		if n[0] < 0 || n[0] > n[1] {
			r.problem("segment %016x: live bytes %d outside [0, %d]", seg, n[0], n[1])
		}
	}
	for seg := range c.live {
		if _, ok := c.counters[seg]; !ok {
			r.problem("segment %016x is referenced by pointers but has no counter", seg)
		}
	}
}

// checkSegments checks that every referenced segment and frame exists
// (and, with VerifyData, authenticates), and notes counter-less objects.
func (c *checker) checkSegments(ctx context.Context, s objstore.Store, k *keys.Keys, o FsckOptions) error {
	objs, err := objstore.ListAll(ctx, s, "segments/")
	if err != nil {
		return fmt.Errorf("fsck: listing segments: %w", err)
	}
	sizes := map[uint64]int64{}
	for _, obj := range objs {
		seg, ok := segment.ParseKey(obj.Key)
		if !ok {
			continue
		}
		sizes[seg] = obj.Size
		if _, ok := c.counters[seg]; !ok {
			c.r.Orphans = append(c.r.Orphans, obj.Key)
		}
	}
	var rd *segread.Reader
	if o.VerifyData {
		rd, err = segread.NewReader(segread.ReaderOptions{Store: s, Keys: k, MemoryBytes: 16 << 20, Logger: o.Logger})
		if err != nil {
			return err
		}
		defer rd.Close()
	}
	segs := make([]uint64, 0, len(c.refs))
	for seg := range c.refs {
		segs = append(segs, seg)
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i] < segs[j] })
	pr := FsckProgress{Phase: "segments", Total: int64(len(segs))}
	for _, seg := range segs {
		pr.TotalBytes += sizes[seg]
	}
	for _, seg := range segs {
		pr.Done++
		size, ok := sizes[seg]
		if !ok {
			c.r.problem("segment %s is referenced by %d pointers but missing from the store", segment.Key(seg), len(c.refs[seg]))
			continue
		}
		c.checkSegment(ctx, s, k, rd, seg, size)
		pr.DoneBytes += size
		o.progress(pr)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// checkSegment checks the pointers into one segment against its directory
// and, given a reader, authenticates their frames.
func (c *checker) checkSegment(ctx context.Context, s objstore.Store, k *keys.Keys, rd *segread.Reader, seg uint64, size int64) {
	r := c.r
	_, dir, err := segment.ReadDirectory(ctx, s, k, seg, size)
	if err != nil {
		r.problem("segment %s: directory unreadable: %v", segment.Key(seg), err)
		return
	}
	frames := map[uint32]segment.DirEntry{}
	for _, d := range dir {
		frames[d.Offset] = d
	}
	listed := make([]fsckRef, 0, len(c.refs[seg]))
	for _, x := range c.refs[seg] {
		d, ok := frames[x.p.Offset]
		if !ok || d.Length != x.p.Length || d.Ino != x.id.Ino || d.Extent != x.id.Extent || d.Gen != x.id.Gen {
			r.problem("extent %d/%d points at %s offset %d, which the directory does not list for it", x.id.Ino, x.id.Extent, segment.Key(seg), x.p.Offset)
			continue
		}
		listed = append(listed, x)
	}
	if rd == nil {
		return
	}
	bad, errs := verifyFrames(ctx, rd, listed)
	for i, x := range bad {
		c.damaged(x, errs[i])
	}
	r.FramesVerified += len(listed) - len(bad)
}

// damaged notes an extent whose frame does not authenticate; nameDamage
// reports it once the file's paths are known.
func (c *checker) damaged(x fsckRef, err error) {
	shift := uint8(schema.MaxExtentShift)
	if n := c.inodes[x.id.Ino]; n != nil {
		shift = n.rec.Shift
	}
	c.r.Damaged = append(c.r.Damaged, DamagedExtent{Ino: x.id.Ino, Extent: x.id.Extent,
		Range:  ByteRange{Offset: int64(x.id.Extent << shift), Length: int64(x.p.PlainLen)},
		Object: segment.Key(x.p.Segment), At: int64(x.p.Offset), Err: err.Error()})
}

// nameDamage finds the paths of the damaged files (one more scan of the
// directory entries, only when there is damage) and reports each damaged
// extent as a problem naming them.
func (c *checker) nameDamage() error {
	if len(c.r.Damaged) == 0 {
		return nil
	}
	inos := map[uint64]bool{}
	for _, d := range c.r.Damaged {
		inos[d.Ino] = true
	}
	paths, err := inodePaths(c.db.Scan, inos)
	if err != nil {
		return err
	}
	for i := range c.r.Damaged {
		d := &c.r.Damaged[i]
		d.Paths = paths[d.Ino]
		name := "no name (unlinked while open)"
		if len(d.Paths) > 0 {
			name = strings.Join(d.Paths, ", ")
		}
		c.r.problem("damaged: %s bytes %s (inode %d, extent %d): frame in %s at offset %d does not authenticate: %s",
			name, d.Range, d.Ino, d.Extent, d.Object, d.At, d.Err)
	}
	return nil
}
