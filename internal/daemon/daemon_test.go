package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/internal/mountinfo"
	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
)

func TestMain(m *testing.M) {
	mountinfo.RunProbe() // Run checks the mountpoint with a probe child
	os.Exit(m.Run())
}

func TestCleanupRunsLastFirst(t *testing.T) {
	var s cleanupStack
	var got []int
	for i := 1; i <= 3; i++ {
		s.push(func() { got = append(got, i) })
	}
	s.run()
	if fmt.Sprint(got) != "[3 2 1]" {
		t.Errorf("cleanup ran %v, want [3 2 1]", got)
	}
	s.run() // emptied: nothing runs twice
	if len(got) != 3 {
		t.Errorf("a second run ran %v", got[3:])
	}
}

// logFile is a log the daemon's goroutines write to (an *os.File is
// safe for that) and the test reads.
type logFile struct{ f *os.File }

func newLogFile(t *testing.T) *logFile {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &logFile{f}
}

func (l *logFile) String() string {
	b, _ := os.ReadFile(l.f.Name())
	return string(b)
}

// testConfig is a writer's configuration in dir, on ports the kernel picks.
func testConfig(t *testing.T, dir string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(fmt.Sprintf(`
[storage]
url = "file://%[1]s/store"
[mount]
path = "%[1]s/mnt"
[cache]
dir = "%[1]s/cache"
[nbd]
listen = ["127.0.0.2:0"]
[admin]
listen = "127.0.0.1:0"
`, dir)), "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRunShutdownLeavesNothingBehind runs a writer with its mount, NBD
// and admin endpoint, writes a file, stops it with a signal and checks
// the shutdown: the mount is gone, reclamation stopped before the final
// barrier, the file is in the store, and no goroutine Run started is left.
func TestRunShutdownLeavesNothingBehind(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	dir := t.TempDir()
	c := testConfig(t, dir)
	store := objstore.NewMem()
	k, err := fs.Init(context.Background(), store, "password123")
	if err != nil {
		t.Fatal(err)
	}
	logs := newLogFile(t)
	log := slog.New(slog.NewTextHandler(logs.f, &slog.HandlerOptions{Level: slog.LevelDebug}))

	leaks := testutil.SnapshotGoroutines()
	sigs := make(chan os.Signal, 2)
	errc := make(chan error, 1)
	go func() {
		errc <- Run(Options{Config: c, Version: "v-test", Log: log, Signals: sigs,
			Unlock: func(context.Context, *config.Config) (objstore.Store, *keys.Keys, error) { return store, k, nil }})
	}()
	mp := c.Mount.Path
	deadline := time.Now().Add(time.Minute)
	for {
		if m, ok, _ := mountinfo.Find(mp); ok && m.FSType == "fuse.ebbfs" && logsSay(logs, "ebbfs running") {
			break
		}
		select {
		case err := <-errc:
			t.Fatalf("Run returned before mounting: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not mounted within a minute; log:\n%s", mp, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(mp, "f"), []byte("kept at shutdown"), 0o644); err != nil {
		t.Fatal(err)
	}

	sigs <- syscall.SIGTERM
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run: %v\n%s", err, logs.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("Run did not return within two minutes of SIGTERM; log:\n%s", logs.String())
	}
	if _, ok, _ := mountinfo.Find(mp); ok {
		t.Errorf("%s still mounted after Run returned", mp)
	}
	out := logs.String()
	stopped, closed := strings.Index(out, "reclamation stopped"), strings.Index(out, "final barrier done")
	if stopped < 0 || closed < 0 || stopped > closed {
		t.Errorf("shutdown order: reclamation stopped at %d, final barrier at %d (want both, reclamation first); log:\n%s", stopped, closed, out)
	}
	leaks.Check(t, 10*time.Second)

	// The final barrier made the file durable: a new engine reads it.
	e, err := fs.Open(context.Background(), fs.Options{Store: store, Keys: k, CacheDir: t.TempDir(), ReadOnly: true,
		Logger: slog.New(slog.NewTextHandler(logs.f, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	if got := readFile(t, e, "/f"); got != "kept at shutdown" {
		t.Errorf("after shutdown the store holds %q", got)
	}
}

func logsSay(l *logFile, s string) bool { return strings.Contains(l.String(), s) }

// readFile reads the file name in the root of e.
func readFile(t *testing.T, e *fs.Engine, name string) string {
	t.Helper()
	ctx := context.Background()
	a, err := e.Lookup(ctx, fs.RootIno, strings.TrimPrefix(name, "/"))
	if err != nil {
		t.Fatalf("lookup %s: %v", name, err)
	}
	buf := make([]byte, a.Size)
	n, err := e.Read(ctx, a.Ino, buf, 0)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return string(buf[:n])
}

// TestSignalDuringStartup: a signal while the store is being unlocked
// stops Run without error, nothing mounted and no goroutine left.
func TestSignalDuringStartup(t *testing.T) {
	c := testConfig(t, t.TempDir())
	logs := newLogFile(t)
	leaks := testutil.SnapshotGoroutines()
	sigs := make(chan os.Signal, 1)
	unlocking := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- Run(Options{Config: c, Version: "v-test", Log: slog.New(slog.NewTextHandler(logs.f, nil)), Signals: sigs,
			Unlock: func(ctx context.Context, _ *config.Config) (objstore.Store, *keys.Keys, error) {
				close(unlocking)
				<-ctx.Done() // a store that does not answer
				return nil, nil, fmt.Errorf("unlocking: %w", ctx.Err())
			}})
	}()
	<-unlocking
	sigs <- syscall.SIGTERM
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run stopped during startup: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("a signal during startup did not stop Run; log:\n%s", logs.String())
	}
	if !logsSay(logs, "signal during startup") {
		t.Errorf("the log does not say why it stopped:\n%s", logs.String())
	}
	if _, ok, _ := mountinfo.Find(c.Mount.Path); ok {
		t.Errorf("%s mounted", c.Mount.Path)
	}
	leaks.Check(t, 10*time.Second)
}
