package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"ebbfs.dev/ebbfs/fs/fuse"
	"ebbfs.dev/ebbfs/internal/config"
)

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	Mountpoint string
	FSType     string
	Source     string
	Options    string // per-mount options (rw, nosuid, ...)
	Super      string // superblock options (user_id, default_permissions, ...)
}

// readMounts parses /proc/self/mountinfo.
func readMounts() ([]mountEntry, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseMountinfo(b), nil
}

// parseMountinfo parses mountinfo text; malformed lines are skipped.
// Format: id parent major:minor root mountpoint options [optional...] - fstype source superoptions
func parseMountinfo(b []byte) []mountEntry {
	var out []mountEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i, x := range f {
			if x == "-" && i >= 6 {
				sep = i
				break
			}
		}
		if sep < 0 || len(f) < sep+3 {
			continue
		}
		e := mountEntry{
			Mountpoint: unescapeMount(f[4]),
			Options:    f[5],
			FSType:     f[sep+1],
			Source:     unescapeMount(f[sep+2]),
		}
		if len(f) > sep+3 {
			e.Super = f[sep+3]
		}
		out = append(out, e)
	}
	return out
}

// unescapeMount undoes the kernel's octal escapes (\040 for space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// findMount returns the mount whose mountpoint is p (the last one, if
// several are stacked).
func findMount(p string) (mountEntry, bool, error) {
	ms, err := readMounts()
	if err != nil {
		return mountEntry{}, false, err
	}
	var found mountEntry
	ok := false
	for _, m := range ms {
		if m.Mountpoint == p {
			found, ok = m, true
		}
	}
	return found, ok, nil
}

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
