package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
)

// wantRefused requires exit code code and every one of wants in stderr.
func wantRefused(t *testing.T, what string, r result, code int, wants ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d:\n%s", what, r.code, code, r)
	}
	for _, w := range wants {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("%s: stderr does not say %q:\n%s", what, w, r.stderr)
		}
	}
	t.Logf("%s: refused: %s", what, strings.TrimSpace(r.stderr))
}

// TestInitGuardRails: init refuses a store directory that does not exist
// (unless --create) and a password file other users can read; the
// configuration's unknown keys get a suggestion and unquoted sizes a hint;
// contradictory flags are refused.
func TestInitGuardRails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := os.Remove(e.store); err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(e.dir, "password")
	if err := os.Chmod(pw, 0o644); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "init with a world-readable password file", e.ebbfs("init", "--create"), 1, "readable", "chmod 600 "+pw)
	if err := os.Chmod(pw, 0o600); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "init on a missing store directory", e.ebbfs("init"), 1, e.store+" does not exist", "--create")
	if _, err := os.Stat(e.store); !os.IsNotExist(err) {
		t.Fatalf("init without --create made the store directory: %v", err)
	}
	if r := e.mustEbbfs("init", "--create"); !strings.Contains(r.stderr, "created the store directory "+e.store) {
		t.Fatalf("init --create does not say it made the directory: %s", r)
	}

	e.writeConfig("[filesystem]\nmax_size = 64MiB\n")
	wantRefused(t, "an unquoted size", e.ebbfs("config"), 1, `write them in quotes: max_size = "64MiB"`)
	e.writeConfig("[filesystem]\nmaxsize = \"64MiB\"\n")
	wantRefused(t, "an unknown key", e.ebbfs("config"), 1, `unknown key "filesystem.maxsize" (did you mean "filesystem.max_size"?)`)
	e.writeConfig("")

	wantRefused(t, "run --read-only --checkpoint", e.ebbfs("run", "--read-only", "--checkpoint", "a"), 2, "give one of them")
	wantRefused(t, "checkpoint create --persistent --ttl", e.ebbfs("checkpoint", "create", "x", "--persistent", "--ttl", "1m"), 2, "give one of them")
}

// writerWithSnapshot starts a writer whose file "a" holds content and
// makes the persistent checkpoint name of it.
func writerWithSnapshot(t *testing.T, name, content string) (*env, *proc) {
	t.Helper()
	e := newEnv(t)
	e.init()
	w := e.mount()
	writeFile(t, e.path("a"), []byte(content))
	e.mustEbbfs("checkpoint", "create", "--persistent", name)
	return e, w
}

// readerRecords returns the reader-* names in `checkpoint list`.
func readerRecords(e *env) []string {
	var names []string
	for _, l := range strings.Split(e.mustEbbfs("checkpoint", "list").stdout, "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], "reader-") {
			names = append(names, f[0])
		}
	}
	return names
}

// TestCheckpointDeleteGuardRails: deleting a live replica's record or a
// checkpoint that `run --checkpoint` serves needs --force and says what it
// breaks; flush on a replica says there is nothing to flush.
func TestCheckpointDeleteGuardRails(t *testing.T) {
	t.Parallel()
	e, w := writerWithSnapshot(t, "snap", "as checkpointed")

	r := e.sameStore()
	rp := r.mount("--read-only")
	c := e.sameStore()
	cp := c.mount("--checkpoint", "snap")
	var replicaRec, servingRec string
	testutil.Eventually(t, 30*time.Second, "both readers' records", func() bool {
		replicaRec, servingRec = "", ""
		for _, n := range readerRecords(e) {
			if strings.HasSuffix(n, "-serves-snap") {
				servingRec = n
			} else {
				replicaRec = n
			}
		}
		return replicaRec != "" && servingRec != ""
	})

	wantRefused(t, "delete a served checkpoint", e.ebbfs("checkpoint", "delete", "snap"), 1,
		"served by `ebbfs run --checkpoint snap`", "reads fail", "--force")
	wantRefused(t, "delete a live replica's record", e.ebbfs("checkpoint", "delete", replicaRec), 1,
		"running replica", "--force")
	wantRefused(t, "delete a checkpoint reader's record", e.ebbfs("checkpoint", "delete", servingRec), 1,
		"running replica, standby or checkpoint reader", "--force")
	if got := string(readFile(t, c.path("a"))); got != "as checkpointed" {
		t.Fatalf("the checkpoint reader reads %q after the refused deletes", got)
	}

	fl := r.mustEbbfs("flush")
	if !strings.Contains(fl.stdout, "nothing to flush") || strings.Contains(fl.stdout, "flushed") {
		t.Fatalf("flush on a replica: %s", fl)
	}
	t.Logf("flush on a replica: %s", strings.TrimSpace(fl.stdout))

	forced := e.mustEbbfs("checkpoint", "delete", "--force", replicaRec)
	if !strings.Contains(forced.stderr, "deleting anyway") {
		t.Fatalf("checkpoint delete --force does not say what it breaks: %s", forced)
	}
	// Once its reader stops, the checkpoint deletes without --force.
	cp.stop()
	e.mustEbbfs("checkpoint", "delete", "snap")
	rp.stop()
	// A malformed record (it makes every listing fail) still deletes: the
	// guard cannot judge it and says so.
	writeFile(t, filepath.Join(e.store, "checkpoints", "bad"), []byte("not a record"))
	if d := e.mustEbbfs("checkpoint", "delete", "bad"); !strings.Contains(d.stderr, "cannot tell whether a running reader needs bad") {
		t.Fatalf("deleting a malformed record: %s", d)
	}
	if l := e.mustEbbfs("checkpoint", "list"); strings.Contains(l.stdout, "bad") {
		t.Fatalf("the malformed record is still listed: %s", l)
	}
	w.stop()
}

// TestConfigFromEnvironment: without -c the CLI reads the file EBBFS_CONFIG
// names; -c wins over it; with neither, the error says how to give one.
func TestConfigFromEnvironment(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := os.Stat("/etc/ebbfs/ebbfs.toml"); os.IsNotExist(err) {
		r := e.run(ebbfsBin, "config")
		wantRefused(t, "no -c, no EBBFS_CONFIG", r, 1, "/etc/ebbfs/ebbfs.toml", "-c", "EBBFS_CONFIG")
	}
	e.extraEnv = append(e.extraEnv, "EBBFS_CONFIG="+e.cfg)
	if r := e.run(ebbfsBin, "config"); r.code != 0 || !strings.Contains(r.stdout, e.cfg+": valid") {
		t.Fatalf("config through EBBFS_CONFIG: %s", r)
	}
	other := filepath.Join(e.dir, "other.toml")
	r := e.run(ebbfsBin, "config", "-c", other)
	wantRefused(t, "-c over EBBFS_CONFIG", r, 1, other)
}

// TestSpaceNamesTTLCheckpoint: a ttl checkpoint whose span sets the grace
// of dead segments is named by `ebbfs space`, with what it holds back and
// when it expires.
func TestSpaceNamesTTLCheckpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	w := e.mount()
	writeFile(t, e.path("doomed"), blocks(1, 0, 8, 1))
	e.mustEbbfs("flush")
	e.mustEbbfs("checkpoint", "create", "hold", "--ttl", "10m")
	if err := os.Remove(e.path("doomed")); err != nil {
		t.Fatal(err)
	}
	e.mustEbbfs("flush")
	var out string
	testutil.Eventually(t, 30*time.Second, "space names the ttl checkpoint with bytes awaiting", func() bool {
		e.mustEbbfs("reclaim", "run") // gives the dead segment its deadline
		out = e.mustEbbfs("space").stdout
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "held back by ttl checkpoint hold") && !strings.Contains(l, " 0 B awaiting") {
				return strings.Contains(l, "wait 10m30s (its span + 30 s)") && strings.Contains(l, "it expires ")
			}
		}
		return false
	})
	t.Logf("ebbfs space:\n%s", out)
	w.stop()
}
