package reclaim

import (
	"errors"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/lsm/schema"
)

func TestSpaceReport(t *testing.T) {
	v := newFakeEnv(t)
	liveIno := v.writeFile("live", 8)
	_, dead := v.deadSegment("dead")
	tomb := v.writeFile("tomb", 12)
	v.metaSet(schema.TombstoneKey(tomb), nil) // as an unlink of a large file leaves it
	v.mustCycle()
	v.setLastSweep(encodeLastSweep(t0.Add(-4 * time.Hour)))
	v.r.scheduleFirstSweep()
	sp, err := v.r.Space(v.ctx)
	if err != nil {
		t.Fatal(err)
	}
	objs := v.objects()
	var objBytes int64
	for _, s := range objs {
		objBytes += s
	}
	if sp.SegmentCount != len(objs) || sp.SegmentBytes != objBytes {
		t.Fatalf("segments %d/%d bytes, store has %d/%d", sp.SegmentCount, sp.SegmentBytes, len(objs), objBytes)
	}
	var wantLive int64
	for _, ino := range []uint64{liveIno, tomb} {
		for i := uint64(0); ; i++ {
			if _, ok, _ := v.host.MetaGet(schema.ExtentKey(ino, i)); !ok {
				break
			}
			wantLive += int64(v.pointer(ino, i).Length)
		}
	}
	dc, _ := v.counter(dead)
	if sp.DeadSegments != 1 || sp.DeadBytes != dc.size || sp.AwaitingSegments != 1 || sp.AwaitingBytes != dc.size {
		t.Fatalf("dead: %+v", sp)
	}
	if want := t0.Add(MinGrace); !sp.EarliestDeadline.Equal(want) {
		t.Fatalf("earliest deadline %v, want %v", sp.EarliestDeadline, want)
	}
	var tombBytes int64
	for i := uint64(0); i < 12; i++ {
		tombBytes += int64(v.pointer(tomb, i).Length)
	}
	if sp.TombstonesPending != 1 || sp.TombstoneBytes != tombBytes {
		t.Fatalf("tombstones %d / %d bytes, want 1 / %d", sp.TombstonesPending, sp.TombstoneBytes, tombBytes)
	}
	// live bytes include the 4 overwritten extents of "dead"'s file
	if sp.LiveBytes < wantLive {
		t.Fatalf("live %d < %d", sp.LiveBytes, wantLive)
	}
	if want := t0.Add(20 * time.Hour); !sp.NextSweep.Equal(want) || !sp.LastSweep.Equal(t0.Add(-4*time.Hour)) {
		t.Fatalf("sweep last %v next %v", sp.LastSweep, sp.NextSweep)
	}
	if sp.Pinned != nil || sp.CheckpointError != "" {
		t.Fatalf("pinned %v err %q", sp.Pinned, sp.CheckpointError)
	}
	v.cps.set(errors.New("nope"))
	sp, err = v.r.Space(v.ctx)
	if err != nil || sp.CheckpointError == "" {
		t.Fatalf("unreadable list: %+v %v", sp, err)
	}
}

func TestOptionsDefaultsAndValidate(t *testing.T) {
	var o Options
	o.EnsureDefaults()
	if o.MinDeadPercent != 10 || o.MaxConcurrentRepacks != 4 || o.FlushInterval != time.Second || o.Clock == nil || o.Logger == nil {
		t.Fatalf("defaults %+v", o)
	}
	if err := o.Validate(); err == nil {
		t.Fatal("options without host, store and keys validated")
	}
	v := newFakeEnv(t)
	good := v.r.opts
	for name, mod := range map[string]func(*Options){
		"dead percent 0":   func(o *Options) { o.MinDeadPercent = -1 },
		"dead percent 100": func(o *Options) { o.MinDeadPercent = 100 },
		"repacks 0":        func(o *Options) { o.MaxConcurrentRepacks = -1 },
		"repacks 65":       func(o *Options) { o.MaxConcurrentRepacks = 65 },
		"no host":          func(o *Options) { o.Host = nil },
		"no store":         func(o *Options) { o.Store = nil },
		"no keys":          func(o *Options) { o.Keys = nil },
	} {
		o := good
		mod(&o)
		if _, err := New(o); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	if _, err := New(good); err != nil {
		t.Fatal(err)
	}
}

func TestDefaultCheckpointListerReadsStore(t *testing.T) {
	v := newFakeEnv(t, func(o *Options) { o.Checkpoints = nil })
	v.mem.Put(v.ctx, "checkpoints/broken", []byte("not json"), objstoreNoCond)
	_, dead := v.deadSegment("a")
	if _, err := v.cycle(); err == nil {
		t.Fatal("a cycle with an unreadable checkpoint record succeeded")
	}
	if _, ok := v.deadline(dead); ok {
		t.Fatal("deadline recorded despite the unreadable record")
	}
	v.mem.Delete(v.ctx, "checkpoints/broken")
	st := v.mustCycle()
	if st.NewDeadlines != 1 || st.Requests.List != 1 {
		t.Fatalf("%+v; the default lister lists checkpoints/ once", st)
	}
}
