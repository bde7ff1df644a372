// Package mountinfo reads the kernel's mount table (/proc/self/mountinfo),
// the one parser the ebbfs command, its tests and its benchmark share.
package mountinfo

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Entry is one mount.
type Entry struct {
	Dev        string // major:minor of the mounted device
	Mountpoint string
	Options    string // per-mount options
	FSType     string // e.g. "fuse.ebbfs"
	Source     string
	Super      string // superblock options
}

// Read parses /proc/self/mountinfo.
func Read() ([]Entry, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return Parse(b), nil
}

// Parse parses mountinfo text; malformed lines are skipped. A line is
// "id parent major:minor root mountpoint options [optional...] - fstype
// source superoptions".
func Parse(b []byte) []Entry {
	var out []Entry
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
		e := Entry{
			Dev:        f[2],
			Mountpoint: Unescape(f[4]),
			Options:    f[5],
			FSType:     f[sep+1],
			Source:     Unescape(f[sep+2]),
		}
		if len(f) > sep+3 {
			e.Super = f[sep+3]
		}
		out = append(out, e)
	}
	return out
}

// Find returns the mount at mountpoint p (the last one, if several are
// stacked).
func Find(p string) (Entry, bool, error) {
	ms, err := Read()
	if err != nil {
		return Entry{}, false, err
	}
	var found Entry
	ok := false
	for _, m := range ms {
		if m.Mountpoint == p {
			found, ok = m, true
		}
	}
	return found, ok, nil
}

// Under returns the mounts at dir or below it.
func Under(dir string) []Entry {
	ms, _ := Read()
	var out []Entry
	for _, m := range ms {
		if m.Mountpoint == dir || strings.HasPrefix(m.Mountpoint, strings.TrimSuffix(dir, "/")+"/") {
			out = append(out, m)
		}
	}
	return out
}

// Holding returns the mount that holds path: the one with the longest
// mountpoint that is path or a parent of it.
func Holding(path string) (Entry, bool) {
	ms, _ := Read()
	var best Entry
	ok := false
	for _, m := range ms {
		if path == m.Mountpoint || strings.HasPrefix(path, strings.TrimSuffix(m.Mountpoint, "/")+"/") {
			if !ok || len(m.Mountpoint) >= len(best.Mountpoint) {
				best, ok = m, true
			}
		}
	}
	return best, ok
}

// Unescape undoes the kernel's octal escapes (\040 for a space, ...).
func Unescape(s string) string {
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
