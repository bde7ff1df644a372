package mountinfo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Canonical makes p absolute and resolves symlinks, as the kernel records
// it in mountinfo.
func Canonical(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("mountpoint %s does not exist", abs)
		}
		// A dead FUSE mount (ENOTCONN) cannot be stat'ed; keep the path.
		return filepath.Clean(abs), nil
	}
	return real, nil
}

// probeEnv names the path a re-executed binary statfs's before it exits
// (RunProbe).
const probeEnv = "EBBFS_STATFS_PROBE"

// Exit statuses of a probe.
const (
	probeOK           = 0
	probeFailed       = 1 // any other error
	probeNotConn      = 2 // ENOTCONN
	probeConnAborted  = 3 // ECONNABORTED
	probeReapInterval = 10 * time.Millisecond
)

// ProbeTimeout bounds how long Statfs waits for the probe's answer.
var ProbeTimeout = 3 * time.Second

// ErrNoAnswer is Statfs's error when the filesystem did not answer within
// ProbeTimeout.
var ErrNoAnswer = errors.New("statfs: no answer")

// RunProbe makes this process a statfs probe if it was started as one by
// Statfs: it statfs's the path, exits with the result and never returns.
// Otherwise it returns at once. A binary that uses Statfs calls it first
// thing in main (and a test binary in TestMain).
func RunProbe() {
	p, ok := os.LookupEnv(probeEnv)
	if !ok {
		return
	}
	var st syscall.Statfs_t
	err := syscall.Statfs(p, &st)
	switch {
	case err == nil:
		os.Exit(probeOK)
	case errors.Is(err, syscall.ENOTCONN):
		os.Exit(probeNotConn)
	case errors.Is(err, syscall.ECONNABORTED):
		os.Exit(probeConnAborted)
	}
	os.Exit(probeFailed)
}

// Statfs asks the filesystem mounted at p whether it answers: nil if
// statfs succeeds, syscall.ENOTCONN or ECONNABORTED for a FUSE mount
// without a daemon, ErrNoAnswer if it does not answer within
// ProbeTimeout, another error otherwise.
//
// statfs always reaches a FUSE daemon (stat may be answered from the
// kernel's attribute cache), and on a mount whose daemon hangs it blocks
// until that daemon answers, perhaps forever. So it runs in a child
// process (this binary again, see RunProbe) and not in a goroutine: the
// caller polls for the child's exit without a goroutine of its own, and
// once the bound has passed it kills the child and returns. A child stuck
// in the kernel (its request already read by the hung daemon, which
// SIGKILL does not interrupt) is left behind: it holds no goroutine and no
// lock of this process, and is reaped by init once this process exits.
func Statfs(p string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("statfs probe: %w", err)
	}
	proc, err := os.StartProcess(exe, []string{exe}, &os.ProcAttr{
		Dir:   "/",
		Env:   append(os.Environ(), probeEnv+"="+p),
		Files: []*os.File{nil, nil, os.Stderr},
	})
	if err != nil {
		return fmt.Errorf("statfs probe: %w", err)
	}
	defer proc.Release()
	status, exited := reap(proc.Pid, time.Now().Add(ProbeTimeout))
	if !exited {
		_ = proc.Kill()
		reap(proc.Pid, time.Now().Add(time.Second)) // gone unless stuck in the kernel
		return ErrNoAnswer
	}
	switch status {
	case probeOK:
		return nil
	case probeNotConn:
		return syscall.ENOTCONN
	case probeConnAborted:
		return syscall.ECONNABORTED
	}
	return fmt.Errorf("statfs %s failed (probe exit status %d)", p, status)
}

// reap waits for the child pid to exit until deadline, polling so that no
// goroutine is left waiting for a child that never exits. It returns the
// exit status (-1 if killed by a signal) and whether the child exited.
func reap(pid int, deadline time.Time) (int, bool) {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		switch {
		case err != nil && !errors.Is(err, syscall.EINTR):
			return -1, true // ECHILD: not ours any more
		case got == pid && ws.Exited():
			return ws.ExitStatus(), true
		case got == pid:
			return -1, true
		}
		if time.Now().After(deadline) {
			return 0, false
		}
		time.Sleep(probeReapInterval)
	}
}

// DeadFUSE reports whether the FUSE mount at mp has no daemon behind it
// (ENOTCONN). A daemon that does not answer within ProbeTimeout counts as
// alive.
func DeadFUSE(mp string) bool {
	err := Statfs(mp)
	return errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED)
}
