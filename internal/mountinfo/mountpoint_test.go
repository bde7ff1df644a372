package mountinfo

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// hangEnv makes a probe child of this test binary hang instead of
// answering, as a probe of a mount whose daemon hangs does.
const hangEnv = "EBBFS_MOUNTINFO_TEST_HANG"

func TestMain(m *testing.M) {
	if _, ok := os.LookupEnv(probeEnv); ok && os.Getenv(hangEnv) != "" {
		time.Sleep(time.Hour)
	}
	RunProbe()
	os.Exit(m.Run())
}

// noChildren fails if this process still has a child, running or not
// reaped.
func noChildren(t *testing.T) {
	t.Helper()
	var ws syscall.WaitStatus
	if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); !errors.Is(err, syscall.ECHILD) {
		t.Errorf("a probe child is left behind: wait4 = %d, %v", pid, err)
	}
}

func TestStatfsAnswers(t *testing.T) {
	dir := t.TempDir()
	if err := Statfs(dir); err != nil {
		t.Errorf("statfs of a directory: %v", err)
	}
	if DeadFUSE(dir) {
		t.Error("a plain directory counts as a dead FUSE mount")
	}
	err := Statfs(filepath.Join(dir, "missing"))
	if err == nil || errors.Is(err, syscall.ENOTCONN) || errors.Is(err, ErrNoAnswer) {
		t.Errorf("statfs of a missing path: %v, want a plain failure", err)
	}
	noChildren(t)
}

func TestStatfsOfAMountThatHangs(t *testing.T) {
	t.Setenv(hangEnv, "1")
	old := ProbeTimeout
	ProbeTimeout = 200 * time.Millisecond
	defer func() { ProbeTimeout = old }()
	start := time.Now()
	err := Statfs(t.TempDir())
	if !errors.Is(err, ErrNoAnswer) {
		t.Fatalf("statfs that hangs: %v, want ErrNoAnswer", err)
	}
	if took := time.Since(start); took > ProbeTimeout+5*time.Second {
		t.Errorf("statfs that hangs returned after %v; bound %v", took, ProbeTimeout)
	}
	noChildren(t)
}

func TestCanonical(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.EvalSymlinks(real)
	if got, err := Canonical(link + "/"); err != nil || got != want {
		t.Errorf("Canonical(link) = %q, %v; want %q", got, err, want)
	}
	if _, err := Canonical(filepath.Join(dir, "nothing")); err == nil {
		t.Error("Canonical of a missing path succeeded")
	}
}
