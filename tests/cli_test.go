package tests

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestChangePassword: the new password unlocks, the old one no longer does.
func TestChangePassword(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	p := e.mount()
	writeFile(t, e.path("f"), []byte("survives the password change"))
	p.stop()

	newPW := filepath.Join(e.dir, "new-password")
	if err := os.WriteFile(newPW, []byte("a brand new password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(e.dir, "short")
	if err := os.WriteFile(short, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := e.ebbfs("change-password", "--new-password-file", short); r.code == 0 || !strings.Contains(r.stderr, "too short") {
		t.Fatalf("change-password to a short password: %s", r)
	}
	if r := e.ebbfs("change-password"); r.code == 0 || !strings.Contains(r.stderr, "EBBFS_NEW_PASSWORD") {
		t.Fatalf("change-password without a new password: %s", r)
	}
	r := e.mustEbbfs("change-password", "--new-password-file", newPW)
	if !strings.Contains(r.stdout, "password changed") {
		t.Fatalf("change-password output: %s", r)
	}
	// The old password (still in the configured file) is now wrong.
	if r := e.ebbfs("run"); r.code != 3 || !strings.Contains(r.stderr, "wrong password") {
		t.Fatalf("run with the old password: %s", r)
	}
	if err := os.Rename(newPW, filepath.Join(e.dir, "password")); err != nil {
		t.Fatal(err)
	}
	p = e.mount()
	if got := string(readFile(t, e.path("f"))); got != "survives the password change" {
		t.Fatalf("f = %q", got)
	}
	p.stop()
}

// TestConfigErrors: a bad config fails every command with the key named.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if r := e.mustEbbfs("config"); !strings.Contains(r.stdout, `flush_interval = "200ms"`) || !strings.Contains(r.stdout, "max_concurrent_repacks = 4") {
		t.Fatalf("ebbfs config: %s", r)
	}
	e.writeConfig("typo_key = 1\n")
	for _, sub := range []string{"init", "run", "flush", "fsck", "config"} {
		r := e.ebbfs(sub)
		if r.code == 0 || !strings.Contains(r.stderr, `unknown key "admin.typo_key"`) {
			t.Fatalf("%s with an unknown key: %s", sub, r)
		}
	}
	e.writeConfig("")
	if err := os.WriteFile(e.cfg, []byte("[storage]\nurl = \"file://relative\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := e.ebbfs("init"); r.code == 0 || !strings.Contains(r.stderr, "storage.url") {
		t.Fatalf("init with a bad url: %s", r)
	}
	if r := e.run(ebbfsBin, "run", "-c", filepath.Join(e.dir, "missing.toml")); r.code == 0 || !strings.Contains(r.stderr, "missing.toml") {
		t.Fatalf("run with a missing config: %s", r)
	}
	if r := e.run(ebbfsBin, "init", "-c", e.cfg, "surplus"); r.code != 2 {
		t.Fatalf("init with an argument: %s", r)
	}
	if r := e.run(ebbfsBin, "version"); r.code != 0 || !strings.HasPrefix(r.stdout, "ebbfs ") {
		t.Fatalf("version: %s", r)
	}
}

// TestCheckpointsReclaimSpace: the admin-backed commands work end to end.
func TestCheckpointsReclaimSpace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	p := e.mount()
	for _, n := range []string{"a", "b", "c"} {
		writeFile(t, e.path(n), randBytes(t, 1<<20))
	}
	e.mustEbbfs("flush")
	if err := os.Remove(e.path("a")); err != nil {
		t.Fatal(err)
	}
	e.mustEbbfs("flush")

	if r := e.ebbfs("checkpoint", "create", "x"); r.code != 2 {
		t.Fatalf("checkpoint create without a kind: %s", r)
	}
	r := e.mustEbbfs("checkpoint", "create", "--persistent", "keep")
	if !strings.Contains(r.stdout, "keep") || !strings.Contains(r.stdout, "persistent") {
		t.Fatalf("checkpoint create: %s", r)
	}
	if r := e.ebbfs("checkpoint", "create", "--persistent", "keep"); r.code == 0 || !strings.Contains(r.stderr, "already exists") {
		t.Fatalf("duplicate checkpoint: %s", r)
	}
	e.mustEbbfs("checkpoint", "create", "--ttl", "10m", "short-lived")
	r = e.mustEbbfs("checkpoint", "list", "--json")
	var recs []struct{ Name, Kind string }
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil || len(recs) != 2 {
		t.Fatalf("checkpoint list --json: %v %s", err, r)
	}
	r = e.mustEbbfs("reclaim", "run", "--json")
	var cycle struct {
		Paused   bool     `json:"paused"`
		PinnedBy []string `json:"pinned_by"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &cycle); err != nil {
		t.Fatalf("reclaim run --json: %v %s", err, r)
	}
	if !cycle.Paused || len(cycle.PinnedBy) != 1 || cycle.PinnedBy[0] != "keep" {
		t.Fatalf("a cycle under a persistent checkpoint: %+v, want paused by keep", cycle)
	}
	r = e.mustEbbfs("space", "--json")
	var space struct {
		LiveBytes    int64            `json:"live_bytes"`
		SegmentCount int              `json:"segment_count"`
		Pinned       map[string]int64 `json:"pinned"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &space); err != nil {
		t.Fatalf("space --json: %v %s", err, r)
	}
	if space.LiveBytes < 2<<20 || space.SegmentCount == 0 {
		t.Fatalf("space: %+v, want at least the 2 MiB still live", space)
	}
	if _, ok := space.Pinned["keep"]; !ok {
		t.Fatalf("space does not show the pinning checkpoint: %+v", space)
	}
	e.mustEbbfs("space")
	e.mustEbbfs("reclaim", "sweep")
	e.mustEbbfs("checkpoint", "delete", "keep")
	r = e.mustEbbfs("reclaim", "run", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &cycle); err != nil || cycle.Paused {
		t.Fatalf("cycle after deleting the checkpoint: %+v %v", cycle, err)
	}
	p.stop()
	// Without a writer, list/info/delete go to the store directly.
	r = e.mustEbbfs("checkpoint", "info", "--json", "short-lived")
	if !strings.Contains(r.stdout, `"ephemeral"`) {
		t.Fatalf("checkpoint info without a writer: %s", r)
	}
	if r := e.mustEbbfs("checkpoint", "info", "short-lived"); !strings.Contains(r.stdout, "ephemeral") || !strings.Contains(r.stdout, "unless renewed") {
		t.Fatalf("checkpoint info, human: %s", r)
	}
	e.mustEbbfs("checkpoint", "delete", "short-lived")
	if r := e.mustEbbfs("checkpoint", "list"); !strings.Contains(r.stdout, "no checkpoints") {
		t.Fatalf("checkpoint list after deletes: %s", r)
	}
	if r := e.ebbfs("space"); r.code == 0 || !strings.Contains(r.stderr, "no ebbfs process is running") {
		t.Fatalf("space without a writer: %s", r)
	}
	if r := e.mustEbbfs("fsck"); !strings.Contains(r.stdout, "consistent") {
		t.Fatalf("fsck: %s", r)
	}
}

// TestReadOnlyReader: run --read-only next to a live writer serves the
// state as of its start and refuses writes with EROFS.
func TestReadOnlyReader(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	w := e.mount()
	writeFile(t, e.path("seen"), []byte("before the reader"))
	// A checkpoint publishes a manifest for the reader to pin.
	e.mustEbbfs("checkpoint", "create", "--ttl", "1m", "publish")
	e.mustEbbfs("checkpoint", "delete", "publish")

	r := e.sameStore()
	rp := r.mount("--read-only")
	if got := string(readFile(t, r.path("seen"))); got != "before the reader" {
		t.Fatalf("reader sees %q", got)
	}
	if err := os.WriteFile(r.path("new"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write through the reader: %v, want EROFS", err)
	}
	st := r.mustEbbfs("status", "--json")
	if !strings.Contains(st.stdout, `"read_only": true`) {
		t.Fatalf("reader status: %s", st)
	}
	if res := r.ebbfs("checkpoint", "create", "--persistent", "nope"); res.code == 0 {
		t.Fatalf("checkpoint create through a reader succeeded: %s", res)
	}
	// The reader keeps an ephemeral checkpoint while it runs.
	if l := e.mustEbbfs("checkpoint", "list"); !strings.Contains(l.stdout, "reader-") || !strings.Contains(l.stdout, "ephemeral") {
		t.Fatalf("no reader checkpoint while the reader runs: %s", l)
	}
	// The writer is unaffected.
	writeFile(t, e.path("later"), []byte("after"))
	e.mustEbbfs("flush")
	rp.stop()
	if l := e.mustEbbfs("checkpoint", "list"); strings.Contains(l.stdout, "reader-") {
		t.Fatalf("the reader's checkpoint outlived the reader: %s", l)
	}
	w.stop()
}

// TestRunCheckpoint: run --checkpoint serves exactly the checkpoint's state
// while the writer moves on, and refuses a missing checkpoint clearly.
func TestRunCheckpoint(t *testing.T) {
	t.Parallel()
	e, w := writerWithSnapshot(t, "snap", "as checkpointed")
	writeFile(t, e.path("a"), []byte("rewritten after the checkpoint"))
	writeFile(t, e.path("b"), []byte("created after the checkpoint"))
	e.mustEbbfs("flush")

	r := e.sameStore()
	if res := r.ebbfs("run", "--checkpoint", "nosuch"); res.code == 0 || !strings.Contains(res.stderr, `checkpoint "nosuch"`) {
		t.Fatalf("run --checkpoint of a missing checkpoint: %s", res)
	}
	rp := r.mount("--checkpoint", "snap")
	if got := string(readFile(t, r.path("a"))); got != "as checkpointed" {
		t.Fatalf("checkpoint reader sees a = %q", got)
	}
	if _, err := os.Stat(r.path("b")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("checkpoint reader sees b created later: %v", err)
	}
	if err := os.WriteFile(r.path("c"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write through the checkpoint reader: %v, want EROFS", err)
	}
	// The writer still sees its own newer state.
	if got := string(readFile(t, e.path("a"))); got != "rewritten after the checkpoint" {
		t.Fatalf("writer sees a = %q", got)
	}
	rp.stop()
	e.mustEbbfs("checkpoint", "delete", "snap")
	w.stop()
}

// TestSharedCacheDirRefused: a second process on a running one's cache
// directory is refused before it can touch the first one's metadata.
func TestSharedCacheDirRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	w := e.mount()
	writeFile(t, e.path("kept"), []byte("still here"))
	e.mustEbbfs("flush")

	r := e.sameStore()
	r.cache = e.cache
	r.writeConfig("")
	res := r.ebbfs("run", "--read-only")
	if res.code == 0 || !strings.Contains(res.stderr, "in use by another ebbfs process") {
		t.Fatalf("reader on the writer's cache directory: %s", res)
	}
	if got := string(readFile(t, e.path("kept"))); got != "still here" {
		t.Fatalf("writer after the refused reader: %q", got)
	}
	writeFile(t, e.path("after"), []byte("x"))
	e.mustEbbfs("flush")
	w.stop()
}
