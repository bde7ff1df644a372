package fs

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"ebbfs.dev/ebbfs/lsm"
)

// A standby serves reads, refuses writes until promoted, then writes in
// place with every acknowledged write of the previous writer; the
// previous writer, fenced, acknowledges nothing more.
func TestStandbyPromoteFencesWriter(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	writeWhole(t, f.e, "acked", []byte("fsynced before the takeover"))
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := Open(ctx, Options{Store: f.store, Keys: f.keys, CacheDir: t.TempDir(), ReadOnly: true, Standby: true, StandbyID: "sb"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	if sb.Role() != "standby" || !sb.Promotable() {
		t.Fatalf("role %q, promotable %v", sb.Role(), sb.Promotable())
	}
	if _, err := sb.Create(ctx, RootIno, "early", 0o644, 0, 0); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("create on a standby: %v, want ErrReadOnly", err)
	}
	// Written and fsynced after the standby opened: it must catch up.
	writeWhole(t, f.e, "late", []byte("also acknowledged"))
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	cur, etag, _, err := lsm.ReadLeaseTag(ctx, f.store)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Promote(ctx, cur, etag); err != nil {
		t.Fatalf("promote: %v", err)
	}
	if sb.Role() != "writer" || sb.ReadOnly() {
		t.Fatalf("after promotion: role %q, read-only %v", sb.Role(), sb.ReadOnly())
	}
	for name, want := range map[string]string{"acked": "fsynced before the takeover", "late": "also acknowledged"} {
		if got, err := readWhole(t, sb, name); err != nil || !bytes.Equal(got, []byte(want)) {
			t.Fatalf("%s on the promoted standby = %q, %v", name, got, err)
		}
	}
	writeWhole(t, sb, "new", []byte("the new writer's"))
	if err := sb.Barrier(ctx); err != nil {
		t.Fatalf("barrier on the promoted standby: %v", err)
	}
	// The old writer: its next barrier fails and it stops taking writes.
	writeWhole(t, f.e, "zombie", []byte("never acknowledged"))
	if err := f.e.Barrier(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("the old writer's barrier: %v, want ErrFenced", err)
	}
	if f.e.Role() != "fenced" {
		t.Fatalf("old writer's role %q", f.e.Role())
	}
	if _, err := f.e.Create(ctx, RootIno, "after", 0o644, 0, 0); !errors.Is(err, ErrFenced) {
		t.Fatalf("create on the fenced writer: %v, want ErrFenced", err)
	}
	if _, err := readWhole(t, sb, "zombie"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("the zombie's write on the new writer: %v, want ErrNotExist", err)
	}

	// Rejoin: the fenced writer becomes a standby following the new
	// writer; what it held that no journal took is gone.
	if err := f.e.Rejoin(ctx); err != nil {
		t.Fatalf("rejoin: %v", err)
	}
	if f.e.Role() != "standby" || !f.e.Promotable() || f.e.DB().Fenced() != nil {
		t.Fatalf("after the rejoin: role %q, promotable %v, fenced %v", f.e.Role(), f.e.Promotable(), f.e.DB().Fenced())
	}
	if _, err := f.e.Follow(ctx); err != nil {
		t.Fatalf("follow after the rejoin: %v", err)
	}
	for name, want := range map[string]string{"acked": "fsynced before the takeover", "new": "the new writer's"} {
		if got, err := readWhole(t, f.e, name); err != nil || !bytes.Equal(got, []byte(want)) {
			t.Fatalf("%s on the rejoined standby = %q, %v", name, got, err)
		}
	}
	if _, err := readWhole(t, f.e, "zombie"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("the zombie's own unacknowledged file after the rejoin: %v, want ErrNotExist", err)
	}
	if _, err := f.e.Create(ctx, RootIno, "refused", 0o644, 0, 0); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("create on the rejoined standby: %v, want ErrReadOnly", err)
	}
	writeWhole(t, sb, "followed", []byte("written after the rejoin"))
	if err := sb.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Follow(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := readWhole(t, f.e, "followed"); err != nil || string(got) != "written after the rejoin" {
		t.Fatalf("followed on the rejoined standby = %q, %v", got, err)
	}
}

// A planned switch-over: the writer makes everything durable, hands the
// lease to the standby and follows it; nothing written before is lost.
func TestStandbyHandover(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	sb, err := Open(ctx, Options{Store: f.store, Keys: f.keys, CacheDir: t.TempDir(), ReadOnly: true, Standby: true, StandbyID: "sb"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	writeWhole(t, f.e, "unsynced", []byte("written, not fsynced, before the handover"))
	if _, _, err := lsm.RequestHandover(ctx, f.store, "sb"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Demote(ctx, "sb"); err != nil {
		t.Fatalf("demote: %v", err)
	}
	if f.e.Role() != "standby" {
		t.Fatalf("the old writer's role %q after the handover", f.e.Role())
	}
	if _, err := f.e.Create(ctx, RootIno, "refused", 0o644, 0, 0); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("create on the old writer after the handover: %v", err)
	}
	cur, etag, _, err := lsm.ReadLeaseTag(ctx, f.store)
	if err != nil || !cur.Released || cur.HandoverTo != "sb" {
		t.Fatalf("lease after the handover %+v, %v", cur, err)
	}
	if err := sb.Promote(ctx, cur, etag); err != nil {
		t.Fatalf("promote: %v", err)
	}
	if got, err := readWhole(t, sb, "unsynced"); err != nil || string(got) != "written, not fsynced, before the handover" {
		t.Fatalf("on the new writer: %q, %v", got, err)
	}
	writeWhole(t, sb, "new", []byte("the new writer's"))
	if err := sb.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Follow(ctx); err != nil {
		t.Fatalf("the old writer following the new one: %v", err)
	}
	if got, err := readWhole(t, f.e, "new"); err != nil || string(got) != "the new writer's" {
		t.Fatalf("the old writer reads %q, %v", got, err)
	}
}
