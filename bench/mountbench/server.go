package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// server is a FUSE server running as a child process: the harness's own
// go-fuse loopback or ebbfs.
type server struct {
	name   string
	mp     string
	fstype string // in /proc/self/mountinfo, e.g. "fuse.ebbfs"
	logf   string // the child's stdout and stderr
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait returned
	err    error         // cmd.Wait's result, valid once exited is closed
	once   sync.Once
}

// startServer starts argv with its output in logf and waits until mp is
// mounted with fstype. The child gets SIGTERM if the harness dies (both
// servers unmount and exit on SIGTERM).
func startServer(name, mp, fstype, logf string, argv ...string) (*server, error) {
	lf, err := os.OpenFile(logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:   true, // a Ctrl-C reaches the harness, which stops the servers in order
		Pdeathsig: syscall.SIGTERM,
	}
	s := &server{name: name, mp: mp, fstype: fstype, logf: logf, cmd: cmd, exited: make(chan struct{})}
	if err := register(s); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	go func() {
		s.err = cmd.Wait()
		close(s.exited)
	}()
	if err := waitMount(mp, fstype, s.exited, 2*time.Minute); err != nil {
		return s, fmt.Errorf("%s: %w%s", name, err, s.logTail())
	}
	return s, nil
}

func (s *server) pid() int { return s.cmd.Process.Pid }

// logTail returns the end of the child's log, for error messages.
func (s *server) logTail() string {
	b, err := os.ReadFile(s.logf)
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return "\n--- " + s.logf + " (tail) ---\n" + strings.TrimRight(string(b), "\n")
}

// stop unmounts with umount(8), the clean way, and waits for the server to
// exit 0. It returns how long that took.
func (s *server) stop(timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	var err error
	s.once.Do(func() {
		select {
		case <-s.exited:
			why := "exit 0"
			if s.err != nil {
				why = s.err.Error()
			}
			err = fmt.Errorf("%s had already exited (%s)%s", s.name, why, s.logTail())
			forceUnmount(s.mp)
			return
		default:
		}
		if out, uerr := exec.Command("umount", s.mp).CombinedOutput(); uerr != nil {
			err = fmt.Errorf("umount %s: %v: %s", s.mp, uerr, bytes.TrimSpace(out))
			s.kill()
			return
		}
		select {
		case <-s.exited:
		case <-time.After(timeout):
			err = fmt.Errorf("%s did not exit within %v of umount", s.name, timeout)
			s.kill()
			return
		}
		if s.err != nil {
			err = fmt.Errorf("%s exited with %v after umount%s", s.name, s.err, s.logTail())
		}
	})
	return time.Since(start), err
}

// kill is the last resort: detach the mount lazily, SIGTERM, and SIGKILL
// after a grace period (which also aborts the FUSE connection, so that
// requests stuck in the kernel fail instead of hanging).
func (s *server) kill() {
	forceUnmount(s.mp)
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	forceUnmount(s.mp)
}

// The servers started, for emergency cleanup.
var servers struct {
	sync.Mutex
	closed bool
	list   []*server
}

// register starts s's process and records it, unless cleanup has begun.
func register(s *server) error {
	servers.Lock()
	defer servers.Unlock()
	if servers.closed {
		return errors.New("cleaning up")
	}
	if err := s.cmd.Start(); err != nil {
		return err
	}
	servers.list = append(servers.list, s)
	return nil
}

// killAll stops every server that has not been stopped, newest first; no
// server starts after it.
func killAll() {
	servers.Lock()
	servers.closed = true
	list := append([]*server(nil), servers.list...)
	servers.Unlock()
	for i := len(list) - 1; i >= 0; i-- {
		s := list[i]
		s.once.Do(s.kill)
	}
}

// Helper commands (go build, ebbfs init, the db group's servers and clients) that are running, so that
// cleanup can stop them before it removes the work directory.
var helpers struct {
	sync.Mutex
	closed bool
	m      map[*exec.Cmd]chan struct{}
}

// runHelper runs cmd in its own process group and returns its combined
// output.
func runHelper(cmd *exec.Cmd) ([]byte, error) { return runHelperAs(cmd, nil) }

// runHelperAs is runHelper with the command run as cred's user (if set).
func runHelperAs(cmd *exec.Cmd, cred *syscall.Credential) ([]byte, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	h, err := startHelper(cmd, cred, syscall.SIGKILL)
	if err != nil {
		return nil, err
	}
	<-h.done
	return out.Bytes(), h.err
}

// helperProc is a helper command started by startHelper.
type helperProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it has exited
	err  error         // cmd.Wait's, valid once done is closed
}

// startHelper starts cmd (as cred's user if set) in its own process
// group, with death signal sig, and registers it, so that cleanup kills
// its process group. Output goes where cmd.Stdout and cmd.Stderr say.
func startHelper(cmd *exec.Cmd, cred *syscall.Credential, sig syscall.Signal) (*helperProc, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: sig, Credential: cred}
	helpers.Lock()
	defer helpers.Unlock()
	if helpers.closed {
		return nil, errors.New("cleaning up")
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	h := &helperProc{cmd: cmd, done: make(chan struct{})}
	if helpers.m == nil {
		helpers.m = map[*exec.Cmd]chan struct{}{}
	}
	helpers.m[cmd] = h.done
	go func() {
		h.err = cmd.Wait()
		helpers.Lock()
		delete(helpers.m, cmd)
		helpers.Unlock()
		close(h.done)
	}()
	return h, nil
}

// killHelpers kills every running helper's process group and waits for
// the helpers to exit; later runHelper calls fail.
func killHelpers() {
	helpers.Lock()
	helpers.closed = true
	var waits []chan struct{}
	for cmd, done := range helpers.m {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		waits = append(waits, done)
	}
	helpers.Unlock()
	for _, w := range waits {
		<-w
	}
}
