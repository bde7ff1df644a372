package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"ebbfs.dev/ebbfs/internal/mountinfo"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat. It
// is 100 on every Linux architecture Go supports.
const clockTicks = 100

// dropCaches writes back dirty pages and drops the page cache, dentries
// and inodes, so that the next read comes from the disk. It needs root.
func dropCaches() error {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		return fmt.Errorf("drop caches (needs root): %w", err)
	}
	return nil
}

// cacheDrops returns how many times the page cache has been dropped since
// boot (drop_pagecache in /proc/vmstat), or -1. Other processes dropping
// it during a measurement turn warm reads into cold ones.
func cacheDrops() int64 {
	b, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "drop_pagecache "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// loadAvg returns the 1-minute load average, or -1.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// loadAvgLine returns the first three fields of /proc/loadavg.
func loadAvgLine() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// cpuTime returns the user+system CPU time a process has used so far.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is parenthesised and may hold spaces:
	// count from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc/PID/stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, errors.New("short /proc/PID/stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// procIO returns the bytes a process made the block layer read and write
// (read_bytes, write_bytes in /proc/PID/io).
func procIO(pid int) (rd, wr int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, 0, err
	}
	rd, wr = -1, -1
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "read_bytes":
			rd = n
		case "write_bytes":
			wr = n
		}
	}
	if rd < 0 || wr < 0 {
		return 0, 0, errors.New("no read_bytes/write_bytes in /proc/PID/io")
	}
	return rd, wr, nil
}

// dirBytes sums the sizes of the regular files under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// memStatus returns VmHWM (peak RSS) and VmRSS of a process, in bytes.
func memStatus(pid int) (hwm, rss int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	hwm, rss = -1, -1
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmHWM" && k != "VmRSS") {
			continue
		}
		f := strings.Fields(v) // "123456 kB"
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("unexpected %s line %q", k, sc.Text())
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		if k == "VmHWM" {
			hwm = n << 10
		} else {
			rss = n << 10
		}
	}
	if hwm < 0 || rss < 0 {
		return 0, 0, errors.New("no VmHWM/VmRSS in /proc/PID/status")
	}
	return hwm, rss, nil
}

// mountFSType returns the filesystem type mounted at mp ("" when nothing
// is). The last of stacked mounts wins.
func mountFSType(mp string) (string, error) {
	m, _, err := mountinfo.Find(mp)
	return m.FSType, err
}

// mountsUnder lists the mountpoints at or below dir.
func mountsUnder(dir string) []string {
	var out []string
	for _, m := range mountinfo.Under(dir) {
		out = append(out, m.Mountpoint)
	}
	return out
}

// waitMount polls the mount table until mp carries fstype, the child
// exits, or the timeout passes.
func waitMount(mp, fstype string, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		typ, err := mountFSType(mp)
		if err != nil {
			return err
		}
		if typ == fstype {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("the server exited before %s was mounted", mp)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not mounted as %s after %v (now %q)", mp, fstype, timeout, typ)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// forceUnmount detaches mp lazily, with umount -l and then fusermount3 -u -z,
// ignoring failures (it is the last resort of cleanup).
func forceUnmount(mp string) {
	if typ, _ := mountFSType(mp); typ == "" {
		return
	}
	if out, err := exec.Command("umount", "-l", mp).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "mountbench: umount -l %s: %v %s\n", mp, err, bytes.TrimSpace(out))
	}
	if typ, _ := mountFSType(mp); typ == "" {
		return
	}
	if out, err := exec.Command("fusermount3", "-u", "-z", mp).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "mountbench: fusermount3 -u -z %s: %v %s\n", mp, err, bytes.TrimSpace(out))
	}
}
