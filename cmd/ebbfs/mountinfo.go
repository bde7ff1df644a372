package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"ebbfs.dev/ebbfs/fs/fuse"
	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/internal/mountinfo"
)

// findMount returns the mount at mountpoint p (the last of stacked ones).
func findMount(p string) (mountinfo.Entry, bool, error) { return mountinfo.Find(p) }

// canonicalMountpoint makes p absolute and resolves symlinks, as the
// kernel records it in mountinfo.
func canonicalMountpoint(p string) (string, error) {
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

// mountSource is the source the mount shows in /proc/mounts, findmnt and
// df: the absolute path of the config file, which is also what
// "mount -t fuse.ebbfs CONFIG MOUNTPOINT" and an fstab line name, so tools
// (and test suites) identify the mount by it. A config not loaded from a
// file shows as "ebbfs".
func mountSource(c *config.Config) string {
	if c.Path == "" {
		return fuse.Name
	}
	return c.Path
}
