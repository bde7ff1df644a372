package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// dbOptions are the flags of the db group: real database clients and a
// VM-style block workload (issue 35).
type dbOptions struct {
	pgScale, pgClients int
	pgTime             time.Duration
	walCommits         int // SQLite commits in WAL mode
	journalCommits     int // SQLite commits in rollback-journal mode
	vmSize             int64
	vmFile             int64
	vmTime             time.Duration
}

// dbFlags registers the db group's flags.
func dbFlags(o *dbOptions) {
	o.vmSize, o.vmFile = GiB, 256*MiB
	flag.IntVar(&o.pgScale, "pg-scale", 10, "db group: pgbench scale factor (pgbench -i -s)")
	flag.IntVar(&o.pgClients, "pg-clients", 8, "db group: pgbench clients")
	flag.DurationVar(&o.pgTime, "pg-time", 60*time.Second, "db group: length of the pgbench run")
	flag.IntVar(&o.walCommits, "sqlite-wal-commits", 2000, "db group: SQLite transactions committed in WAL mode")
	flag.IntVar(&o.journalCommits, "sqlite-journal-commits", 200, "db group: SQLite transactions committed in rollback-journal mode")
	flag.Var((*sizeFlag)(&o.vmSize), "vm-size", "db group: size of the NBD export (the VM's disk) holding ext4")
	flag.Var((*sizeFlag)(&o.vmFile), "vm-file", "db group: size of fio's file inside ext4")
	flag.DurationVar(&o.vmTime, "vm-time", 30*time.Second, "db group: length of each fio run inside ext4")
}

// validate reports what is wrong with the db group's flags.
func (o dbOptions) validate() error {
	if o.pgScale < 1 || o.pgClients < 1 || o.pgTime < time.Second || o.walCommits < 1 || o.journalCommits < 1 ||
		o.vmTime < time.Second || o.vmFile < MiB || o.vmSize < o.vmFile+128*MiB || o.vmSize%MiB != 0 {
		return errors.New("-pg-scale, -pg-clients, -sqlite-*-commits positive; -pg-time, -vm-time at least 1s; -vm-size a multiple of 1MiB at least -vm-file + 128MiB")
	}
	return nil
}

// dbTools are the programs the db group runs, found before any of it runs:
// a missing one fails the group (it is not skipped).
type dbTools struct {
	pgBin        string // PostgreSQL's server-side bin directory (initdb, postgres)
	pgUID, pgGID uint32
}

// findDBTools looks for every program the db group needs, and the
// postgres user the server runs as (PostgreSQL refuses to run as root).
func findDBTools() (*dbTools, error) {
	var missing []string
	for _, p := range []string{"sqlite3", "fio", "nbdfuse", "qemu-nbd", "losetup", "mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
	// The highest major version (lexical order would put 9 after 15).
	slices.SortFunc(bins, func(a, b string) int { return pgMajor(a) - pgMajor(b) })
	tools := &dbTools{}
	if len(bins) == 0 {
		missing = append(missing, "PostgreSQL (/usr/lib/postgresql/*/bin: initdb, postgres, pgbench)")
	} else {
		tools.pgBin = filepath.Dir(bins[len(bins)-1])
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		missing = append(missing, "the postgres user")
	} else {
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("postgres user: uid %q gid %q", u.Uid, u.Gid)
		}
		tools.pgUID, tools.pgGID = uint32(uid), uint32(gid)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("the db group needs %s (make deps installs them)", strings.Join(missing, ", "))
	}
	return tools, nil
}

func pgMajor(bin string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(bin))))
	return n
}

// dbKeys are the db group's rows, in order.
var dbKeys = []string{"pgbench", "sqlitewal", "sqlitejournal", "vmrandwrite", "vmrandread"}

// dbGroup runs the database clients and the VM workload on t.
func (b *bench) dbGroup(t *target) {
	if b.dbTools == nil && b.dbToolsErr == nil {
		b.dbTools, b.dbToolsErr = findDBTools()
	}
	if b.dbToolsErr != nil {
		for _, k := range dbKeys {
			b.measure(k, t, func() (float64, error) { return 0, b.dbToolsErr })
		}
		return
	}
	b.pgbench(t)
	b.sqlite(t, "sqlitewal", "WAL", b.o.db.walCommits)
	b.sqlite(t, "sqlitejournal", "DELETE", b.o.db.journalCommits)
	b.vm(t)
}

// measureCount is measure for a workload that also reports how many
// commits (or writes) it made, for store requests per commit.
func (b *bench) measureCount(key string, t *target, f func() (float64, int64, error)) result {
	var count int64
	r := b.measureTry(key, t, func() (float64, error) {
		n, c, err := f()
		count = c
		return n, err
	}, false)
	b.amend(key, t, func(r *result) { r.count = count })
	r.count = count
	if r.store != nil && count > 0 {
		fmt.Fprintf(os.Stderr, "  %-12s store requests per commit: %.2f PUT, %.2f in all\n", t.name,
			float64(r.store.puts)/float64(count), float64(r.store.requests)/float64(count))
	}
	return r
}

// dbDir makes a new directory for key's workload on t (named after key,
// a new one each round, as roundFile names it: key must be the key its
// results are recorded under), on an ebbfs target with the extent size of
// -db-extent-size, and reachable by the postgres user.
func (b *bench) dbDir(key string, t *target) (string, error) {
	dir := b.roundFile(key, t)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	if b.o.dbExtentSize != 0 && t.segs != "" {
		if err := unix.Setxattr(dir, "user.ebbfs.extent_size", []byte(strconv.Itoa(b.o.dbExtentSize)), 0); err != nil {
			return "", fmt.Errorf("setting the extent size of %s: %w", dir, err)
		}
	}
	// The work directory is 0700 (MkdirTemp), an ebbfs target's too.
	for d := t.dir; strings.HasPrefix(d, b.work); d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return "", err
		}
		if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// pgbench runs PostgreSQL with its data directory on t and pgbench's
// TPC-B-like transactions against it: -pg-clients clients for -pg-time,
// after pgbench -i at -pg-scale and a checkpoint (neither timed). fsync,
// synchronous_commit and full_page_writes are on (the defaults).
func (b *bench) pgbench(t *target) {
	fail := func(err error) { b.measure("pgbench", t, func() (float64, error) { return 0, err }) }
	data, err := b.dbDir("pgbench", t)
	if err != nil {
		fail(err)
		return
	}
	pg, err := b.startPostgres(t, data)
	if err != nil {
		fail(err)
		return
	}
	defer func() {
		if err := pg.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "  %-12s ERROR: stopping PostgreSQL: %v\n", t.name, err)
			b.amend("pgbench", t, func(r *result) { r.err = err })
		}
	}()
	if out, err := runHelper(pg.client("pgbench", "-i", "-q", "-s", strconv.Itoa(b.o.db.pgScale))); err != nil {
		fail(fmt.Errorf("pgbench -i: %v\n%s", err, out))
		return
	}
	if out, err := runHelper(pg.client("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", "CHECKPOINT")); err != nil {
		fail(fmt.Errorf("psql CHECKPOINT: %v\n%s", err, out))
		return
	}
	b.measureCount("pgbench", t, func() (float64, int64, error) {
		secs := strconv.Itoa(int(b.o.db.pgTime.Seconds()))
		out, err := runHelper(pg.client("pgbench", "-n", "-c", strconv.Itoa(b.o.db.pgClients), "-j", "2", "-T", secs))
		if err != nil {
			return 0, 0, fmt.Errorf("pgbench: %v\n%s", err, out)
		}
		return parsePgbench(string(out))
	})
}

var (
	pgbenchTPS    = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)
	pgbenchTxns   = regexp.MustCompile(`(?m)^number of transactions actually processed: ([0-9]+)`)
	pgbenchFailed = regexp.MustCompile(`(?m)^number of failed transactions: ([0-9]+)`)
)

// parsePgbench reads pgbench's summary: transactions per second (without
// connection time) and transactions processed; a failed transaction is an
// error.
func parsePgbench(out string) (float64, int64, error) {
	tps, txns := pgbenchTPS.FindStringSubmatch(out), pgbenchTxns.FindStringSubmatch(out)
	if tps == nil || txns == nil {
		return 0, 0, fmt.Errorf("no tps in pgbench's output:\n%s", out)
	}
	if f := pgbenchFailed.FindStringSubmatch(out); f != nil && f[1] != "0" {
		return 0, 0, fmt.Errorf("pgbench: %s failed transactions", f[1])
	}
	rate, err := strconv.ParseFloat(tps[1], 64)
	if err != nil {
		return 0, 0, err
	}
	n, err := strconv.ParseInt(txns[1], 10, 64)
	return rate, n, err
}

// postgres is a PostgreSQL server the harness started.
type postgres struct {
	bin, sock string
	h         *helperProc
}

// client is a PostgreSQL client command (as root, trust authentication
// over the server's unix socket) against the postgres database.
func (p *postgres) client(name string, args ...string) *exec.Cmd {
	args = append([]string{"-h", p.sock, "-p", "5432", "-U", "postgres"}, args...)
	return exec.Command(filepath.Join(p.bin, name), append(args, "postgres")...)
}

// startPostgres runs initdb on data and starts the server as the postgres
// user, listening only on a unix socket in the work directory, and waits
// until it accepts connections.
func (b *bench) startPostgres(t *target, data string) (*postgres, error) {
	tl := b.dbTools
	if err := os.Chown(data, int(tl.pgUID), int(tl.pgGID)); err != nil {
		return nil, err
	}
	sock := filepath.Join(b.work, "pgsock-"+t.name)
	if err := os.MkdirAll(sock, 0o755); err != nil {
		return nil, err
	}
	if err := os.Chown(sock, int(tl.pgUID), int(tl.pgGID)); err != nil {
		return nil, err
	}
	cred := &syscall.Credential{Uid: tl.pgUID, Gid: tl.pgGID}
	initdb := exec.Command(filepath.Join(tl.pgBin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	if out, err := runHelperAs(initdb, cred); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	logf := filepath.Join(b.work, fmt.Sprintf("postgres-%s.log", t.name))
	cmd := exec.Command(filepath.Join(tl.pgBin, "postgres"), "-D", data, "-p", "5432",
		"-c", "listen_addresses=", "-c", "unix_socket_directories="+sock,
		"-c", "fsync=on", "-c", "synchronous_commit=on", "-c", "full_page_writes=on")
	lf, err := os.OpenFile(logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd.Stdout, cmd.Stderr = lf, lf
	h, err := startHelper(cmd, cred, syscall.SIGINT)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	p := &postgres{bin: tl.pgBin, sock: sock, h: h}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := runHelper(exec.Command(filepath.Join(tl.pgBin, "pg_isready"), "-q", "-h", sock, "-p", "5432"))
		if err == nil {
			return p, nil
		}
		select {
		case <-h.done:
			return nil, fmt.Errorf("postgres exited before accepting connections (log %s)%s", logf, tailFile(logf))
		default:
		}
		if time.Now().After(deadline) {
			_ = p.stop()
			return nil, fmt.Errorf("postgres not ready after 2 minutes: %s (log %s)%s", out, logf, tailFile(logf))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop shuts the server down fast (SIGINT: the transactions in progress
// are rolled back, a shutdown checkpoint is written) and waits for it.
func (p *postgres) stop() error {
	_ = p.h.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.h.done:
	case <-time.After(5 * time.Minute):
		_ = syscall.Kill(-p.h.cmd.Process.Pid, syscall.SIGKILL)
		<-p.h.done
		return errors.New("postgres did not stop within 5 minutes of SIGINT")
	}
	if p.h.err != nil {
		return fmt.Errorf("postgres exited with %w", p.h.err)
	}
	return nil
}

// tailFile is the end of a log file, for error messages.
func tailFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return "\n--- " + path + " (tail) ---\n" + strings.TrimRight(string(b), "\n")
}

// sqlite commits n small transactions (an INSERT of a 100-byte row each,
// autocommit) into a new database on t with the sqlite3 shell, in
// journal mode mode (WAL or DELETE, the rollback journal) with
// synchronous=FULL, timed from the shell's start to its exit; then
// PRAGMA integrity_check and the row count must hold (not timed).
func (b *bench) sqlite(t *target, key, mode string, n int) {
	dir, err := b.dbDir(key, t)
	if err != nil {
		b.measure(key, t, func() (float64, error) { return 0, err })
		return
	}
	db := filepath.Join(dir, "bench.db")
	setup := fmt.Sprintf("PRAGMA journal_mode=%s; CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);", mode)
	if out, err := runHelper(exec.Command("sqlite3", "-bail", db, setup)); err != nil {
		b.measure(key, t, func() (float64, error) { return 0, fmt.Errorf("sqlite3 setup: %v\n%s", err, out) })
		return
	}
	var script strings.Builder
	script.WriteString("PRAGMA synchronous=FULL;\n")
	for range n {
		script.WriteString("INSERT INTO t(v) VALUES(randomblob(100));\n")
	}
	r := b.measureCount(key, t, func() (float64, int64, error) {
		cmd := exec.Command("sqlite3", "-bail", db)
		cmd.Stdin = strings.NewReader(script.String())
		start := time.Now()
		out, err := runHelper(cmd)
		if err != nil {
			return 0, 0, fmt.Errorf("sqlite3: %v\n%s", err, out)
		}
		return float64(n) / time.Since(start).Seconds(), int64(n), nil
	})
	if r.err != nil {
		return
	}
	out, err := runHelper(exec.Command("sqlite3", "-bail", db, "PRAGMA integrity_check; PRAGMA journal_mode; SELECT count(*) FROM t;"))
	want := fmt.Sprintf("ok\n%s\n%d", strings.ToLower(mode), n)
	if err == nil && strings.TrimSpace(string(out)) != want {
		err = fmt.Errorf("integrity_check, journal mode and row count gave %q, want %q", strings.TrimSpace(string(out)), want)
	}
	if err != nil {
		err = fmt.Errorf("checking the database afterwards: %w", err)
		fmt.Fprintf(os.Stderr, "  %-12s ERROR: %v\n", t.name, err)
		b.amend(key, t, func(r *result) { r.err = err })
	}
}
