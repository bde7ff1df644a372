// Command ebbfs is the ebbfs command line: it creates filesystems (init),
// runs the writer or a reader (run), talks to a running one (flush,
// status), changes the password, checks consistency (fsck), and implements
// the mount.fuse.ebbfs calling convention of mount(8).
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"ebbfs.dev/ebbfs/internal/mounthelper"
	"ebbfs.dev/ebbfs/internal/mountinfo"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// MountHelperName is the name mount(8) runs for "-t fuse.ebbfs".
const MountHelperName = "mount.fuse.ebbfs"

func main() {
	mountinfo.RunProbe() // a child started to statfs a mount does only that
	os.Exit(run(os.Args))
}

func run(args []string) int {
	if len(args) > 0 && filepath.Base(args[0]) == MountHelperName {
		return exitCode(mounthelper.Run(args[1:]))
	}
	cmd := newRootCmd()
	cmd.SetArgs(args[1:])
	return exitCode(cmd.Execute())
}

// exitError carries a specific exit status.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Exit codes.
const (
	exitOK        = 0
	exitFailure   = 1
	exitUsage     = 2
	exitWrongPass = 3
)

func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(os.Stderr, "ebbfs: %v\n", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var ue *usageError
	var he *mounthelper.UsageError
	if errors.As(err, &ue) || errors.As(err, &he) {
		return exitUsage
	}
	return exitFailure
}

type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }
