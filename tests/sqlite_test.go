package tests

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestSQLiteOnMount: the sqlite3 shell commits small transactions into a
// database on the mount in WAL and in rollback-journal mode; every
// committed row is there and PRAGMA integrity_check passes, on the live
// mount and again after the writer is killed (kill -9) and the filesystem
// mounted again: a commit SQLite was told is durable stays.
// (make bench-db measures the same loops' commit rates.)
func TestSQLiteOnMount(t *testing.T) {
	t.Parallel()
	need(t, "sqlite3")
	e := newEnv(t)
	e.init()
	p := e.mount()

	// In WAL mode a commit is durable once the WAL is fsynced
	// (synchronous=FULL); in rollback-journal mode once the journal's
	// deletion is, which takes synchronous=EXTRA (an fsync of the
	// directory after the unlink): with FULL, a journal a crash brings
	// back would roll the last commit back, on ext4 as here.
	modes := []struct {
		mode, sync string
		commits    int
	}{{"wal", "FULL", 150}, {"delete", "EXTRA", 100}}
	check := func(when string) {
		t.Helper()
		for _, m := range modes {
			db := e.path(m.mode + ".db")
			r := e.run("sqlite3", "-bail", db, "PRAGMA integrity_check; PRAGMA journal_mode; SELECT count(*), sum(length(v)) FROM t;")
			want := fmt.Sprintf("ok\n%s\n%d|%d", m.mode, m.commits, 100*m.commits)
			if r.code != 0 || strings.TrimSpace(r.stdout) != want {
				t.Fatalf("%s, %s mode: integrity_check, journal_mode, count gave %q (%s), want %q", when, m.mode, strings.TrimSpace(r.stdout), r, want)
			}
		}
	}
	for _, m := range modes {
		db := e.path(m.mode + ".db")
		if r := e.run("sqlite3", "-bail", db, "PRAGMA journal_mode="+m.mode+"; CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);"); r.code != 0 {
			t.Fatalf("sqlite3 setup, %s mode: %s", m.mode, r)
		}
		var script strings.Builder
		script.WriteString("PRAGMA synchronous=" + m.sync + ";\n")
		for range m.commits {
			script.WriteString("INSERT INTO t(v) VALUES(randomblob(100));\n")
		}
		ctx, cancel := context.WithTimeout(t.Context(), cmdTimeout)
		cmd := e.command(ctx, "sqlite3", "-bail", db)
		cmd.Stdin = strings.NewReader(script.String())
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("sqlite3, %d commits in %s mode: %v\n%s", m.commits, m.mode, err, out.String())
		}
	}
	check("on the live mount")
	// Every commit above returned, so it is durable: a crash keeps it.
	p.kill()
	e.forceUnmount()
	p = e.mount()
	check("after kill -9 and a new mount")
	p.stop()
}
