// Package mounthelper is mount(8)'s side of ebbfs: it parses the
// "mount.fuse.ebbfs CONFIG MOUNTPOINT -o OPTIONS" calling convention and
// fstab options, starts "ebbfs run" detached and waits for the mount, and
// answers "-o remount".
package mounthelper

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"ebbfs.dev/ebbfs/fs/fuse"
	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/internal/mountinfo"
)

// UsageError is a malformed command line (the command exits 2).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// mountWaitTimeout bounds how long the helper waits for the mount to
// appear (recovery from a remote store can take a while).
const mountWaitTimeout = 5 * time.Minute

type helperArgs struct {
	config, mountpoint string
	readOnly           bool
	standby            bool // -o standby: ebbfs run --standby
	rwGiven            bool // "ro" or "rw" was among the options
	remount            bool
	fake, verbose      bool
	ignored            []string
}

// parseHelperArgs parses "SPEC DIR [-sfnv] [-o opts] [-t type] [-N ns]".
func parseHelperArgs(args []string) (*helperArgs, error) {
	h := &helperArgs{}
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-h" || a == "--help":
			return nil, &UsageError{errors.New("usage: mount.fuse.ebbfs CONFIG MOUNTPOINT [-o OPTIONS]")}
		case a == "-o" || a == "-t" || a == "-N":
			if i+1 >= len(args) {
				return nil, &UsageError{fmt.Errorf("%s needs a value", a)}
			}
			i++
			if a == "-o" {
				h.addOptions(args[i])
			} else if a == "-N" {
				return nil, errors.New("mount namespaces (-N) are not supported")
			}
		case strings.HasPrefix(a, "-o") && len(a) > 2:
			h.addOptions(a[2:])
		case strings.HasPrefix(a, "-t") && len(a) > 2:
		case strings.HasPrefix(a, "-") && len(a) > 1 && strings.Trim(a[1:], "sfnvr") == "":
			h.fake = h.fake || strings.Contains(a, "f")
			h.verbose = h.verbose || strings.Contains(a, "v")
			h.readOnly = h.readOnly || strings.Contains(a, "r")
		case strings.HasPrefix(a, "-") && a != "-":
			return nil, &UsageError{fmt.Errorf("unknown flag %q", a)}
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return nil, &UsageError{fmt.Errorf("usage: mount.fuse.ebbfs CONFIG MOUNTPOINT [-o OPTIONS] (got %d arguments)", len(pos))}
	}
	h.config, h.mountpoint = pos[0], pos[1]
	return h, nil
}

func (h *helperArgs) addOptions(s string) {
	for _, o := range strings.Split(s, ",") {
		switch {
		case o == "":
		case o == "ro":
			h.readOnly, h.rwGiven = true, true
		case o == "rw":
			h.readOnly, h.rwGiven = false, true
		case o == "remount":
			h.remount = true
		case o == "standby":
			h.standby = true
		default:
			// Generic mount(8) and fstab options (defaults, _netdev, nofail,
			// noauto, user, x-systemd.*, ...) and FUSE options that [mount]
			// configures instead.
			h.ignored = append(h.ignored, o)
		}
	}
}

// Run runs mount.fuse.ebbfs with args (those after the program name).
func Run(args []string) error {
	h, err := parseHelperArgs(args)
	if err != nil {
		return err
	}
	if h.remount {
		if h.fake {
			return nil
		}
		return remount(h)
	}
	c, err := config.Load(h.config)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(h.mountpoint, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("mountpoint: %w", err)
	}
	mp, err := mountinfo.Canonical(h.mountpoint)
	if err != nil {
		return err
	}
	c.Mount.Path = mp
	if h.verbose && len(h.ignored) > 0 {
		fmt.Fprintf(os.Stderr, "mount.fuse.ebbfs: ignoring options %s\n", strings.Join(h.ignored, ","))
	}
	if h.fake {
		return nil
	}
	if m, ok, err := mountinfo.Find(mp); err != nil {
		return err
	} else if ok {
		if m.FSType != "fuse."+fuse.Name || !mountinfo.DeadFUSE(mp) {
			return fmt.Errorf("%s is already mounted (%s)", mp, m.FSType)
		}
		// A dead ebbfs mount: ebbfs run detaches it.
	}
	if err := os.MkdirAll(c.Cache.Dir, 0o700); err != nil {
		return fmt.Errorf("cache directory: %w", err)
	}
	logPath := c.LogFile()
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("log file: %w", err)
	}
	defer logf.Close()
	startOff, _ := logf.Seek(0, io.SeekEnd)
	fmt.Fprintf(logf, "--- %s mount.fuse.ebbfs: starting ebbfs run -c %s at %s\n", time.Now().Format(time.RFC3339), c.Path, mp)

	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the ebbfs binary: %w", err)
	}
	runArgs := []string{"run", "-c", c.Path, "--mountpoint", mp}
	if h.standby && h.readOnly {
		return &UsageError{errors.New("-o standby becomes the writer when the writer fails; it goes without ro")}
	}
	if h.standby {
		runArgs = append(runArgs, "--standby")
	}
	if h.readOnly {
		runArgs = append(runArgs, "--read-only")
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	cmd := exec.Command(self, runArgs...)
	cmd.Stdin = devnull
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting ebbfs run: %w", err)
	}
	deadline := time.After(mountWaitTimeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-deadline:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			return fmt.Errorf("%s did not appear within %s; stopped the writer; see %s:\n%s", mp, mountWaitTimeout, logPath, logTail(logPath, startOff))
		case <-tick.C:
			// The writer is polled for, not waited for in a goroutine:
			// once the mount is up the helper returns and the writer
			// lives on in its own session.
			if status, ok := exited(cmd.Process.Pid); ok {
				// The run may have mounted and then stopped at once;
				// report what it said either way.
				return fmt.Errorf("ebbfs run exited before the mount appeared (%s); its log (%s):\n%s", status, logPath, logTail(logPath, startOff))
			}
			if m, ok, _ := mountinfo.Find(mp); ok && m.FSType == "fuse."+fuse.Name {
				// statfs reaches the daemon: a dead mount the writer is
				// about to detach does not count.
				if err := mountinfo.Statfs(mp); err == nil {
					if h.verbose {
						fmt.Fprintf(os.Stderr, "mount.fuse.ebbfs: %s mounted by pid %d; log in %s\n", mp, cmd.Process.Pid, logPath)
					}
					return nil // the writer lives on in its own session
				}
			}
		}
	}
}

// exited reaps the child pid if it has exited and describes how.
func exited(pid int) (string, bool) {
	var ws syscall.WaitStatus
	got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	switch {
	case err != nil:
		return err.Error(), true
	case got != pid:
		return "", false
	case ws.Signaled():
		return "signal: " + ws.Signal().String(), true
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus()), true
}

// logTail returns the log written since off (at most the last 4 KiB).
func logTail(p string, off int64) string {
	b, err := os.ReadFile(p)
	if err != nil || off > int64(len(b)) {
		return "(log unavailable)"
	}
	b = b[off:]
	if len(b) > 4096 {
		b = b[len(b)-4096:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return strings.TrimRight(string(b), "\n")
}

// fstabOnly are options that only mean something to mount(8) or fstab; a
// remount may repeat them freely.
var fstabOnly = map[string]bool{
	"defaults": true, "_netdev": true, "nofail": true, "auto": true, "noauto": true,
	"user": true, "nouser": true, "users": true, "owner": true, "group": true,
	"remount": true,
}

// remount handles "mount -o remount[,OPTIONS] MOUNTPOINT". ebbfs cannot
// change a live mount: a remount that asks for what the mount already is
// (the same config, the same ro/rw, options it already has) succeeds and
// changes nothing; one that asks for a change fails and says why.
func remount(h *helperArgs) error {
	mp, err := mountinfo.Canonical(h.mountpoint)
	if err != nil {
		return err
	}
	m, ok, err := mountinfo.Find(mp)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("remount: nothing is mounted at %s", mp)
	case m.FSType != "fuse."+fuse.Name:
		return fmt.Errorf("remount: %s is a %s mount, not ebbfs", mp, m.FSType)
	case mountinfo.DeadFUSE(mp):
		return fmt.Errorf("remount: the ebbfs mount at %s is dead (its writer exited); unmount it and mount again", mp)
	}
	return sameMount(h, mp, m)
}

// sameMount checks that a remount asks for what the mount m at mp already
// is (see remount).
func sameMount(h *helperArgs, mp string, m mountinfo.Entry) error {
	// mount(8) passes the mount's source, which is its config file.
	if h.config != "" && h.config != m.Source && h.config != fuse.Name {
		want, err := filepath.Abs(h.config)
		if err != nil || want != m.Source {
			return fmt.Errorf("remount: %s is mounted from %s, not %s; ebbfs cannot switch a live mount to another config (unmount it and mount again)", mp, m.Source, h.config)
		}
	}
	cur := map[string]bool{}
	for _, o := range strings.Split(m.Options+","+m.Super, ",") {
		cur[o] = true
	}
	if h.rwGiven && h.readOnly != cur["ro"] {
		from, to := "read-write", "read-only"
		if cur["ro"] {
			from, to = to, from
		}
		return fmt.Errorf("remount: ebbfs cannot change the live mount at %s from %s to %s; unmount it and mount again with -o %s", mp, from, to, map[bool]string{true: "ro", false: "rw"}[h.readOnly])
	}
	for _, o := range h.ignored {
		if fstabOnly[o] || strings.HasPrefix(o, "x-") || strings.HasPrefix(o, "comment=") || cur[o] {
			continue
		}
		return fmt.Errorf("remount: option %q cannot be changed on the live ebbfs mount at %s (mounted with %s); unmount it and mount again", o, mp, m.Options)
	}
	if h.verbose {
		fmt.Fprintf(os.Stderr, "mount.fuse.ebbfs: %s: remount with the same options: nothing to change\n", mp)
	}
	return nil
}
