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
}

// FsckReport is the outcome of a check.
type FsckReport struct {
	Inodes, Dirents, Extents, Segments int
	LiveBytes                          int64
	FramesVerified                     int
	Problems                           []string // inconsistencies: fsck fails
	Orphans                            []string // counter-less segment objects (reclaimable, not an error)
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

func check(ctx context.Context, db *lsm.DB, s objstore.Store, k *keys.Keys, o FsckOptions) (*FsckReport, error) {
	r := &FsckReport{}
	scan := func(prefix byte, f func(k, v []byte) error) error {
		lo, hi := schema.PrefixRange(prefix)
		return db.Scan(lo, hi, f)
	}
	inodes := map[uint64]*fsckInode{}
	if err := scan(schema.PInode, func(key, v []byte) error {
		ino, err := schema.ParseU64Key(key, schema.PInode)
		if err != nil {
			r.problem("malformed inode key %x", key)
			return nil
		}
		rec, err := schema.UnmarshalInode(v)
		if err != nil {
			r.problem("inode %d: malformed record", ino)
			return nil
		}
		inodes[ino] = &fsckInode{rec: fsckRec{Mode: rec.Mode, Nlink: rec.Nlink, Parent: rec.Parent, Shift: rec.Shift()}}
		return nil
	}); err != nil {
		return nil, err
	}
	r.Inodes = len(inodes)
	orphans := map[uint64]bool{}
	_ = scan(schema.POrphan, func(key, _ []byte) error {
		if ino, err := schema.ParseU64Key(key, schema.POrphan); err == nil {
			orphans[ino] = true
		}
		return nil
	})
	tombs := map[uint64]bool{}
	_ = scan(schema.PTombstone, func(key, _ []byte) error {
		if ino, err := schema.ParseU64Key(key, schema.PTombstone); err == nil {
			tombs[ino] = true
		}
		return nil
	})
	if root := inodes[RootIno]; root == nil {
		r.problem("root directory (inode 1) is missing")
	} else {
		root.seen = true
	}
	if err := scan(schema.PDirent, func(key, v []byte) error {
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
		p := inodes[parent]
		if p == nil || p.rec.Mode&ModeType != ModeDir {
			r.problem("dirent %q lives in %d, which is not a directory", name, parent)
		}
		c := inodes[d.Ino]
		if c == nil {
			r.problem("dirent %d/%q points at missing inode %d", parent, name, d.Ino)
			return nil
		}
		if c.rec.Mode&ModeType != d.Type {
			r.problem("dirent %d/%q type %o differs from inode %d type %o", parent, name, d.Type, d.Ino, c.rec.Mode&ModeType)
		}
		c.links++
		if d.Type == ModeDir {
			if p != nil {
				p.dirs++
			}
			if c.seen && d.Ino != RootIno {
				r.problem("directory %d has more than one name", d.Ino)
			}
			c.seen = true
			if c.rec.Parent != parent {
				r.problem("directory %d is named in %d but records parent %d", d.Ino, parent, c.rec.Parent)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	inos := make([]uint64, 0, len(inodes))
	for ino := range inodes {
		inos = append(inos, ino)
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	for _, ino := range inos {
		n := inodes[ino]
		if n.rec.Mode&ModeType == ModeDir {
			if n.rec.Nlink != 2+n.dirs {
				r.problem("directory %d has nlink %d, want %d", ino, n.rec.Nlink, 2+n.dirs)
			}
			if ino != RootIno && n.links != 1 {
				r.problem("directory %d is named %d times", ino, n.links)
			}
			// No cycles: the parent chain reaches the root. Directories
			// found to reach it end later walks (linear in the
			// directories, not in directories times depth).
			cur, ok := ino, false
			var chain []*fsckInode
			for steps := 0; steps <= len(inodes); steps++ {
				if cur == RootIno {
					ok = true
					break
				}
				p := inodes[cur]
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
				r.problem("directory %d does not reach the root through its parents (cycle or detached)", ino)
				continue
			}
			for _, p := range chain {
				p.rooted = true
			}
			continue
		}
		if n.rec.Nlink != n.links {
			r.problem("inode %d has nlink %d but %d names", ino, n.rec.Nlink, n.links)
		}
		if n.links == 0 && !orphans[ino] {
			r.problem("inode %d has no name and is not an orphan", ino)
		}
	}
	// Pointers against counters.
	live := map[uint64]int64{}
	type ref struct {
		id segment.FrameID
		p  segment.Pointer
	}
	refs := map[uint64][]ref{}
	if err := scan(schema.PExtent, func(key, v []byte) error {
		r.Extents++
		ino, idx, err := schema.ParseExtentKey(key)
		if err != nil {
			r.problem("malformed extent key %x", key)
			return nil
		}
		p, err := segment.UnmarshalPointer(v)
		if err != nil {
			r.problem("extent %d/%d: %v", ino, idx, err)
			return nil
		}
		if inodes[ino] == nil && !tombs[ino] {
			r.problem("extent %d/%d belongs to no inode and no tombstone", ino, idx)
		}
		if n := inodes[ino]; n != nil && !tombs[ino] && uint64(p.PlainLen) > uint64(1)<<n.rec.Shift {
			r.problem("extent %d/%d holds %d bytes, more than the file's extent size %d", ino, idx, p.PlainLen, uint64(1)<<n.rec.Shift)
		}
		live[p.Segment] += int64(p.Length)
		refs[p.Segment] = append(refs[p.Segment], ref{segment.FrameID{Ino: ino, Extent: idx, Gen: p.Gen}, p})
		return nil
	}); err != nil {
		return nil, err
	}
	counters := map[uint64][3]int64{}
	if err := scan(schema.PCounter, func(key, v []byte) error {
		seg, err := schema.ParseU64Key(key, schema.PCounter)
		if err != nil {
			r.problem("malformed counter key %x", key)
			return nil
		}
		l, t, sz, err := lsm.DecodeCounter(v)
		if err != nil {
			r.problem("counter of segment %016x: %v", seg, err)
			return nil
		}
		counters[seg] = [3]int64{l, t, sz}
		return nil
	}); err != nil {
		return nil, err
	}
	r.Segments = len(counters)
	for seg, c := range counters {
		r.LiveBytes += c[0]
		if c[0] != live[seg] {
			r.problem("segment %016x: counter says %d live bytes, pointers reference %d", seg, c[0], live[seg])
		}
		if c[0] < 0 || c[0] > c[1] {
			r.problem("segment %016x: live bytes %d outside [0, %d]", seg, c[0], c[1])
		}
	}
	for seg := range live {
		if _, ok := counters[seg]; !ok {
			r.problem("segment %016x is referenced by pointers but has no counter", seg)
		}
	}
	// Every referenced segment and frame exists.
	objs, err := objstore.ListAll(ctx, s, "segments/")
	if err != nil {
		return nil, fmt.Errorf("fsck: listing segments: %w", err)
	}
	sizes := map[uint64]int64{}
	for _, obj := range objs {
		seg, ok := segment.ParseKey(obj.Key)
		if !ok {
			continue
		}
		sizes[seg] = obj.Size
		if _, ok := counters[seg]; !ok {
			r.Orphans = append(r.Orphans, obj.Key)
		}
	}
	var rd *segread.Reader
	if o.VerifyData {
		rd, err = segread.NewReader(segread.ReaderOptions{Store: s, Keys: k, MemoryBytes: 16 << 20, Logger: o.Logger})
		if err != nil {
			return nil, err
		}
		defer rd.Close()
	}
	segs := make([]uint64, 0, len(refs))
	for seg := range refs {
		segs = append(segs, seg)
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i] < segs[j] })
	for _, seg := range segs {
		size, ok := sizes[seg]
		if !ok {
			r.problem("segment %s is referenced by %d pointers but missing from the store", segment.Key(seg), len(refs[seg]))
			continue
		}
		_, dir, err := segment.ReadDirectory(ctx, s, k, seg, size)
		if err != nil {
			r.problem("segment %s: directory unreadable: %v", segment.Key(seg), err)
			continue
		}
		frames := map[uint32]segment.DirEntry{}
		for _, d := range dir {
			frames[d.Offset] = d
		}
		for _, x := range refs[seg] {
			d, ok := frames[x.p.Offset]
			if !ok || d.Length != x.p.Length || d.Ino != x.id.Ino || d.Extent != x.id.Extent || d.Gen != x.id.Gen {
				r.problem("extent %d/%d points at %s offset %d, which the directory does not list for it", x.id.Ino, x.id.Extent, segment.Key(seg), x.p.Offset)
				continue
			}
			if rd != nil {
				if _, err := readFrame(ctx, rd, x.id, x.p); err != nil {
					r.problem("extent %d/%d: frame in %s does not authenticate: %v", x.id.Ino, x.id.Extent, segment.Key(seg), err)
					continue
				}
				r.FramesVerified++
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	sort.Strings(r.Orphans)
	return r, nil
}
